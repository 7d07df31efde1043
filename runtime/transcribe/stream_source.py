"""Candidates for decodes the run's aligner does not follow: from the drafter's stream, looked
up afresh for whatever sequence is being decoded.

AS²D's :class:`~as2d.runtime.transcribe.as2d.AlignedSource` keeps one pointer into the
drafter's stream for the whole run, moved by the text the target keeps. Some decodes of a window
are not that text: the hypotheses of a beam search, and the sampled decodes of Whisper's
temperature fallback (of which at most one is kept). :class:`StreamProposer` finds each such
sequence's place in the stream from its own last tokens, holding nothing between calls but an
n-gram index of the stream; :class:`SampledSource` offers one sampled decode its own repetition
(a loop, which the drafter did not make), else the proposer's guess.

A sampled decode takes candidates as losslessly as a greedy one: the verification kernel asks the
decode's rule (:class:`~as2d.runtime.transcribe.fallback.SamplingRules`) for one token per
committed position, in order, and never past the first rejection, so every draw of the seeded
generator lands on the position it would land on without candidates, applied to the same rows
(row-exactness, :mod:`as2d.runtime.rows`): the same tokens, in fewer passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.lookup import REPEAT_PRIOR, repetition
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.opening_times import closing_time, opening_time

# Prior acceptance of each kind of offer, before a decode's own passes say otherwise: a sampled
# decode strays from the drafter's words more than greedy does.
REPEAT, STREAM = "repeat", "stream"  # where an offer came from
PRIORS = {REPEAT: REPEAT_PRIOR, STREAM: 0.7}


class StreamProposer:
    """Candidates for every live hypothesis, from the drafter's stream (AS²D's), aligned to
    *that hypothesis's* text.

    The stream holds the drafter's transcript of the whole file as the target's text tokens,
    with the audio time of each and where the drafter closed its segments. A hypothesis's text
    (its tokens before the timestamps, without them) is found in the stream by its longest
    suffix of up to ``max_ngram`` tokens (the occurrence nearest where that much text of this
    window should stand), and what follows there is proposed; an empty text starts at the
    window's first drafted token. After a closing timestamp the same time is offered to open
    the next segment (as Whisper writes it in continuous speech), and where the drafter closed
    a segment its time is guessed as the target's closing timestamp. Wrong guesses cost rows
    of a pass, never a token: the verification decides.
    """

    def __init__(self, stream, window_start: float, timestamp_begin: int, eot: int,
                 max_ngram: int = 4) -> None:
        self.stream = stream
        self.offset = window_start
        self.tb, self.eot = timestamp_begin, eot
        self.max_ngram = max_ngram
        self.lo = stream.index_at_time(max(0.0, window_start - 1.0))
        self.first = stream.index_at_time(window_start)
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.indexed = self.lo  # stream tokens indexed so far (n-grams ending before it)

    def _grow(self) -> None:
        if self.first >= len(self.stream.tokens) and not self.stream.finished:
            # The drafter had not reached the window yet when this was made (a proposer lives
            # as long as its window's decodes): its first token is still to come.
            self.first = self.stream.index_at_time(self.offset)
        tokens, end = self.stream.tokens, len(self.stream.tokens)
        for e in range(self.indexed + 1, end + 1):
            for n in range(1, self.max_ngram + 1):
                if e - n < self.lo:
                    break
                self.index.setdefault(tuple(tokens[e - n:e]), []).append(e)
        self.indexed = max(self.indexed, end)

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
            for n in range(min(self.max_ngram, len(text)), 0, -1):
                ends = self.index.get(tuple(text[-n:]))
                if ends:
                    pos = min(ends, key=lambda e: (abs(e - expected), e))
                    break
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
    """:func:`~as2d.runtime.speculative.lookup.repetition` for a Whisper window: a loop's turns
    differ only in their timestamps, so those match one another (and count for nothing: the
    evidence is four text tokens), and the offer stops before the next one (its time cannot
    be guessed); after a segment's closing timestamp it starts with the same time, which opens
    the next segment. Empty where the window does not repeat itself."""
    tb = timestamp_begin
    lead = opening_time(context, tb)
    guess = repetition(list(context) + lead, max(1, k - len(lead)),
                       fold=lambda t: -1 if t >= tb else t, counted=lambda t: t < tb)
    cut = next((i for i, t in enumerate(guess) if t >= tb), len(guess))
    return (lead + guess[:cut])[:k] if cut else []


class SampledSource(CandidateSource):
    """One sampled decode's candidates: where the decode has begun to repeat itself, its own
    repetition (:func:`~as2d.runtime.speculative.lookup.repetition`); else the proposer's guess
    from the drafter's stream. Whisper's fallback samples a window again because its greedy
    text looped or was unsure, and a loop is what the drafter, which did not loop, cannot
    guess. How many tokens to offer is a :class:`~as2d.runtime.speculative.budget.Budget`'s
    choice, one per kind of offer, from its acceptance and the measured cost of a row."""

    name = "repetition or stream"

    def __init__(self, proposer: StreamProposer | None, timestamp_begin: int) -> None:
        self.proposer = proposer
        self.tb = timestamp_begin
        self.budgets = {kind: Budget(prior_acceptance=p) for kind, p in PRIORS.items()}
        for b in self.budgets.values():
            b.window_start()
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
        # A plain step still measures what a pass costs (the prompt's pass, many rows for no
        # candidate, does not).
        elif verdict.ran == 1:
            for b in self.budgets.values():
                b.record(0, 0, verdict.ran, verdict.seconds)
