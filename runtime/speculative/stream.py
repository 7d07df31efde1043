"""The candidate stream: the drafter's transcript, as target token ids, growing append-only.

This is the only thing the drafter and the target share. The drafter appends complete words
(already in the target's vocabulary) with the audio time they were heard at; the target side
reads ready tokens from any position without waiting. Appends and reads need no lock beyond
the GIL: the lists only ever grow, and a reader uses the length it saw.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class CandidateStream:
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # audio seconds, one per token
    # Index i → audio time where the drafter ended a segment between tokens i-1 and i: the
    # target is likely to put its own timestamps there.
    boundaries: dict[int, float] = field(default_factory=dict)
    finished: bool = False

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, ids: list[int], time: float) -> None:
        if not ids:
            return
        # Times first: a reader that sees a token always finds its time.
        self.times.extend([time] * len(ids))
        self.tokens.extend(ids)

    def mark_boundary(self, time: float) -> None:
        self.boundaries[len(self.tokens)] = time

    def finish(self) -> None:
        """No more tokens will come (the drafter is done, stopped or failed)."""
        self.finished = True

    def index_at_time(self, t: float) -> int:
        """First token heard at or after audio time ``t`` (binary search; times are sorted)."""
        return bisect_left(self.times, t, 0, min(len(self.times), len(self.tokens)))


class Retokenizer:
    """Turns a drafter's token ids into the target's, one complete word at a time.

    Byte-level BPE tokenisers split text into pre-tokens (a word with its leading space, a run
    of punctuation, ...) and encode each pre-token on its own, so the target's ids of a complete
    pre-token do not depend on what follows. The drafter's bytes are buffered; every pre-token
    except the last (which may still grow, or end in a partial UTF-8 character) is converted
    and released. With a shared vocabulary the ids pass straight through.
    """

    def __init__(self, drafter_bytes: list[bytes] | None,
                 target_encode: Callable[[str], tuple[int, ...]],
                 pre_tokenize: Callable[[str], list[tuple[str, tuple[int, int]]]] | None,
                 text_limit: int) -> None:
        self.same_vocab = drafter_bytes is None
        self.drafter_bytes = drafter_bytes
        self.pre_tokenize = pre_tokenize
        self.text_limit = text_limit  # drafter ids at or above this are special/timestamps
        self._encode = target_encode
        self._buf = b""

    def feed(self, drafter_ids: list[int]) -> list[int]:
        """Target ids of the words completed by these drafter tokens."""
        text_ids = [t for t in drafter_ids if t < self.text_limit]
        if self.same_vocab:
            return text_ids
        self._buf += b"".join(self.drafter_bytes[t] for t in text_ids)
        return self._release(final=False)

    def flush(self) -> list[int]:
        """End of the drafter's text (window end): the last word is complete too."""
        if self.same_vocab:
            return []
        return self._release(final=True)

    def _release(self, final: bool) -> list[int]:
        buf = self._buf
        if not buf:
            return []
        # Only decode whole UTF-8 characters; a byte-level token may end inside one.
        cut = len(buf)
        if not final:
            for back in range(1, min(4, len(buf)) + 1):
                b = buf[-back]
                if b & 0xC0 == 0x80:
                    continue  # continuation byte: look further back for the lead byte
                need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
                if need > back:
                    cut = len(buf) - back
                break
        text = buf[:cut].decode("utf-8", errors="replace")
        pieces = self.pre_tokenize(text)
        if not final:
            pieces = pieces[:-1]  # the last pre-token may still grow
        if not pieces:
            return []
        end_char = pieces[-1][1][1]
        out: list[int] = []
        for _piece, (a, b) in pieces:
            out.extend(self._encode(text[a:b]))
        if "\ufffd" in text:
            # Invalid UTF-8 from the drafter: char and byte offsets no longer map; drop it all.
            self._buf = buf[cut:] if final else b""
        else:
            self._buf = buf[len(text[:end_char].encode("utf-8")):]
        return out
