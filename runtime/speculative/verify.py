"""The one verification kernel: k candidates checked in one target pass, losslessly.

Every decoder in as2d (Whisper windows for ``transcribe`` and ``mic``, the answering model for
``ask``) commits tokens through :func:`verify`. One pass runs ``[pending] + candidates`` after
the cached tokens; at each position the caller's ``choose`` applies exactly the rule that plain
greedy decoding would apply with that position's prefix; the longest run of candidates equal to
those choices is kept together with the target's own next token, and the rejected rows are
dropped from the cache (a length change). With no candidates the pass *is* a plain greedy step,
which is why a decoder that verifies is token-for-token the decoder that does not.

The kernel knows nothing of where candidates come from (see :mod:`.candidates`) nor of the
model: it sees a cache that can run tokens and be truncated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class TargetCache(Protocol):
    """What verification needs of a model: a KV cache that runs new tokens and forgets rows."""

    length: int  # tokens in the cache
    capacity: int  # most tokens it can hold

    def forward(self, tokens: Sequence[int], **options) -> np.ndarray:
        """Run ``tokens`` after the cached ones; their logits ``[len(tokens), vocab]``."""
        ...

    def truncate(self, length: int) -> None: ...


# The rule of one position: its logits row and the tokens before it → the greedy token.
Choose = Callable[[np.ndarray, list[int]], int]


def argmax(row: np.ndarray, prefix: list[int]) -> int:
    """Plain greedy choice (an LLM's answer): the prefix does not matter."""
    return int(np.argmax(row))


@dataclass
class Verdict:
    """What one target pass decided."""

    committed: list[int]  # accepted candidates, then the target's own token
    logits: list[np.ndarray]  # the row each committed token was chosen from
    offered: int  # candidates run in the pass
    accepted: int  # of them, kept
    ran: int  # tokens the pass ran through the model (a pass's cost grows with this)
    seconds: float = 0.0  # wall time of the pass, rules included
    stopped: bool = False  # the target chose a stop token (it is the last committed)

    @property
    def own(self) -> int | None:
        """The target's own token after the accepted candidates (None if it stopped early)."""
        return self.committed[self.accepted] if self.accepted < len(self.committed) else None


def verify(cache: TargetCache, pending: int, candidates: Sequence[int], prefix: list[int],
           choose: Choose = argmax, stops: frozenset[int] = frozenset(),
           **forward_options) -> Verdict:
    """Verify ``candidates`` after the ``pending`` token in one pass over ``cache``.

    ``prefix`` holds every token already chosen (the pending one last); it is extended in place
    with each accepted candidate while later positions are judged, and restored before return,
    so rules that look at the prefix see exactly what they would see in plain decoding. A
    candidate equal to a stop token is never "accepted": the stop is committed as the target's
    own choice and ends the run, as it would in plain decoding.
    """
    t0 = time.perf_counter()
    base = cache.length
    cands = list(candidates)
    logits = cache.forward([pending] + cands, **forward_options)
    n = len(prefix)
    committed: list[int] = []
    rows: list[np.ndarray] = []
    accepted = 0
    stopped = False
    try:
        for i, row in enumerate(logits):
            token = choose(row, prefix)
            committed.append(token)
            rows.append(row)
            if token in stops:
                stopped = True
                break
            if i < len(cands) and token == cands[i]:
                accepted += 1
                prefix.append(token)
                continue
            break
    finally:
        del prefix[n:]
    # Keep the pending token and the accepted candidates; forget the rows after them.
    cache.truncate(base + 1 + accepted)
    return Verdict(committed, rows, len(cands), accepted, 1 + len(cands),
                   time.perf_counter() - t0, stopped)


@dataclass
class PassCounts:
    """Running totals of a decode's passes (one record shape for every decoder)."""

    passes: int = 0
    offered: int = 0
    accepted: int = 0
    alone: int = 0  # passes with no candidate
    seconds: float = 0.0

    def add(self, verdict: Verdict) -> None:
        self.passes += 1
        self.offered += verdict.offered
        self.accepted += verdict.accepted
        self.alone += verdict.offered == 0
        self.seconds += verdict.seconds

    @property
    def acceptance(self) -> float:
        return self.accepted / self.offered if self.offered else 0.0
