"""Candidates looked up n-gram style in token sequences the target is likely to copy.

Output that repeats its input (an answer quoting the transcript, a transcript repeating a
prompt) can be guessed without any drafter model: find the longest suffix of the committed
tokens that also occurs in a known sequence and propose what followed it there. This is
prompt look-up decoding; as a :class:`~as2d.runtime.speculative.candidates.CandidateSource` it
goes through the same verification kernel as every other source, so it can only change how many
passes a decode takes, never what is committed. Nothing here knows which model or which text
the ids belong to.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.verify import Verdict


class NgramIndex:
    """Where every n-gram (n ≤ ``max_n``) of a sequence ends, the sequence growing or not: the
    one index every matcher searches (a quoted or growing sequence, :class:`Lookup`; the
    drafter's stream for beams and samples,
    :class:`~as2d.runtime.transcribe.stream_source.StreamProposer`; its words by key for the
    aligner's re-synchronisation, :class:`~as2d.runtime.speculative.align.Aligner`). The
    n-grams start at ``lo`` or later; each key's ends are in ascending order."""

    def __init__(self, max_n: int, lo: int = 0) -> None:
        self.max_n, self.lo = max_n, lo
        self.ends: dict[tuple, list[int]] = {}
        self.indexed = lo  # n-grams ending at or before this are indexed

    def grow(self, keys: Sequence[Hashable], end: int) -> None:
        """Index the n-grams of ``keys`` that end at ``end`` or before (not yet indexed)."""
        for e in range(self.indexed + 1, end + 1):
            for n in range(1, self.max_n + 1):
                if e - n < self.lo:
                    break
                self.ends.setdefault(tuple(keys[e - n:e]), []).append(e)
        self.indexed = max(self.indexed, end)

    def suffixes(self, tail: Sequence[Hashable], min_n: int = 1
                 ) -> Iterator[tuple[int, list[int]]]:
        """``(n, ends)`` for each suffix of ``tail`` that occurs, longest first."""
        for n in range(min(self.max_n, len(tail)), min_n - 1, -1):
            ends = self.ends.get(tuple(tail[-n:]))
            if ends:
                yield n, ends


class Lookup:
    """One token sequence, indexed by every n-gram (n ≤ ``max_ngram``).

    :meth:`match` finds the longest suffix of the context that occurs in the sequence and
    returns where its continuation starts. Among several occurrences the one that continues
    the previous accepted copy wins (a quote is usually one contiguous run), else the first.
    """

    SKIP = 4  # tokens a copy may skip and still go on from where it was

    def __init__(self, name: str, ids: Sequence[int], max_ngram: int = 4,
                 fold: Callable[[int], Hashable] | None = None) -> None:
        self.name = name
        self.ids = list(ids)
        self.max_ngram = max_ngram
        # What a token is matched as: itself, or a key several tokens share (an answer that
        # copies "the age of wisdom" may start it " The"); what is proposed is the sequence's
        # own continuation either way.
        self.fold = fold
        self.keys = [fold(t) for t in self.ids] if fold else self.ids  # (unfolded: one list)
        self.index = NgramIndex(max_ngram)
        self.index.grow(self.keys, len(self.ids) - 1)  # the very end has no continuation
        self.cursor: int | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def match(self, context: Sequence[int], min_ngram: int = 1) -> tuple[int, int]:
        """``(n, position)`` of the longest match (``(0, -1)`` without one); but a match that
        resumes the copy a few tokens on (within :attr:`SKIP`) wins over a longer one elsewhere:
        an answer that copies a list and drops its "it was" ("the age of wisdom, the age of
        foolishness" from "it was the age of wisdom, it was the age of foolishness") goes on
        from where it was, not from another ", the" in the text."""
        tail = context[-self.max_ngram:]
        if self.fold is not None:
            tail = [self.fold(t) for t in tail]
        best = (0, -1)  # the longest match, where none resumes the copy
        for n, ends in self.index.suffixes(tail, min_ngram):
            near = next((e for e in ends if self.resumes(e)), None)
            if near is not None:
                return n, near
            if best[0] == 0:  # (a match at the cursor itself resumes: returned above)
                best = (n, ends[0])
        return best

    def resumes(self, pos: int) -> bool:
        """Whether a continuation at ``pos`` goes on with the copy (at most :attr:`SKIP`
        tokens after where it stands)."""
        return self.cursor is not None and self.cursor <= pos <= self.cursor + self.SKIP

    def advance(self, pos: int, accepted: int, own: int | None) -> None:
        """Remember where the copy stands after a pass that started at ``pos``."""
        end = pos + accepted
        if own is not None and end < len(self.ids) and self.ids[end] == own:
            end += 1
        self.cursor = end


@dataclass(frozen=True)
class Proposal:
    """What the last :meth:`LookupSource.propose` found, for the verdict and for reports."""

    lookup: Lookup | None  # where the candidates were copied from (None: nothing offered)
    match: int = 0  # length of the n-gram match (0: none; a match may still offer nothing)
    pos: int = -1  # where the candidates start in ``lookup``
    budget: Budget | None = None


NOTHING = Proposal(None)


class LookupSource(CandidateSource):
    """Several :class:`Lookup` sequences searched together: the longest match wins, on a tie
    the one given first. A :class:`Budget` per (sequence, match length) sizes the offer (a
    one-token match is a much weaker guess than a four-token one), from
    ``prior_acceptance[min(n, longest key)]``."""

    name = "lookup"

    def __init__(self, lookups: Sequence[Lookup], prior_acceptance: Mapping[int, float],
                 min_ngram: int = 1, k_max: int = 16, prior_slope: float = 0.1) -> None:
        self.lookups = [s for s in lookups if len(s)]
        self.prior_acceptance = dict(prior_acceptance)
        self.min_ngram = min_ngram
        self.k_max = k_max
        self.prior_slope = prior_slope
        self.budgets: dict[tuple[str, int], Budget] = {}
        self.last = NOTHING

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.lookups)

    def best(self, context: Sequence[int]) -> tuple[Lookup | None, int, int]:
        """``(lookup, n, position)`` of the longest match over all sequences, a match that
        resumes its sequence's copy first (:meth:`Lookup.match`)."""
        best: tuple[Lookup | None, int, int] = (None, 0, -1)
        rank = (False, 0)
        for src in self.lookups:
            n, pos = src.match(context, self.min_ngram)
            r = (n > 0 and src.resumes(pos), n)
            if r > rank:
                best, rank = (src, n, pos), r
        return best

    def budget(self, name: str, n: int) -> Budget:
        """The budget of one (sequence, match length) pair, made on first use."""
        bucket = min(max(n, 1), max(self.prior_acceptance))
        key = (name, bucket)
        if key not in self.budgets:
            self.budgets[key] = Budget(k_max=self.k_max, prior_slope=self.prior_slope,
                                       prior_acceptance=self.prior_acceptance[bucket])
        return self.budgets[key]

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        self.last = NOTHING
        if room <= 0:
            return []
        src, n, pos = self.best(context)
        if src is None:
            return []
        budget = self.budget(src.name, n)
        k = budget.choose(min(len(src) - pos, room))
        cands = src.ids[pos:pos + k]
        self.last = Proposal(src if cands else None, n, pos, budget)
        return cands

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        p = self.last
        if offered and p.lookup is not None:
            p.lookup.advance(p.pos, verdict.accepted, verdict.own)
            p.budget.record(verdict.offered, verdict.accepted, verdict.ran, verdict.seconds)
        else:
            # A plain step still measures what a pass costs.
            for b in self.budgets.values():
                b.record(0, 0, 1, verdict.seconds)


# Prior acceptance of an offer of :func:`repetition`: a loop goes on as it went.
REPEAT_PRIOR = 0.9


def repetition(context: Sequence[int], k: int, min_ngram: int = 4, max_ngram: int = 8,
               fold: Callable[[int], Hashable] | None = None,
               counted: Callable[[int], bool] | None = None) -> list[int]:
    """Up to ``k`` tokens that continue ``context`` as it went on after the last earlier
    occurrence of its longest repeated suffix (``min_ngram`` to ``max_ngram`` tokens; empty when
    there is none): Whisper's failure loop guessed token for token, a period shorter than ``k``
    still filling the offer. ``min_ngram`` keeps chance repeats of ordinary speech out.
    ``fold``: what a token is matched as (all timestamps alike, say); ``counted``: which tokens
    count towards the length (two timestamps between segments are no evidence of a loop).
    """
    n_ctx = len(context)
    if k <= 0 or n_ctx <= min_ngram:
        return []
    keys = [fold(t) for t in context] if fold is not None else context
    weight = [1] * n_ctx if counted is None else [int(bool(counted(t))) for t in context]
    longest = 4 * max_ngram  # tokens, counted or not: bounds the walk back
    last = keys[-1]
    best_w, best_end = 0, -1
    for end in range(n_ctx - 1, 0, -1):  # latest first: a loop's last turn
        if keys[end - 1] != last:
            continue
        n, w = 1, weight[-1]
        while (w < max_ngram and n < end and n < longest
               and keys[end - 1 - n] == keys[n_ctx - 1 - n]):
            w += weight[n_ctx - 1 - n]
            n += 1
        if w > best_w:
            best_w, best_end = w, end
            if w >= max_ngram:
                break
    if best_w < min_ngram:
        return []
    seq = list(context)
    for i in range(best_end, best_end + k):
        seq.append(seq[i])
    return seq[n_ctx:]
