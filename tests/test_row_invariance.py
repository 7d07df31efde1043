"""The lossless guarantee at its root: a block of tokens gives the logits of single steps.

Speculative verification runs ``[pending] + k candidates`` through the decoder in one pass and
compares each row's greedy choice with the candidate. That is exact only if every row's logits
equal, bit for bit, what a one-token step at that position would give, and if dropping rejected
candidates from the cache (``truncate``) leaves no trace. Both are checked here on real models
and real audio, for every precision and thread count the CLI uses: base (the default target)
in int8 and fp32, tiny.en in int8 (its fp32 graph is base's fp32 graph at other sizes).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import greedy_tokens, prompt_for

pytestmark = pytest.mark.slow

CONFIGS = [(name, prec, threads) for name, prec in (("tiny.en", "int8"), ("base", "int8"),
                                                    ("base", "fp32")) for threads in (1, 2)]
N_REAL = 40  # decoded tokens used after the prompt


@pytest.fixture(scope="module")
def windows(clips):
    from as2d.runtime.audio import load_audio
    from as2d.runtime.whisper.features import LogMel

    by_name = {c.name: c for c in clips}
    # A long, dense clip, so that 40 real tokens exist after the prompt.
    clip = by_name.get("two_cities.wav") or max(clips, key=lambda c: c.path.stat().st_size)
    return LogMel(load_audio(clip.path), 80).window(0)


@pytest.fixture(scope="module")
def prepared(whisper, windows):
    """(model, ctx, prompt, real tokens, single-step logits of prompt + real) per config."""
    cache = {}

    def get(name, precision, threads):
        key = (name, precision, threads)
        if key not in cache:
            model = whisper(name, precision, threads)
            ctx = model.encode(windows)
            # Prompt + the model's own greedy tokens, with timestamps so those rows are covered.
            # Greedy decoding stops at N_REAL tokens: its first N_REAL are those of the whole
            # window's decode (a token depends only on the ones before it; the length limit
            # only ends the loop), without the ~80 more steps per config that were cut off.
            prompt = prompt_for(model, timestamps=True)
            real = greedy_tokens(model, ctx, timestamps=True, sample_len=N_REAL)
            assert len(real) >= 20, "the clip should give a real sequence to test with"
            state = model.decoder_state(ctx)
            try:
                singles = np.concatenate([state.forward([t]) for t in prompt + real])
            finally:
                model.release(state)
            cache[key] = (model, ctx, prompt, real, singles)
        return cache[key]

    return get


def _garbage(model, n, seed):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, model.tokenizer.eot, n)]


@pytest.mark.parametrize("name,precision,threads", CONFIGS,
                         ids=[f"{n}-{p}-{t}t" for n, p, t in CONFIGS])
def test_block_forward_equals_single_token_forwards_bit_for_bit(name, precision, threads,
                                                                 prepared):
    model, ctx, prompt, real, reference = prepared(name, precision, threads)
    seq = prompt + real
    state = model.decoder_state(ctx)
    try:
        assert reference.shape == (len(seq), model.dims.n_vocab)
        assert np.isfinite(reference).all()
        for block in (2, 5, 16, len(seq)):
            state.truncate(0)
            rows = np.concatenate([state.forward(seq[i:i + block])
                                   for i in range(0, len(seq), block)])
            diff = np.abs(rows - reference).max()
            assert np.array_equal(rows, reference), \
                f"blocks of {block}: logits differ from single steps (max |diff| {diff:g})"
            assert state.length == len(seq)
    finally:
        model.release(state)


@pytest.mark.parametrize("name,precision,threads", CONFIGS,
                         ids=[f"{n}-{p}-{t}t" for n, p, t in CONFIGS])
def test_logits_of_the_last_rows_only_are_those_rows_bit_for_bit(name, precision, threads,
                                                                 prepared):
    """A prompt pass asks for the rows from its start-of-transcript token on (``logit_rows``):
    the graphs compute only those, and they are the rows a whole pass gives, in the decoder
    and in the batched graph (one hypothesis and two)."""
    model, ctx, prompt, real, reference = prepared(name, precision, threads)
    seq = prompt + real
    assert model.logit_rows, "a bundle installed now computes only the rows asked for"
    # int8 decoders read one mapping of the 16-bit token table, whichever graph runs
    assert bool(model.tables) == (precision == "int8")
    state = model.decoder_state(ctx)
    try:
        for r in (1, 3, len(seq)):
            state.truncate(0)
            rows = state.forward(seq, logit_rows=r)
            assert rows.shape == (r, model.dims.n_vocab)
            assert np.array_equal(rows, reference[-r:]), f"the last {r} rows differ"
    finally:
        model.release(state)
    whole, last = model.beam_state(ctx, 2), model.beam_state(ctx, 2)
    try:
        p = len(prompt)
        head = whole.forward([prompt])
        assert np.array_equal(last.forward([prompt], logit_rows=1), head[:, -1:])
        assert model.beam_logit_rows
        for state in (whole, last):
            state.reorder([0, 0])
        full = whole.forward([seq[p:]] * 2)
        rows = last.forward([seq[p:]] * 2, logit_rows=3)
        assert rows.shape == (2, 3, model.dims.n_vocab)
        assert np.array_equal(rows, full[:, -3:])
    finally:
        model.release(whole)
        model.release(last)


@pytest.mark.parametrize("name,precision,threads", CONFIGS,
                         ids=[f"{n}-{p}-{t}t" for n, p, t in CONFIGS])
def test_truncating_rejected_tokens_leaves_no_trace(name, precision, threads, prepared):
    """Verification's cache life: run pending + good + garbage, keep the good rows, drop the
    garbage, go on. Every kept row, and every later row, equals the single-step logits."""
    model, ctx, prompt, real, reference = prepared(name, precision, threads)
    seq = prompt + real
    state = model.decoder_state(ctx)
    try:
        rows = [state.forward(prompt)]
        pos = len(prompt)
        step = 0
        while pos < len(seq):
            good = seq[pos:pos + 1 + step % 4]  # the pending token + 0..3 accepted candidates
            junk = _garbage(model, 1 + step % 5, seed=step)
            base = state.length
            out = state.forward(good + junk)
            assert out.shape[0] == len(good) + len(junk)
            rows.append(out[:len(good)])
            state.truncate(base + len(good))
            assert state.length == pos + len(good)
            pos += len(good)
            step += 1
        rows = np.concatenate(rows)
        diff = np.abs(rows - reference).max()
        assert np.array_equal(rows, reference), \
            f"logits after truncating rejected tokens differ (max |diff| {diff:g})"
    finally:
        model.release(state)


def test_truncate_refuses_to_grow_or_go_negative(whisper, windows):
    model = whisper("tiny.en", "int8", 1)
    state = model.decoder_state(model.encode(windows))
    try:
        state.forward(prompt_for(model, True))
        with pytest.raises(ValueError):
            state.truncate(state.length + 1)
        with pytest.raises(ValueError):
            state.truncate(-1)
        with pytest.raises(ValueError):
            state.forward([0] * (state.capacity - state.length + 1))
    finally:
        model.release(state)


@pytest.mark.parametrize("timestamps,name", [(True, "tiny.en"), (False, "base")],
                         ids=["timestamps-tiny.en", "no-timestamps-base"])
def test_verifying_candidates_commits_exactly_the_target_only_tokens(name, timestamps, whisper,
                                                                      windows):
    """WindowState.step (the verification kernel with Whisper's logit rules) given a mix of
    right and wrong candidates commits what plain greedy decoding commits (the rules apply per
    position, timestamps included). Each mode once, on one model each: the kernel itself is
    tested exhaustively in tests/test_kernel.py, the rows it reads above."""
    from as2d.runtime.transcribe.window import WindowState
    from as2d.runtime.whisper.logits import LogitRules

    model = whisper(name, "int8", 2)
    ctx = model.encode(windows)
    expected = greedy_tokens(model, ctx, timestamps)
    tk = model.tokenizer
    prompt = prompt_for(model, timestamps)
    rules = LogitRules(tk, model.dims.n_vocab, timestamps=timestamps,
                       suppress=tuple(tk.suppress_tokens()))
    rng = np.random.default_rng(7)
    state = model.decoder_state(ctx)
    try:
        dec = WindowState(state, rules, prompt, prompt.index(tk.sot), 224, tk.eot)
        dec.start()
        accepted = offered = 0
        while not dec.done:
            n = len(dec.generated)
            k = int(rng.integers(0, 7))
            cands = list(expected[n:n + k]) + [tk.eot]  # right, then one past the end
            if k and rng.random() < 0.4:  # corrupt one candidate
                j = int(rng.integers(0, len(cands)))
                cands[j] = int(rng.integers(0, tk.eot))
            r = dec.step(cands)
            accepted += r.accepted
            offered += r.offered
        assert dec.generated == expected
        assert dec.completed
        assert 0 < accepted < offered  # both paths (accept and reject) were exercised
        assert dec.counts.passes < len(expected)  # and verification saved passes
    finally:
        model.release(state)
