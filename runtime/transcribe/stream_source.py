"""Candidates for decodes the run's aligner does not follow: from the drafter's stream, looked
up afresh for whatever sequence is being decoded.

AS²D's aligner follows the text the target keeps; a beam search's hypotheses and a fallback's
samples are other text. :class:`StreamProposer` finds each such sequence's place in the stream
from its own last tokens (an n-gram index of the stream); :class:`SampledSource` offers a
sampled decode its own repetition, else the proposer's guess. Lossless as greedy: the kernel
asks the sampling rule for one draw per committed position, in order, never past a rejection.
"""

from __future__ import annotations

from collections.abc import Sequence

from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.lookup import REPEAT_PRIOR, NgramIndex, repetition
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.opening_times import closing_time, opening_time

# Prior acceptance of each kind of offer, before a decode's own passes say otherwise: a sampled
# decode strays from the drafter's words more than greedy does.
REPEAT, STREAM = "repeat", "stream"  # where an offer came from
PRIORS = {REPEAT: REPEAT_PRIOR, STREAM: 0.7}


class StreamProposer:
    """Candidates for any hypothesis from the drafter's stream, aligned to its own text.

    The hypothesis's text tokens are found in the stream by their longest suffix of up to
    ``max_ngram`` tokens (the occurrence nearest where that much text of this window should
    stand; an empty text starts at the window's first drafted token) and what follows there is
    proposed, with the opening time after a closing one and the drafter's segment ends as
    closing times. Wrong guesses cost rows of a pass, never a token.
    """

    def __init__(self, stream, window_start: float, timestamp_begin: int, eot: int,
                 max_ngram: int = 4) -> None:
        self.stream = stream
        self.offset = window_start
        self.tb, self.eot = timestamp_begin, eot
        # The stream from a second before the window on (what the drafter has so far).
        self.index = NgramIndex(max_ngram, stream.index_at_time(max(0.0, window_start - 1.0)))
        self.first = stream.index_at_time(window_start)

    def _grow(self) -> None:
        if self.first >= len(self.stream.tokens) and not self.stream.finished:
            # The drafter had not reached the window when this was made.
            self.first = self.stream.index_at_time(self.offset)
        self.index.grow(self.stream.tokens, len(self.stream.tokens))

    def propose(self, seq: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens that may follow the hypothesis ``seq`` (its generated tokens)."""
        if k <= 0:
            return []
        self._grow()
        tb = self.tb
        lead = opening_time(seq, tb)
        text = [t for t in seq if t < self.eot]
        pos = None
        if not text:
            pos = self.first
        else:
            expected = self.first + len(text)
            found = next(self.index.suffixes(text), None)  # the longest suffix found
            if found is not None:
                pos = min(found[1], key=lambda e: (abs(e - expected), e))
        if pos is None:
            return lead[:k]
        out = list(lead)
        tokens, boundaries = self.stream.tokens, self.stream.boundaries
        end = len(tokens)
        i = pos
        while len(out) < k and i < end:
            at = boundaries.get(i)
            last = out[-1] if out else (seq[-1] if seq else tb)
            if at is not None and last < tb:  # the drafter closed a segment here
                out += closing_time(at, self.offset, tb)
                break
            out.append(tokens[i])
            i += 1
        return out[:k]


def window_repetition(context: Sequence[int], k: int, timestamp_begin: int) -> list[int]:
    """:func:`~as2d.runtime.speculative.lookup.repetition` for a Whisper window: timestamps
    match one another and count for nothing, and the offer stops before the next one; after a
    closing timestamp it starts with the same time. Empty where the window does not repeat."""
    tb = timestamp_begin
    lead = opening_time(context, tb)
    guess = repetition(list(context) + lead, max(1, k - len(lead)),
                       fold=lambda t: -1 if t >= tb else t, counted=lambda t: t < tb)
    cut = next((i for i, t in enumerate(guess) if t >= tb), len(guess))
    return (lead + guess[:cut])[:k] if cut else []


class SampledSource(CandidateSource):
    """One sampled decode's candidates: its own repetition where it has begun to loop (what
    the drafter, which did not loop, cannot guess), else the proposer's guess; a
    :class:`~as2d.runtime.speculative.budget.Budget` per kind of offer sizes each."""

    name = "repetition or stream"

    def __init__(self, proposer: StreamProposer | None, timestamp_begin: int) -> None:
        self.proposer = proposer
        self.tb = timestamp_begin
        self.budgets = {kind: Budget(prior_acceptance=p) for kind, p in PRIORS.items()}
        self._kind: str | None = None  # of the last offer

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        self._kind = None
        if room <= 0:
            return []
        offers = ((REPEAT, lambda: window_repetition(context, room, self.tb)),
                  (STREAM, lambda: self.proposer.propose(context, room) if self.proposer
                   else []))
        for kind, offer in offers:  # the first kind its budget finds worth verifying
            out = offer()
            k = self.budgets[kind].choose(len(out)) if out else 0
            if k:
                self._kind = kind
                return out[:k]
        return []

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        if offered and self._kind is not None:
            self.budgets[self._kind].record(verdict.offered, verdict.accepted, verdict.ran,
                                            verdict.seconds)
        # A plain step still measures what a pass costs (the prompt's pass does not).
        elif verdict.ran == 1:
            for b in self.budgets.values():
                b.record(0, 0, verdict.ran, verdict.seconds)
