"""The one verification kernel: candidates checked in one target pass, losslessly.

Every decoder in as2d commits tokens through :func:`replay`: greedy Whisper windows and the
answering model's greedy text (one hypothesis, through :func:`verify`), a fallback's samples side
by side (each sample a hypothesis of its own) and beam search (a ranked group of hypotheses).

One pass has run, for each hypothesis ``h``, the tokens ``fed[h]``: the token(s) it has chosen
that the cache lacks, then its candidates. The row after ``fed[h][d]`` is therefore the row a
plain pass would give hypothesis ``h`` once its text ends in ``fed[h][:d + 1]`` (row exactness,
:mod:`as2d.runtime.rows`). The decode's own token policy (:class:`Hypotheses`: greedy choice,
a seeded draw, a beam step) takes one step from the rows under its hypotheses, exactly as it
would after plain passes; while every hypothesis it then holds continues a computed row (its new
last token is the next fed token of the hypothesis it came from), the next step is taken from
those rows too. The first hypothesis off the computed rows ends the pass. So the policy sees
the rows and prefixes it would see decoding one token a pass, and no candidate source can change
a token, only how many passes it takes. With no candidates a pass *is* a plain step.

The kernel knows nothing of where candidates come from (see :mod:`.candidates`) nor of the
model: :func:`verify` sees a cache that can run tokens and be truncated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np


class TargetCache(Protocol):
    """What verification needs of a model: a KV cache that runs new tokens and forgets rows."""

    length: int  # tokens in the cache
    capacity: int  # most tokens it can hold

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray:
        """Run ``tokens`` after the cached ones; the logits ``[R, vocab]`` of the last
        ``R = logit_rows`` of them (all by default)."""
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


class Hypotheses(Protocol):
    """A decode's token policy over its live hypotheses, as the kernel drives it."""

    done: bool  # the decode has ended (nothing more may be committed)

    def advance(self, rows: np.ndarray) -> Sequence[int]:
        """One decoding step from each live hypothesis's next-token row (``rows[i]`` for
        hypothesis ``i``): choose, commit, and return for every hypothesis live afterwards the
        index of the hypothesis it continues."""
        ...

    def last(self, i: int) -> int:
        """The token hypothesis ``i`` ended with in the last step."""
        ...


def replay(logits: np.ndarray, fed: Sequence[Sequence[int]], policy: Hypotheses,
           starts: Sequence[int] | None = None) -> tuple[int, list[int], list[int]]:
    """Take as many of ``policy``'s steps as the pass's rows decide.

    ``logits[h, d]``: the row after ``fed[h][d]`` (padding beyond ``len(fed[h])`` is never
    read as a candidate); the first step reads row ``starts[h]`` of hypothesis ``h`` (default
    0: the row after its pending token). Returns ``(steps, bases, depths)``: the steps taken,
    and for each live hypothesis the pass hypothesis whose rows it continues and how many of
    that one's fed tokens it holds (a cache keeps those rows: reorder by ``bases``, cut after
    the last ``depth``).
    """
    bases = list(range(len(fed)))
    depths = list(starts) if starts is not None else [0] * len(fed)
    steps = 0
    while True:
        # One hypothesis: its row as a view (no copy of a vocabulary-wide row per token).
        rows = (logits[bases[0], depths[0]][None] if len(bases) == 1
                else logits[bases, depths])
        sources = policy.advance(rows)
        steps += 1
        bases = [bases[j] for j in sources]
        depths = [depths[j] + 1 for j in sources]
        if policy.done or not all(d < len(fed[b]) and fed[b][d] == policy.last(i)
                                  for i, (b, d) in enumerate(zip(bases, depths))):
            return steps, bases, depths


class OneHypothesis:
    """Greedy choice (or a seeded draw: ``choose`` decides) for one sequence: the token policy
    of :func:`verify` and of each of a fallback's samples. ``prefix`` grows by every token
    chosen; ``committed`` and ``rows`` say which, and from which row."""

    def __init__(self, choose: Choose, prefix: list[int], stops: frozenset[int]) -> None:
        self.choose, self.prefix, self.stops = choose, prefix, stops
        self.committed: list[int] = []
        self.rows: list[np.ndarray] = []
        self.done = False

    def advance(self, rows: np.ndarray) -> list[int]:
        token = self.choose(rows[0], self.prefix)
        self.committed.append(token)
        self.rows.append(rows[0])
        self.prefix.append(token)
        self.done = token in self.stops
        return [0]

    def last(self, i: int) -> int:
        return self.committed[-1]


def verify(cache: TargetCache, pending: int, candidates: Sequence[int], prefix: list[int],
           choose: Choose = argmax, stops: frozenset[int] = frozenset()) -> Verdict:
    """Verify ``candidates`` after the ``pending`` token in one pass over ``cache``: the
    one-hypothesis case of :func:`replay`.

    ``prefix`` holds every token already chosen (the pending one last); it grows by each token
    chosen while later positions are judged, and is restored before return, so rules that look
    at the prefix see exactly what they would see in plain decoding. A candidate equal to a
    stop token is never "accepted": the stop is committed as the target's own choice and ends
    the run, as it would in plain decoding.
    """
    t0 = time.perf_counter()
    base = cache.length
    fed = [pending, *candidates]
    logits = cache.forward(fed)
    n = len(prefix)
    policy = OneHypothesis(choose, prefix, stops)
    try:
        steps, _, _ = replay(logits[None], [fed], policy)
    finally:
        del prefix[n:]
    # Keep the pending token and the accepted candidates; forget the rows after them.
    cache.truncate(base + steps)
    return Verdict(policy.committed, policy.rows, len(fed) - 1, steps - 1, len(fed),
                   time.perf_counter() - t0, policy.done)


@dataclass
class PassCounts:
    """Running totals of a decode's passes (one record shape for every decoder)."""

    passes: int = 0
    offered: int = 0
    accepted: int = 0
    alone: int = 0  # passes with no candidate
    seconds: float = 0.0

    def add(self, verdict: Verdict) -> None:
        self.count(verdict.offered, verdict.accepted, verdict.seconds)

    def count(self, offered: int, accepted: int, seconds: float, alone: bool | None = None
              ) -> None:
        """One pass; ``alone`` (default: nothing was offered) counts it as the target's own."""
        self.passes += 1
        self.offered += offered
        self.accepted += accepted
        self.alone += offered == 0 if alone is None else alone
        self.seconds += seconds

    def copy(self) -> PassCounts:
        return replace(self)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.offered if self.offered else 0.0
