"""Where the target's committed text stands in the drafter's candidate stream.

The drafter transcribes on its own, so its text drifts from the target's: a word substituted,
one missing, one extra, a different split at a window edge. The aligner keeps a pointer into
the stream that moves one step per committed token while the two agree, and re-synchronises
after a disagreement by finding the last few committed tokens (a suffix n-gram) in the stream
near the pointer. It never waits and never needs to be right: a wrong guess only costs a
rejected candidate, never a wrong output.
"""

from __future__ import annotations

from as2d.runtime.speculative.stream import CandidateStream


class Aligner:
    def __init__(self, stream: CandidateStream, back: int = 12, ahead: int = 40,
                 max_ngram: int = 4) -> None:
        self.stream = stream
        self.back, self.ahead, self.max_ngram = back, ahead, max_ngram
        self.pos = 0  # stream index of the token expected next
        self.floor = 0  # just after the last stream token the target confirmed: never go back
        self.synced = True
        self.history: list[int] = []  # committed text tokens, in order
        self.pos_after: list[int] = []  # pointer after each history token
        self._window_mark = 0  # history length at the start of the current window
        self._window_pos = 0

    # -- target side --------------------------------------------------------------------------
    def sync(self) -> bool:
        """Try to re-synchronise now (the stream may have grown since the last attempt)."""
        return self.synced or self._resync()

    def candidates(self, k: int) -> list[int]:
        """Up to ``k`` ready stream tokens expected next (empty: nothing usable yet).

        They stop at the drafter's next segment boundary, where the target is likely to insert
        timestamps that no text candidate can match.
        """
        if k <= 0:
            return []
        s = self.stream.tokens
        pos = self.pos
        if pos >= len(s):
            return []
        end = min(len(s), pos + k)
        if self.stream.boundaries:
            for b in range(pos + 1, end):
                if b in self.stream.boundaries:
                    end = b
                    break
        return s[pos:end]

    def observe(self, token: int) -> None:
        """The target committed ``token`` (text tokens only)."""
        s = self.stream.tokens
        self.history.append(token)
        if self.pos < len(s) and s[self.pos] == token:
            self.pos += 1
            self.floor = self.pos
            self.synced = True
        else:
            # Assume a substitution until the n-gram search says otherwise.
            self.pos += 1
            self.synced = False
            self._resync()
        self.pos_after.append(self.pos)

    def window_start(self, audio_time: float | None = None) -> None:
        """A new target window begins (its first token follows the kept text)."""
        self._window_mark = len(self.history)
        self._window_pos = self.pos
        if audio_time is None or not self.stream.times:
            return
        # A window after a skipped (silent) stretch: trust the audio time over the pointer.
        s_len = min(len(self.stream.tokens), len(self.stream.times))
        at = self.stream.index_at_time(audio_time - 1.0)
        here = self.stream.times[min(self.pos, s_len - 1)] if s_len else 0.0
        if s_len and self.pos < s_len and abs(here - audio_time) > 10.0:
            self.pos = self.floor = at
            self.synced = False

    def rewind(self, kept: int) -> None:
        """Only the first ``kept`` text tokens of this window were kept (the rest is decoded
        again by the next window): move the pointer back to just after them."""
        cut = self._window_mark + kept
        if cut >= len(self.history):
            return
        del self.history[cut:]
        del self.pos_after[cut:]
        self.pos = self.pos_after[-1] if cut > self._window_mark else self._window_pos
        self.floor = min(self.floor, self.pos)
        self.synced = True

    # -- internals ----------------------------------------------------------------------------
    def _resync(self) -> bool:
        s = self.stream.tokens
        n = len(s)
        h = self.history
        in_window = len(h) - self._window_mark
        smallest = 1 if in_window <= 1 else 2
        for m in range(min(self.max_ngram, len(h)), smallest - 1, -1):
            suffix = h[-m:]
            # Monotonic: the match ends after the last confirmed token; take the earliest
            # such match, as drafter and target move through the audio in step (repeated
            # phrases make any later one likely wrong).
            lo = max(m, self.floor, self.pos - self.back)
            hi = min(n, self.pos + (self.ahead if m > 1 else 4))
            best = None
            for j in range(lo, hi + 1):
                if s[j - m : j] == suffix:
                    best = j
                    break
            if best is not None:
                self.pos = best
                self.synced = True
                return True
        return False
