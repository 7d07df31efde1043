"""Beam search over one Whisper window, as openai-whisper's ``BeamSearchDecoder`` does it.

Whisper's users decode with a beam of 5, so a user who switches expects that text. Each step,
every live hypothesis's row gets the window's logit rules with its own prefix, then a
log-softmax; each proposes its ``beam_size + 1`` best tokens scored by its cumulative
log-probability; the ranked proposals ending in end-of-text are finished, the best
``beam_size`` others live on (a stable descending sort: whisper's order, ties included). The
search ends with ``round(beam_size * patience)`` finished or at the length limits; the winner
has the best log-probability over its length (or ``((5 + length) / 6) ** length_penalty``).
Log-probabilities are float32, as in whisper, since its ranking compares them. The hypotheses
run as one batched pass over a pooled cache
(:class:`~as2d.runtime.whisper.model.BeamDecoderState`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from as2d.runtime.option_errors import OptionError, is_number, shown
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.verify import PassCounts, replay
from as2d.runtime.transcribe.stream_source import StreamProposer
from as2d.runtime.transcribe.window import DecodingResult, one_row, prompt_pass, room
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import BeamDecoderState

# Bounds on one search for every face: each hypothesis is a row of every pass and a cache of
# its own (a beam of a million asks for hundreds of GiB). whisper searches with 5.
MAX_BEAM_SIZE = 16
MAX_PATIENCE = 100.0


@dataclass(frozen=True)
class BeamOptions:
    """openai-whisper's ``beam_size``, ``patience`` and ``length_penalty``."""

    beam_size: int = 5
    patience: float | None = None  # None: 1.0 (stop once beam_size hypotheses are finished)
    length_penalty: float | None = None  # None: divide by the length (whisper's default)

    def __post_init__(self) -> None:
        check(self.beam_size, self.patience, self.length_penalty)

    @property
    def max_finished(self) -> int:
        """How many finished hypotheses end the search."""
        return round(self.beam_size * (self.patience if self.patience is not None else 1.0))


def check(beam_size: int | None, patience: float | None, length_penalty: float | None) -> None:
    """Raise :class:`OptionError` for options whisper refuses, or beyond this engine's bounds."""
    if beam_size is not None and (not is_number(beam_size) or not np.isfinite(beam_size)
                                  or int(beam_size) != beam_size or beam_size < 1):
        raise OptionError("beam_size",
                          f"must be a whole number of 1 or more, not {shown(beam_size)}")
    if beam_size is not None and beam_size > MAX_BEAM_SIZE:
        raise OptionError("beam_size", f"must be at most {MAX_BEAM_SIZE}, not {shown(beam_size)}"
                          " (every hypothesis is a decoder cache and a row of every pass; "
                          "whisper's command line uses 5)")
    if patience is not None and not (is_number(patience) and np.isfinite(patience)
                                     and patience > 0):
        raise OptionError("patience", f"must be more than 0, not {shown(patience)}")
    if patience is not None and patience > MAX_PATIENCE:
        raise OptionError("patience", f"must be at most {MAX_PATIENCE:g}, not {shown(patience)}"
                          " (the search waits for beam size × patience finished hypotheses)")
    if patience is not None and (beam_size or 1) * patience < 1 - 1e-9:
        raise OptionError("patience", f"{patience:g} with a beam of {beam_size or 1} would end "
                          "the search before any hypothesis is finished")
    if length_penalty is not None and not (is_number(length_penalty)
                                           and 0 <= length_penalty <= 1):
        raise OptionError("length_penalty",
                          f"must be between 0 and 1, not {shown(length_penalty)}")


def log_softmax(rows: np.ndarray) -> np.ndarray:
    """float32 log-softmax of (masked) rows, along the last axis."""
    rows = rows.astype(np.float32, copy=False)
    m = rows.max(axis=-1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=-1, keepdims=True, dtype=np.float32)))


def top(logprobs: np.ndarray, k: int) -> np.ndarray:
    """Per row of ``logprobs [rows, V]``, the indices of the ``k`` largest values, largest
    first, equal values by lower index (a stable sort of the vocabulary only for a row with
    ties at the k-th value)."""
    k = min(k, logprobs.shape[-1])
    part = np.sort(np.argpartition(-logprobs, k - 1, axis=-1)[:, :k], axis=-1)
    vals = np.take_along_axis(logprobs, part, axis=-1)
    out = np.take_along_axis(part, np.argsort(-vals, axis=-1, kind="stable"), axis=-1)
    kth = vals.min(axis=-1, keepdims=True)
    for r in np.flatnonzero((logprobs >= kth).sum(axis=-1) > k):
        out[r] = np.argsort(-logprobs[r], kind="stable")[:k]
    return out


def length_score(sum_logprob: float, length: int, length_penalty: float | None = None
                 ) -> float:
    """whisper's ``MaximumLikelihoodRanker`` score of one finished hypothesis (without a
    ``length_penalty``, also its ranking of ``best_of`` samples)."""
    if length_penalty is None:
        penalty = max(1, length)  # whisper divides by the length (an empty text: by 1)
    else:
        penalty = ((5 + length) / 6) ** length_penalty
    return sum_logprob / penalty


def select(beams: list[tuple[int, ...]], sums: np.ndarray, logprobs: np.ndarray,
           beam_size: int, eot: int
           ) -> tuple[list[tuple[int, ...]], list[int], np.ndarray, dict[tuple[int, ...], float]]:
    """Step 3 for one step: ``(live hypotheses, their sources, their sums, newly finished)``.

    ``logprobs[j]``: hypothesis ``j``'s log-softmax row (rules applied)."""
    tops = top(logprobs, beam_size + 1)
    cand = np.take_along_axis(logprobs, tops, axis=-1) + sums[:, None]  # float32
    scores: dict[tuple[int, ...], np.float32] = {}
    sources: dict[tuple[int, ...], int] = {}
    for j, seq in enumerate(beams):
        for token, score in zip(tops[j].tolist(), cand[j]):
            new = seq + (token,)
            scores[new] = score
            sources[new] = j
    live: list[tuple[int, ...]] = []
    srcs: list[int] = []
    kept: list[np.float32] = []
    finished: dict[tuple[int, ...], float] = {}
    for seq in sorted(scores, key=scores.get, reverse=True):
        if seq[-1] == eot:
            finished[seq] = float(scores[seq])
        else:
            live.append(seq)
            srcs.append(sources[seq])
            kept.append(scores[seq])
            if len(live) == beam_size:
                break
    return live, srcs, np.array(kept, np.float32), finished


@dataclass
class BeamWindow:
    """One window's beam search over a :class:`BeamDecoderState` (target-side state); with a
    ``proposer`` (the drafter's stream), speculative beam steps, as many candidates per
    hypothesis as ``budget`` (a fresh one per window: :meth:`Budget.fresh`) chooses for a pass
    of the beam's width. A window task
    (:class:`~as2d.runtime.transcribe.window_task.WindowDecode`)."""

    state: BeamDecoderState
    rules: LogitRules
    prompt: list[int]
    sot_index: int
    sample_len: int
    eot: int
    options: BeamOptions
    beams: list[tuple[int, ...]] = field(default_factory=lambda: [()])
    sums: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))
    finished: dict[tuple[int, ...], float] = field(default_factory=dict)
    no_speech_prob: float = 0.0
    done: bool = False
    steps: int = 0  # beam steps taken (one per pass, target-only)
    counts: PassCounts = field(default_factory=PassCounts)
    proposer: StreamProposer | None = None
    budget: Budget | None = None

    def start(self) -> None:
        """Run the prompt (one hypothesis) and take the first beam step."""
        t0 = time.perf_counter()
        self.no_speech_prob, row = prompt_pass(one_row(self.state), self.prompt, self.sot_index,
                                               self.rules.tokenizer.no_speech)
        self.state.reorder(self.advance(row[None]))
        self.counts.count(0, 0, time.perf_counter() - t0)

    @property
    def room(self) -> int:
        return room(self.done, self.sample_len, len(self.beams[0]), self.state)

    def step(self, proposals: Sequence[Sequence[int]] | None = None) -> int:
        """One pass: every live hypothesis's last token, then its candidates
        (``proposals[i]``, else the proposer's; none: one plain beam step); returns the beam
        steps it decided. The kernel (:func:`~as2d.runtime.speculative.verify.replay`) takes
        beam steps while every chosen hypothesis lies on computed rows, so the search stays
        lossless."""
        if self.done:
            raise RuntimeError("window already decoded")
        if proposals is None and self.proposer is not None:
            return self._speculative_step()
        t0 = time.perf_counter()
        k = min(max((len(p) for p in proposals), default=0), self.room) if proposals else 0
        fed = [[seq[-1], *p[:k]] for seq, p in zip(self.beams, proposals or [()] * len(self.beams))]
        n = self.state.length
        # [hypotheses, 1 + k, vocab]; a hypothesis with fewer candidates is padded (never read)
        logits = self.state.forward([f + [self.eot] * (k + 1 - len(f)) for f in fed])
        steps, bases, _ = replay(logits, fed, self)
        # Each hypothesis keeps its pass rows up to (not including) its new last token.
        self.state.reorder(bases)
        self.state.truncate(n + steps)
        self.counts.count(sum(len(f) - 1 for f in fed), (steps - 1) * len(bases),
                          time.perf_counter() - t0)
        return steps

    def _speculative_step(self) -> int:
        width = len(self.beams)
        room = min(self.room, self.budget.room(width))
        guesses = [self.proposer.propose(seq, room) for seq in self.beams]
        k = self.budget.choose(max(map(len, guesses), default=0), width)
        spent = self.counts.seconds
        steps = self.step([g[:k] for g in guesses] if k else ())
        # A plain pass measures the cost a row adds to.
        self.budget.record(k, min(steps - 1, k), width * (1 + k), self.counts.seconds - spent)
        return steps

    def advance(self, rows: np.ndarray) -> list[int]:
        """One beam step from each live hypothesis's row (masked in place); returns the source
        of each new hypothesis."""
        size = self.options.beam_size
        for seq, row in zip(self.beams, rows):
            self.rules.apply(row, list(seq))  # in place
        logprobs = log_softmax(rows)
        live, sources, sums, finished = select(self.beams, self.sums, logprobs, size, self.eot)
        self.beams, self.sums = live, sums
        self.steps += 1
        cap = self.options.max_finished
        for seq in sorted(finished, key=finished.get, reverse=True):
            if len(self.finished) >= cap:
                break
            self.finished[seq] = finished[seq]
        n = len(live[0])
        if (len(self.finished) >= cap or n >= self.sample_len
                or len(self.prompt) + n > self.state.capacity):
            self.done = True
        return sources

    def last(self, i: int) -> int:
        return self.beams[i][-1]

    def result(self) -> DecodingResult:
        """The winning hypothesis (whisper's ``finalize`` and ranking), at any time."""
        size = self.options.beam_size
        finished = dict(self.finished)
        forced: set[tuple[int, ...]] = set()
        if len(finished) < size:
            for j in list(np.argsort(self.sums))[::-1]:
                seq = self.beams[j] + (self.eot,)
                finished[seq] = float(self.sums[j])
                forced.add(seq)
                if len(finished) >= size:
                    break
        seqs = list(finished)
        tokens = [list(s[:s.index(self.eot)]) for s in seqs]
        scores = [length_score(finished[s], len(t), self.options.length_penalty)
                  for s, t in zip(seqs, tokens)]
        best = int(np.argmax(scores))
        return DecodingResult(tokens[best], finished[seqs[best]], self.no_speech_prob,
                              seqs[best] not in forced, self.counts.copy())

    def results(self) -> list[DecodingResult]:
        return [self.result()]

    def close(self) -> None:
        """Done, stopped or failed: the cache goes back to its pool."""
        self.state.model.release(self.state)
