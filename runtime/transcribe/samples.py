"""The ``best_of`` samples of a fallback window, drawn side by side in one batch.

A decoder pass over one row is bound by reading the weights and the cross keys and values, so
passes over five rows cost little more than over one (faster-whisper batches its samples for
that reason). The samples share one pooled cache (beam search's), one hypothesis each. Each
keeps its own seeded generator and rules, draws once per committed position, in order, from
rows bit for bit those of single passes (:func:`as2d.runtime.rows.beams_exact`): the batch
changes the number of passes, never a token.

Candidates go through the verification kernel, each sample a hypothesis: a pass runs its
*pending* token (the first committed that the cache lacks), its *backlog* and its candidates.
The pooled cache keeps every sample at one length, the least advanced one's; a sample that
advanced further keeps the tokens beyond as its backlog, run again in the next pass (the same
rows; chosen and drawn for once). A sample leaves the batch when it ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.verify import OneHypothesis, Verdict, replay
from as2d.runtime.transcribe.beam import length_score
from as2d.runtime.transcribe.window import (
    Decoded,
    DecodingResult,
    Report,
    commit,
    one_row,
    prompt_pass,
)
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import BeamDecoderState

# Rows a pass runs for one sample (pending token, backlog and candidates). Measured on a
# window that falls back twice (10 samples, 1423 tokens, AS²D): 2, 3, 4 and 8 took 6.5, 6.0,
# 5.6 and 5.7 s; one after another, 6.9-8.3 s.
MAX_FED = 4


@dataclass
class Sample(Decoded):
    """One sampled decode in the batch: its rules (and generator), candidates and tokens."""

    rules: LogitRules
    source: CandidateSource


@dataclass
class SampleBatch:
    """The samples of one window at one temperature, decoded as one batch of hypotheses: a
    window task (:class:`~as2d.runtime.transcribe.window_task.WindowDecode`) that reports each
    pass as one, every sample's counts with the first's texts."""

    state: BeamDecoderState
    samples: list[Sample]
    prompt: list[int]
    sot_index: int
    sample_len: int
    eot: int
    max_fed: int = MAX_FED
    no_speech_prob: float = 0.0
    passes: int = 0  # passes of the batch (each sample's counts hold those it took part in)
    live: list[int] = field(default_factory=list)  # samples in the cache's hypothesis order
    report: Report = None
    steps = 0  # not a beam: each committed token is a step

    @property
    def done(self) -> bool:
        return self.passes > 0 and not self.live

    @property
    def held(self) -> int:
        """Generated tokens of every live sample that the cache holds (its pending one not)."""
        return self.state.length - len(self.prompt)

    def start(self) -> None:
        """The prompt, run once for every sample, and each sample's first token."""
        t0 = time.perf_counter()
        self.no_speech_prob, last = prompt_pass(one_row(self.state), self.prompt, self.sot_index,
                                                self.samples[0].rules.tokenizer.no_speech)
        passed = []
        for i, s in enumerate(self.samples):
            masked = last.copy()  # each sample masks (in place) and draws from its own copy
            token = s.rules.choose(masked, [])
            self._commit(s, [token], [masked])
            passed.append((i, [], Verdict([token], [], 0, 0, len(self.prompt), 0.0,
                                          token == self.eot)))
        self.live = [i for i, s in enumerate(self.samples) if not s.done]
        self.state.reorder([0] * len(self.live))
        self._passed(t0, passed)

    def room(self, sample: Sample) -> int:
        """Candidates ``sample`` may have run after its pending token and backlog."""
        backlog = len(sample.generated) - self.held - 1
        by_len = self.sample_len - len(sample.generated) - 1
        by_ctx = self.state.capacity - len(self.prompt) - len(sample.generated)
        return max(0, min(by_len, by_ctx, self.max_fed - 1 - backlog))

    def step(self) -> None:
        """One pass over every live sample, each with its source's offer."""
        if self.done:
            raise RuntimeError("samples already decoded")
        t0 = time.perf_counter()
        m = self.held
        fed: list[list[int]] = []
        offers: list[list[int]] = []
        for i in self.live:
            s = self.samples[i]
            room = self.room(s)
            offer = list(s.source.propose(s.generated, room))[:room] if room else []
            offers.append(offer)
            fed.append(s.generated[m:] + offer)
        width = max(len(f) for f in fed)
        logits = self.state.forward([f + [self.eot] * (width - len(f)) for f in fed])
        kept = []  # per live sample: fed positions that are its tokens
        passed = []
        for j, i in enumerate(self.live):
            s, offer = self.samples[i], offers[j]
            # Its last committed token's row draws the next token (a length limit can only
            # be reached at the pass's last position: see room).
            start = len(fed[j]) - len(offer) - 1
            draw = OneHypothesis(s.rules.choose, list(s.generated), frozenset({self.eot}))
            steps, _, _ = replay(logits[j:j + 1], [fed[j]], draw, [start])
            self._commit(s, draw.committed, draw.rows)
            kept.append(start + steps)
            passed.append((i, offer, Verdict(draw.committed, [], len(offer), steps - 1,
                                             len(fed[j]), 0.0, draw.done)))
        # Every sample that goes on keeps the positions the least advanced one can keep.
        going = [j for j, i in enumerate(self.live) if not self.samples[i].done]
        if going:
            self.state.truncate(len(self.prompt) + m + min(kept[j] for j in going))
            self.state.reorder(going)
        self.live = [self.live[j] for j in going]
        self._passed(t0, passed)

    def _commit(self, s: Sample, tokens: list[int], rows: list) -> None:
        commit(s, tokens, rows, self.eot, self.sample_len, len(self.prompt),
               self.state.capacity)

    def _passed(self, t0: float, passed: list[tuple[int, list[int], Verdict]]) -> None:
        """Count a pass for the batch and each sample in it, time its verdicts, tell the
        sources; report it as one pass (every sample's counts, the first's texts)."""
        seconds = time.perf_counter() - t0
        self.passes += 1
        for i, offer, v in passed:
            v.seconds = seconds
            self.samples[i].counts.count(v.offered, v.accepted, seconds,
                                         v.offered == 0 and self.passes > 1)
            self.samples[i].source.observe(offer, v)
        if passed and self.report is not None:
            _, offered, lead = passed[0]
            vs = [v for _, _, v in passed]
            self.report(offered, Verdict([t for v in vs for t in v.committed], [],
                                         sum(v.offered for v in vs), sum(v.accepted for v in vs),
                                         sum(v.ran for v in vs), lead.seconds), lead)

    def results(self) -> list[DecodingResult]:
        """Every sample's decode so far (complete once :attr:`done`)."""
        return [s.decoded(self.no_speech_prob) for s in self.samples]

    def result(self) -> DecodingResult:
        """The most probable sample so far (:func:`best`)."""
        results = self.results()
        return results[best(results)]

    def close(self) -> None:
        """Done, stopped or failed: the sources let go, the cache goes back to its pool."""
        try:
            for s in self.samples:
                s.source.finish(s.generated)
        finally:
            self.state.model.release(self.state)


def best(results: list[DecodingResult]) -> int:
    """Which of a window's ``best_of`` samples is kept: whisper's ranking (log-probability
    over length), the first of equals."""
    scores = [length_score(r.sum_logprob, len(r.tokens)) for r in results]
    return scores.index(max(scores))
