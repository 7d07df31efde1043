"""Where candidates come from, and the one loop that verifies them.

A candidate source guesses the target's next tokens (AS²D's aligned drafter stream, classic SD's
re-drafts, an n-gram look-up for ``ask``) through two calls, in the spirit of Hugging Face's
``CandidateGenerator``: :meth:`CandidateSource.propose` before a pass and
:meth:`CandidateSource.observe` after it. :func:`step` is one pass, :func:`run` the loop to the
end. The verification kernel alone decides what is committed, so no source can change the
output, only how many passes it takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from as2d.runtime.speculative.verify import Verdict


class CandidateSource:
    """Proposes tokens for the target to verify; learns from each verdict.

    The base class proposes nothing: with it, decoding is plain greedy (target-only).
    """

    name: str = "none"

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        """Up to ``room`` tokens that may follow ``context`` (the tokens committed so far)."""
        return []

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        """The target's verdict on the pass that ran ``offered``."""

    def finish(self, context: Sequence[int]) -> None:
        """The decode is over (done, stopped or failed) with ``context`` committed: let go of
        what was held for it (a drafter's cache), or learn where the next decode resumes.

        :func:`run` does not call it (a decode may be stopped and resumed); whoever made the
        source for a decode does, once."""


NO_CANDIDATES = CandidateSource()


class Decoding(Protocol):
    """One greedy decode that advances by verified passes (a Whisper window, an answer)."""

    done: bool

    @property
    def context(self) -> Sequence[int]: ...

    @property
    def room(self) -> int: ...

    def step(self, candidates: Sequence[int] = ()) -> Verdict: ...


def step(decoding: Decoding, source: CandidateSource,
         on_pass: Callable[[Sequence[int], Verdict], None] | None = None) -> Verdict:
    """One pass of ``decoding`` with what ``source`` offers; the source observes the verdict,
    then ``on_pass`` sees the pass."""
    offered = list(source.propose(decoding.context, decoding.room))[: decoding.room]
    verdict = decoding.step(offered)
    source.observe(offered, verdict)
    if on_pass is not None:
        on_pass(offered, verdict)
    return verdict


def run(decoding: Decoding, source: CandidateSource,
        on_pass: Callable[[Sequence[int], Verdict], None] | None = None,
        stop: threading.Event | None = None) -> bool:
    """Drive ``decoding`` to its end with candidates from ``source`` (:func:`step` until done).

    Returns False when ``stop`` was set first (what was committed so far stays in
    ``decoding``). ``on_pass`` sees every pass after the source has observed it.
    """
    while not decoding.done:
        if stop is not None and stop.is_set():
            return False
        step(decoding, source, on_pass)
    return True
