"""Where the target's committed text stands in the drafter's candidate stream.

The drafter's text drifts from the target's (a word substituted, missing or extra, another split
at a window edge). The aligner keeps a pointer into the stream that moves one step per committed
token while the two agree, and re-synchronises after a disagreement by finding the last few
committed tokens in the stream near the pointer. It never waits and need not be right: a wrong
guess costs a rejected candidate, never a wrong output.

Most disagreements between two Whisper models are style: one long punctuated sentence against
closed segments that start with a capital ("times, it was" against "times" | "It was"). Given
the target's :class:`TokenKeys`, the aligner steps over punctuation the target dropped, matches
"it" and "It" when re-synchronising, offers the drafter's punctuation only while the target
keeps it, and capitalises a first word as the target has been doing at that kind of start.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from as2d.runtime.numbers import NUMBER_WORDS
from as2d.runtime.speculative.lookup import NgramIndex
from as2d.runtime.speculative.stream import CandidateStream

SENTENCE, SEGMENT = "sentence", "segment"  # kinds of start (see Aligner.candidates)


class TokenKeys:
    """What two spellings of a token share, in one vocabulary: its letters and digits, lower
    case, a number word read as its digits. Tokens of punctuation and spaces alone (in any
    script) have no key: the aligner may step over them."""

    def __init__(self, token_bytes: Sequence[bytes] | Callable[[], Sequence[bytes]],
                 encode_piece: Callable[[str], Sequence[int]]) -> None:
        # A callable is asked on first use: a tokenizer's byte table takes ~70 ms of Python
        # to build, which should not sit before the first window's encoder.
        self._table = token_bytes
        self._encode = encode_piece
        self._keys: dict[int, str] = {}

    @property
    def _bytes(self) -> Sequence[bytes]:
        if callable(self._table):
            self._table = self._table()
        return self._table

    def raw(self, token: int) -> bytes:
        """The token's bytes (empty for special and timestamp tokens)."""
        table = self._bytes
        return table[token] if 0 <= token < len(table) else b""

    def text(self, token: int) -> str | None:
        """The token as text, or None if it is only part of a UTF-8 character."""
        try:
            return self.raw(token).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def key(self, token: int) -> str:
        k = self._keys.get(token)
        if k is None:
            raw, text = self.raw(token), self.text(token)
            if not raw:
                k = f"<{token}>"  # special tokens match only themselves
            elif text is None:
                k = "x" + raw.hex()  # a piece of a character: only the same piece matches
            else:
                k = "".join(c for c in text.lower() if c.isalnum())
                if raw[:1] == b" ":  # a whole word, not a piece of one: "Ten" is "10"
                    k = NUMBER_WORDS.get(k, k)  # (tiny.en writes "10 of clubs", base "Ten")
            self._keys[token] = k
        return k

    def is_punct(self, token: int) -> bool:
        return self.key(token) == ""

    def starts_word(self, token: int) -> bool:
        """Does ``token`` begin a new word (a leading space), or is it punctuation?"""
        return self.raw(token)[:1] == b" " or self.is_punct(token)

    def has_capital(self, token: int) -> bool:
        """Does the word in ``token`` begin with an upper-case letter?"""
        text = (self.text(token) or "").lstrip()
        return bool(text) and text[0].isupper()

    def ends_sentence(self, token: int) -> bool:
        return (self.text(token) or "").rstrip()[-1:] in (".", "?", "!", "。", "？", "！")

    def capitalised(self, word: Sequence[int]) -> list[int]:
        """``word`` (the ids of one word with its leading space) with a capital initial."""
        try:
            text = b"".join(self.raw(t) for t in word).decode("utf-8")
        except UnicodeDecodeError:
            return list(word)
        if len(text) < 2 or text[0] != " " or not text[1].islower():
            return list(word)
        return list(self._encode(" " + text[1].upper() + text[2:]))


class Aligner:
    def __init__(self, stream: CandidateStream, ahead: int = 40, max_ngram: int = 4,
                 keys: TokenKeys | None = None, reach: int = 160) -> None:
        self.stream = stream
        self.ahead, self.max_ngram = ahead, max_ngram
        self.reach = reach  # how far behind the pointer a re-synchronisation may land
        self.keys = keys
        self.pos = 0  # stream index of the token expected next
        self.floor = 0  # just after the last stream word the target confirmed: never go back
        self.synced = True
        self.history: list[int] = []  # committed text tokens, in order
        self.pos_after: list[int] = []  # pointer after each history token
        self.end = 0  # stream index just after the last candidate handed out
        self._window_mark = 0  # history length at the start of the current window
        self._window_pos = 0
        # Does the target keep the drafter's punctuation? (decayed counts, kept vs dropped)
        self._punct_kept = 1.0
        self._punct_dropped = 0.0
        # Does it start a sentence, or a segment within a sentence, with a capital? (decayed
        # counts of yes and no, by kind of start)
        self._capitals = {SENTENCE: [1.0, 0.0], SEGMENT: [1.0, 0.0]}
        # The stream's words (punctuation aside), by key, indexed as they arrive: where each
        # is in the stream, and the n-grams of their keys (what a re-synchronisation finds).
        self._word_at: list[int] = []
        self._word_keys: list = []
        self._words = NgramIndex(max_ngram)
        self._read = 0  # stream tokens read into them

    # -- target side --------------------------------------------------------------------------
    def sync(self) -> bool:
        """Try to re-synchronise now (the stream may have grown since the last attempt)."""
        return self.synced or self._resync()

    def candidates(self, k: int, start: str | None = None) -> list[int]:
        """Up to ``k`` ready stream tokens expected next (empty: nothing usable yet).

        They stop at the drafter's next segment boundary, where the target is likely to insert
        timestamps that no text candidate can match. ``start``: the target has just ended a
        sentence (:data:`SENTENCE`) or opened a segment within one (:data:`SEGMENT`): the
        drafter's punctuation before the next word is skipped and, if the target has been
        doing so at that kind of start, the word is capitalised. Punctuation further on is
        offered while the target has been keeping the drafter's. :attr:`end` is left on the
        stream index after the last stream token the candidates use.
        """
        s = self.stream.tokens
        self.end = self.pos
        if k <= 0 or self.pos >= len(s):
            return []
        keys = self.keys
        skip = keys is not None and self._punct_dropped > self._punct_kept
        bounds = self.stream.boundaries
        out: list[int] = []
        used: list[int] = []  # stream index of each candidate
        i = self.pos
        while i < len(s) and len(out) < k:
            if out and i in bounds:
                break
            t = s[i]
            i += 1
            if keys is not None and keys.is_punct(t) and (skip or (start and not out)):
                continue
            out.append(t)
            used.append(i - 1)
        self.end = i
        yes_no = self._capitals.get(start) if start else None
        if yes_no and out and keys is not None and yes_no[0] >= yes_no[1]:
            w = 1
            while w < len(out) and not keys.starts_word(out[w]):
                w += 1
            word = keys.capitalised(out[:w])
            if len(word) == w:
                out[:w] = word
            else:  # a different split: the rest of the word, and what follows, shift
                out = word + out[w:]
                used = [used[w - 1]] * len(word) + used[w:]
                if len(out) > k:
                    out, used = out[:k], used[:k]
                    self.end = used[-1] + 1 if len(out) > len(word) else self.pos
        return out

    def observe(self, token: int, start: str | None = None) -> None:
        """The target committed ``token`` (text tokens only); ``start``: the kind of start it
        was committed at (see :meth:`candidates`), to learn the target's capitals."""
        s = self.stream.tokens
        self.history.append(token)
        at = s[self.pos] if self.pos < len(s) else None
        if at is not None and self._punct(at):
            kept = at == token
            self._punct_kept = self._punct_kept * 0.9 + kept
            self._punct_dropped = self._punct_dropped * 0.9 + (not kept)
        if self._punct(token):
            if at is not None and (at == token or self._punct(at)):
                # The same mark, or another in its place. Only a word confirms the pointer
                # (moves the floor): a comma proves nothing after a guessed jump.
                self.pos += 1
            # else: punctuation the drafter did not write: the pointer stays
        else:
            if start in self._capitals and self.keys is not None:
                upper = self.keys.has_capital(token)
                yes_no = self._capitals[start]
                yes_no[0] = yes_no[0] * 0.9 + upper
                yes_no[1] = yes_no[1] * 0.9 + (not upper)
            p, skipped = self.pos, 0
            while p < len(s) and skipped < 2 and s[p] != token and self._punct(s[p]):
                p, skipped = p + 1, skipped + 1  # punctuation the target left out
            if p < len(s) and self._same(s[p], token):
                self.pos = self.floor = p + 1
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
    def _punct(self, token: int) -> bool:
        return self.keys is not None and self.keys.is_punct(token)

    def _key(self, token: int):
        return token if self.keys is None else self.keys.key(token)

    def _same(self, a: int, b: int) -> bool:
        return a == b or (self.keys is not None and self.keys.key(a) == self.keys.key(b)
                          and not self.keys.is_punct(a))

    def _last_keys(self, m: int) -> list:
        """Keys of the last ``m`` committed tokens that are not punctuation, in order."""
        out: list = []
        for t in reversed(self.history):
            if not self._punct(t):
                out.append(self._key(t))
                if len(out) == m:
                    break
        out.reverse()
        return out

    def _read_words(self) -> int:
        """Index the stream's new words; the stream's length now."""
        s = self.stream.tokens
        n = len(s)
        for i in range(self._read, n):
            if not self._punct(s[i]):
                self._word_at.append(i)
                self._word_keys.append(self._key(s[i]))
        self._read = n
        self._words.grow(self._word_keys, len(self._word_keys))
        return n

    def _resync(self) -> bool:
        """Find the last few committed tokens (punctuation aside; by key, so "It" finds "it")
        in the stream: the earliest match that ends at or after the last confirmed word, as
        drafter and target move through the audio in step (a later copy of a repeated phrase
        is likely wrong), the longest first. The match may start a little before that word
        (``4·m`` tokens for ``m`` words), not just behind the pointer: the pointer moves on one
        step per unmatched token, so after a wrong jump ahead it would otherwise stay ahead of
        the text for good. ``reach`` bounds how far behind the pointer it may start, and
        ``ahead`` (4 tokens for a one-word match) how far ahead of it it may end."""
        n = self._read_words()
        at = self._word_at
        smallest = 1 if len(self.history) - self._window_mark <= 1 else 2
        for m, ends in self._words.suffixes(self._last_keys(self.max_ngram), smallest):
            hi = min(n, self.pos + (self.ahead if m > 1 else 4))
            lo = max(0, self.floor - 4 * m, self.pos - self.reach)
            # Word ends (in words) of a match that starts at ``lo`` or later and ends at or
            # after the floor: the earliest, if it ends before ``hi``.
            first = max(bisect_left(at, lo) + m, bisect_left(at, self.floor - 1) + 1)
            i = bisect_left(ends, first)
            if i < len(ends) and ends[i] <= bisect_left(at, hi):
                self.pos = at[ends[i] - 1] + 1
                self.synced = True
                return True
        return False
