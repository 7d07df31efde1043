"""The verification kernel (:func:`as2d.runtime.speculative.verify.replay`), once, exhaustively.

Every decoder commits through the kernel: greedy (one hypothesis), a fallback's samples side by
side (one hypothesis each) and beam search (a ranked group). Its promise is that candidates change
the number of passes, never a token. Here each decoder runs over a small model whose next-token
row is a fixed pseudo-random function of the whole prefix (so a row is the row of its prefix
whatever pass computes it: row exactness by construction), once without candidates and once with
random, partly right and damaged candidates, and the tokens must be the same.
"""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.verify import argmax, verify
from as2d.runtime.transcribe.beam import BeamOptions, BeamWindow, log_softmax
from as2d.runtime.transcribe.samples import Sample, SampleBatch

V = 7  # a small vocabulary: random candidates are often right
EOT = 6
PROMPT = [5, 4]


def row_of(prefix) -> np.ndarray:
    """The model: the next-token logits after ``prefix`` (float32, deterministic)."""
    seed = zlib.crc32(np.asarray(prefix, np.int64).tobytes())
    row = np.random.default_rng(seed).standard_normal(V).astype(np.float32) * 2
    row[EOT] -= 1.5  # texts of a few tokens, not one
    return row


class Cache:
    """One sequence's KV cache (the greedy decoders' :class:`TargetCache`)."""

    capacity = 64

    def __init__(self) -> None:
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self.tokens)

    def forward(self, tokens, logit_rows=None):
        out = []
        for t in tokens:
            self.tokens.append(t)
            out.append(row_of(self.tokens))
        return np.stack(out)[-(logit_rows or len(out)):]

    def truncate(self, length: int) -> None:
        del self.tokens[length:]


class Pool:
    """Hypotheses of one length side by side (the pooled beam cache's interface)."""

    capacity = 64

    def __init__(self) -> None:
        self.seqs: list[list[int]] = [[]]

    @property
    def length(self) -> int:
        return len(self.seqs[0])

    def forward(self, fed, logit_rows=None):
        out = []
        for seq, tokens in zip(self.seqs, fed):
            rows = []
            for t in tokens:
                seq.append(t)
                rows.append(row_of(seq))
            out.append(rows[-(logit_rows or len(rows)):])
        return np.array(out, np.float32)

    def reorder(self, sources) -> None:
        self.seqs = [list(self.seqs[i]) for i in sources]

    def truncate(self, length: int) -> None:
        for seq in self.seqs:
            del seq[length:]


class Rules:
    """Greedy, or a seeded draw at a temperature; no suppression (the kernel is under test)."""

    tokenizer = SimpleNamespace(no_speech=None)

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed) if seed is not None else None

    def apply(self, row, prefix) -> None:
        pass

    def choose(self, row, prefix) -> int:
        if self.rng is None:
            return int(np.argmax(row))
        p = np.exp(log_softmax(row[None])[0].astype(np.float64))
        return int(self.rng.choice(V, p=p / p.sum()))


class Scripted(CandidateSource):
    """Candidates from a script: right ones (the plain decode's next tokens) damaged at random."""

    def __init__(self, truth: list[int] | None, draws, lengths) -> None:
        self.truth, self.draws, self.lengths = truth or [], iter(draws), iter(lengths)

    def propose(self, context, room):
        n = min(next(self.lengths, 0), room)
        right = self.truth[len(context): len(context) + n]
        out = [t if next(self.draws, 1) else (t + 1) % V for t in right]
        return out + [next(self.draws, 0) % V for _ in range(n - len(out))]


def greedy(candidates=None, limit: int = 24) -> tuple[list[int], int]:
    cache = Cache()
    cache.forward(PROMPT[:-1])
    prefix = [int(np.argmax(cache.forward([PROMPT[-1]])[0]))]
    passes = 0
    while prefix[-1] != EOT and len(prefix) < limit:
        room = limit - len(prefix) - 1
        offer = candidates.propose(prefix, room)[:room] if candidates else []
        committed = verify(cache, prefix[-1], offer, prefix, argmax, frozenset({EOT})).committed
        prefix.extend(committed)
        passes += 1
    return prefix, passes


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, V), max_size=200), st.lists(st.integers(0, 6), max_size=60))
def test_greedy_commits_its_plain_tokens_whatever_the_candidates(draws, lengths):
    plain, plain_passes = greedy()
    tokens, passes = greedy(Scripted(plain, draws, lengths))
    assert tokens == plain
    assert passes <= plain_passes


def samples(seeds: list[int], offers: bool, draws, lengths, limit: int = 20):
    state = Pool()
    sources = [Scripted(None, draws, lengths) if offers else CandidateSource() for _ in seeds]
    batch = SampleBatch(state, [Sample(Rules(seed), src) for seed, src in zip(seeds, sources)],
                        PROMPT, 0, limit, EOT)
    batch.start()
    while not batch.done:
        batch.step()
    return [(r.tokens, r.completed) for r in batch.results()], batch.passes


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 100), min_size=1, max_size=5),
       st.lists(st.integers(0, V), max_size=300), st.lists(st.integers(0, 3), max_size=80))
def test_samples_draw_their_plain_tokens_whatever_the_candidates(seeds, draws, lengths):
    plain, plain_passes = samples(seeds, False, (), ())
    drawn, passes = samples(seeds, True, draws, lengths)
    assert drawn == plain
    assert passes <= plain_passes


def test_each_sample_draws_alone_what_it_draws_in_the_batch():
    together, _ = samples([1, 2, 3], False, (), ())
    assert together == [samples([s], False, (), ())[0][0] for s in (1, 2, 3)]


class Proposals:
    def __init__(self, draws, lengths) -> None:
        self.draws, self.lengths = iter(draws), iter(lengths)

    def __call__(self, beams, room):
        k = min(next(self.lengths, 0), room)
        return [[next(self.draws, 0) % V for _ in range(k)] for _ in beams]


def beam(size: int, proposals=None, patience=None, limit: int = 16):
    window = BeamWindow(Pool(), Rules(), PROMPT, 0, limit, EOT, BeamOptions(size, patience))
    window.start()
    passes = 1
    while not window.done:
        window.step(proposals(window.beams, window.room) if proposals else None)
        passes += 1
    result = window.result()
    return (result.tokens, result.sum_logprob, window.steps), passes


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 5), st.sampled_from([None, 2.0]),
       st.lists(st.integers(0, V), max_size=400), st.lists(st.integers(0, 4), max_size=40))
def test_beam_search_finds_its_plain_result_whatever_the_candidates(size, patience, draws,
                                                                    lengths):
    plain, plain_passes = beam(size, None, patience)
    found, passes = beam(size, Proposals(draws, lengths), patience)
    assert found == plain
    assert passes <= plain_passes


def test_right_candidates_take_several_beam_steps_in_one_pass():
    """Each hypothesis offered its own greedy continuation: passes fall, the result stays."""

    def greedy_continuations(beams, room):
        out = []
        for seq in beams:
            prefix, guess = PROMPT + list(seq), []
            for _ in range(min(room, 3)):
                guess.append(int(np.argmax(row_of(prefix + guess))))
            out.append(guess)
        return out

    plain, plain_passes = beam(3)
    found, passes = beam(3, greedy_continuations)
    assert found == plain
    assert passes < plain_passes
