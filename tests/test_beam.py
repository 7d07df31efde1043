"""Beam search (issue 26), as openai-whisper's ``BeamSearchDecoder`` does it.

The pure parts first (options whisper refuses, the ranking, the step's choice), then the proof
on real clips: as2d's beam search (all hypotheses in one batched pass over a pooled cache)
gives the tokens and the score of a plain reference written here, whisper's algorithm over the
same ONNX sessions with one batch-1 decoder state per hypothesis and whole-cache copies when
beams fork (bit for bit: the batched rows are single passes' rows on the path a search takes;
the load-time check of every batched shape, rows.probe_beams, is tests/test_int8_refine.py's).
Then the long-form loop, the command line and the API.
"""

from __future__ import annotations

import numpy as np
import pytest

from as2d.runtime.audio import load_audio
from as2d.runtime.transcribe.beam import (
    BeamOptions,
    BeamWindow,
    check,
    length_score,
    select,
    top,
)
from as2d.runtime.transcribe.longform import LongFormTranscriber, TranscriptionInfo
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions, beam_options
from as2d.runtime.whisper.features import LogMel
from as2d.runtime.whisper.logits import LogitRules
from tests.conftest import ROOT
from tests.helpers import cli, error_line

SAMPLE = ROOT / "samples" / "sense_and_sensibility.wav"


# -- options and the pure rules ------------------------------------------------------------------
@pytest.mark.parametrize("size, patience, penalty, fragment", [
    (0, None, None, "--beam-size"), (2.5, None, None, "--beam-size"),
    (5, 0.0, None, "--patience"), (5, float("nan"), None, "--patience"),
    (5, 0.1, None, "--patience"), (5, None, 1.5, "--length-penalty"),
    (5, None, -0.1, "--length-penalty"), (float("inf"), None, None, "--beam-size"),
    (5, 1e308, None, "--patience")])
def test_options_whisper_refuses_are_refused(size, patience, penalty, fragment):
    with pytest.raises(ValueError) as caught:
        check(size, patience, penalty)
    assert caught.value.as_flags().startswith(fragment)
    assert str(caught.value).startswith(fragment[2:].replace("-", "_"))


def test_beam_of_one_or_none_is_greedy_and_patience_needs_a_beam():
    assert beam_options(TranscribeOptions()) is None
    assert beam_options(TranscribeOptions(beam_size=1)) is None
    assert beam_options(TranscribeOptions(beam_size=5, patience=2.0)).max_finished == 10
    assert BeamOptions(5).max_finished == 5
    with pytest.raises(ValueError, match="^patience needs beam_size$") as caught:
        beam_options(TranscribeOptions(patience=2.0))
    assert caught.value.as_flags() == "--patience needs --beam-size"


def test_ranking_divides_by_length_or_by_the_nmt_penalty():
    assert length_score(-6.0, 3, None) == -2.0
    assert length_score(-6.0, 0, None) == -6.0  # no division by zero
    assert length_score(-6.0, 3, 1.0) == pytest.approx(-6.0 / (8 / 6))
    assert length_score(-6.0, 3, 0.0) == -6.0


def test_top_is_a_stable_descending_sort_of_the_best_k():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3000)).astype(np.float32)
    x[2, 100:110] = 9.0  # ties at the k-th value: lower index first
    x[3, :] = -np.inf
    x[3, 7] = 0.0
    want = np.argsort(-x, axis=1, kind="stable")[:, :6]
    assert (top(x, 6) == want).all()


def test_a_step_keeps_the_best_live_hypotheses_and_sets_finished_aside():
    eot = 9
    lp = np.full((2, 10), -np.inf, np.float32)
    lp[0, [1, 2, eot]] = [-0.1, -2.0, -0.5]
    lp[1, [3, 4, 5]] = [-0.2, -0.3, -4.0]
    live, sources, sums, finished = select([(7,), (8,)], np.array([0.0, -1.0], np.float32),
                                           lp, 2, eot)
    # scores: (7,1) -0.1, (7,9) -0.5 finished, (8,3) -1.2, (8,4) -1.3, (7,2) -2.0, ...
    assert live == [(7, 1), (8, 3)] and sources == [0, 1]
    assert sums.dtype == np.float32 and sums.tolist() == pytest.approx([-0.1, -1.2])
    assert list(finished) == [(7, eot)]


# -- the reference: whisper's algorithm written plainly -----------------------------------------
def _copy_state(model, ctx, src):
    """A new batch-1 state holding ``src``'s whole cache (whisper's rearrange_kv_cache)."""
    dst = model.decoder_state(ctx)
    for a, b in zip(dst.k + dst.v, src.k + src.v):
        a[: src.length] = b[: src.length]
    dst.length = src.length
    return dst


def reference_beam(model, ctx, prompt, rules, sample_len, beam_size, patience=None,
                   length_penalty=None):
    """openai-whisper's DecodingTask with a BeamSearchDecoder and a MaximumLikelihoodRanker,
    for one audio: ``(tokens, sum_logprob)``. Every hypothesis has its own batch-1 decoder
    state; a new beam copies its source's cache."""
    eot, n_ctx, p = model.tokenizer.eot, model.dims.n_text_ctx, len(prompt)
    first = model.decoder_state(ctx)
    rows = [first.forward(prompt)[-1]]
    states, tokens = [first], [list(prompt)]
    sums = np.zeros(1, np.float32)
    finished: dict = {}
    max_candidates = round(beam_size * (patience or 1.0))
    try:
        for i in range(sample_len):
            if i:
                rows = [s.forward([t[-1]])[-1] for s, t in zip(states, tokens)]
            scores, sources = {}, {}
            for j, (t, row) in enumerate(zip(tokens, rows)):
                row = rules.apply(row.copy(), t[p:])
                m = row.max()
                lp = row - (m + np.log(np.sum(np.exp(row - m), dtype=np.float32)))
                for tok in np.argsort(-lp, kind="stable")[: beam_size + 1]:
                    seq = tuple(t + [int(tok)])
                    scores[seq] = np.float32(sums[j] + lp[tok])
                    sources[seq] = j
            new_tokens, new_sources, new_sums, newly = [], [], [], {}
            for seq in sorted(scores, key=scores.get, reverse=True):
                if seq[-1] == eot:
                    newly[seq] = scores[seq]
                else:
                    new_tokens.append(list(seq))
                    new_sources.append(sources[seq])
                    new_sums.append(scores[seq])
                    if len(new_tokens) == beam_size:
                        break
            old = states
            states = [_copy_state(model, ctx, old[s]) for s in new_sources]
            for s in old:
                model.release(s)
            tokens, sums = new_tokens, np.array(new_sums, np.float32)
            for seq in sorted(newly, key=newly.get, reverse=True):
                if len(finished) >= max_candidates:
                    break
                finished[seq] = newly[seq]
            if len(finished) >= max_candidates or len(tokens[0]) > n_ctx:
                break
    finally:
        for s in states:
            model.release(s)
    if len(finished) < beam_size:
        for j in list(np.argsort(sums))[::-1]:
            finished[tuple(tokens[j] + [eot])] = sums[j]
            if len(finished) >= beam_size:
                break
    texts = [list(seq[p:seq.index(eot, p)]) for seq in finished]
    logprobs = [float(v) for v in finished.values()]
    scores = [lp / (len(t) if length_penalty is None else ((5 + len(t)) / 6) ** length_penalty)
              for t, lp in zip(texts, logprobs)]
    best = int(np.argmax(scores))
    return texts[best], logprobs[best]


# -- real models ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def beam_model(whisper):
    """``beam_model("tiny.en")``: a loaded target with its batched (beam) graph."""

    def get(name: str):
        model = whisper(name, "int8", threads=2)
        assert model.beam_graph is not None  # made when the bundle was installed
        return model

    return get


def _window(model, path, timestamps=True):
    """The first window of ``path``: encoding, prompt and rules as the long-form loop makes
    them (English, no previous text)."""
    tk = model.tokenizer
    mel = LogMel(load_audio(str(path)), model.dims.n_mels)
    ctx = model.encode(mel.window(0, min(3000, mel.n_frames)))
    prompt = list(tk.sot_sequence("en" if model.multilingual else None))
    if not timestamps:
        prompt.append(tk.no_timestamps)
    rules = LogitRules(tk, model.dims.n_vocab, timestamps=timestamps,
                       suppress=tuple(tk.suppress_tokens()))
    return ctx, prompt, rules


_REFERENCES: dict = {}


def reference_of(model, path, timestamps: bool = True, beam_size: int = 5):
    """``reference_beam`` on the first window of ``path``, once per module: the comparison
    with whisper's algorithm and the long-form loop's check read the same (slow) reference."""
    key = (model.name, str(path), timestamps, beam_size)
    if key not in _REFERENCES:
        ctx, prompt, rules = _window(model, path, timestamps)
        _REFERENCES[key] = reference_beam(model, ctx, prompt, rules,
                                          model.dims.n_text_ctx // 2, beam_size)
    return _REFERENCES[key]


def _as2d_beam(model, ctx, prompt, rules, options):
    tk = model.tokenizer
    state = model.beam_state(ctx, options.beam_size)
    dec = BeamWindow(state, rules, prompt, prompt.index(tk.sot), model.dims.n_text_ctx // 2,
                     tk.eot, options)
    try:
        dec.start()
        while not dec.done:
            dec.step()
    finally:
        model.release(state)
    return dec.result()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_beam_of_five_is_whispers_beam_search_on_real_clips(beam_model, librivox, name):
    """The batched, pooled beam search == the plain reference, token for token and score for
    score, on real clips (and without timestamps on one)."""
    model = beam_model(name)
    # One short clip a model: tiny.en's with and without timestamps, base's (slower) another.
    # A longer sentence (7 s: more forks, and more finished hypotheses under patience) is
    # compared with the reference in test_patience_and_length_penalty_follow_whisper; the
    # search itself is checked over random models in tests/test_kernel.py.
    path = librivox[1].path if name == "tiny.en" else librivox[4].path
    for timestamps in (True, False) if name == "tiny.en" else (True,):
        ctx, prompt, rules = _window(model, path, timestamps)
        got = _as2d_beam(model, ctx, prompt, rules, BeamOptions(5))
        want, want_lp = reference_of(model, path, timestamps)
        assert got.tokens == want, (path.name, model.tokenizer.decode(got.tokens),
                                    model.tokenizer.decode(want))
        assert got.sum_logprob == want_lp
        assert got.completed


@pytest.mark.slow
def test_patience_and_length_penalty_follow_whisper(beam_model, librivox):
    model = beam_model("tiny.en")
    # Patience with the NMT penalty, and the penalty alone at another width (without
    # patience: at most beam_size finished).
    for path, options in ((librivox[0].path, BeamOptions(3, patience=2.0, length_penalty=0.6)),
                          (librivox[1].path, BeamOptions(4, length_penalty=1.0))):
        ctx, prompt, rules = _window(model, path)
        got = _as2d_beam(model, ctx, prompt, rules, options)
        want, want_lp = reference_beam(model, ctx, prompt, rules, model.dims.n_text_ctx // 2,
                                       options.beam_size, options.patience,
                                       options.length_penalty)
        assert (got.tokens, got.sum_logprob) == (want, want_lp), path.name


@pytest.mark.slow
def test_the_long_form_loop_decodes_windows_with_the_beam(beam_model, librivox):
    """``TranscribeOptions(beam_size=5)``: a one-window clip's segments carry the reference
    beam's tokens; the run says it searched with a beam; greedy stays greedy."""
    from as2d.runtime.transcribe.stats import StatsCollector

    model = beam_model("tiny.en")
    stats = StatsCollector()
    t = LongFormTranscriber(model, listener=stats)
    path = librivox[1].path
    clip = load_audio(str(path))
    info = TranscriptionInfo(None, 0.0, clip.duration)
    segs = list(t.transcribe(clip, TranscribeOptions(beam_size=5, compression_ratio_threshold=None,
                                                     logprob_threshold=None), info))
    assert stats.current.summary()["search"] == "beam 5"
    assert stats.current.summary()["decoder"] == "target"
    assert (info.plan.decoder, info.plan.drafter) == ("target", None)
    first_window = [tok for s in segs if s.seek == 0 for tok in s.tokens]
    want, _ = reference_of(model, path)  # the window test_beam_of_five_... compares too
    # The window's complete segments: the beam's tokens up to its last closed timestamp pair.
    assert first_window and first_window == want[: len(first_window)]
    list(t.transcribe(clip, TranscribeOptions()))
    assert stats.current.summary()["search"] == "greedy"


# -- the faces ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, fragment", [
    (["--patience", "2"], "--patience needs --beam-size"),
    (["--beam-size", "0"], "--beam-size"),
    (["--beam-size", "5", "--length-penalty", "3"], "--length-penalty"),
    (["--length-penalty", "0.5"], "--length-penalty needs --beam-size")])
def test_bad_beam_options_are_one_error_line(args, fragment, tmp_path):
    result = cli("transcribe", str(SAMPLE), *args, models_dir=tmp_path)
    error_line(result, 2, fragment)


def test_whispers_spelling_becomes_as2ds_option():
    import typer.main

    from as2d.cli.app import app
    from as2d.cli.transcribe_cmd import TranscribeRequest  # noqa: F401 - registers the command
    from as2d.cli.whisper_compat import translate

    command = typer.main.get_command(app).commands["transcribe"]
    assert translate(command, ["a.wav", "--beam_size", "5", "--patience", "2",
                               "--length_penalty", "None"]) == \
        ["a.wav", "--beam-size=5", "--patience", "2"]


@pytest.mark.slow
def test_the_command_line_and_the_api_decode_with_the_beam(beam_model, models_root, librivox):
    """``as2d transcribe --beam_size 5 --stats`` says which search ran and writes the text the
    Python API gives for ``beam_size=5`` (on a short sentence: the faces' options are under
    test, the search is above)."""
    from as2d.api import Transcriber

    beam_model("tiny.en")  # the bundle's beam graph exists
    path = str(librivox[1].path)
    result = cli("transcribe", path, "-m", "tiny.en", "--beam_size", "5", "--stats",
                 "-f", "txt", models_dir=models_root)
    assert result.exit_code == 0, result.stderr
    assert "search=beam 5" in result.stderr
    with Transcriber("tiny.en", drafter=None, decoder="target", models_dir=models_root) as tr:
        segs, _ = tr.transcribe(path, beam_size=5)
        text = " ".join(s.text.strip() for s in segs)
    assert " ".join(result.stdout.split()) == " ".join(text.split())


# -- speculative beam search ----------------------------------------------------------------------
def _segments(model, strategy, path, options, stats=None):
    t = LongFormTranscriber(model, strategy, listener=stats)
    try:
        segs = list(t.transcribe(load_audio(str(path)), options))
    finally:
        t.close()
        strategy.close()
    return [(s.seek, s.tokens, s.avg_logprob, s.start, s.end) for s in segs]


@pytest.mark.slow
def test_speculative_beam_is_target_only_beam_on_real_clips(beam_model, whisper):
    """AS²D's drafter proposes every hypothesis's candidates; the segments (tokens, scores,
    times) are target-only beam search's on a real clip (two windows for base, the second
    prompted), and the speculative path ran (more beam steps than passes). base with tiny.en
    drafting, as as2d runs by default; the replay over candidates is checked over random
    candidates in tests/test_kernel.py and over damaged streams below."""
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.strategy import TargetOnly

    target = beam_model("base")
    drafter = whisper("tiny.en", "int8", threads=1, role="drafter")
    options = TranscribeOptions(language="en", beam_size=5)
    want = _segments(target, TargetOnly(target), SAMPLE, options)
    stats = StatsCollector()
    got = _segments(target, AS2D(target, drafter), SAMPLE, options, stats)
    assert got == want
    run = stats.current.summary()
    assert run["decoder"] == "as2d" and run["search"] == "beam 5"
    assert (run["drafter"], run["decoder"]) == (drafter.name, "as2d")
    # candidates were verified and beam steps replayed over them
    assert run["beam_steps"] > run["target_passes"]


@pytest.mark.slow
def test_a_beam_window_that_falls_back_samples_the_same_tokens(beam_model, whisper, librivox):
    """Beam search at temperature 0, then (a bar no window clears) sampled decodes that take
    the drafter's candidates through the same window's stream proposer the beam used: the
    kept samples are target-only's."""
    from as2d.runtime.events import Note, Verified
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.strategy import TargetOnly

    target = beam_model("base")
    drafter = whisper("tiny.en", "int8", threads=1, role="drafter")
    options = TranscribeOptions(language="en", beam_size=2, temperatures=(0.0, 0.6),
                                logprob_threshold=0.0, best_of=2)
    want = _segments(target, TargetOnly(target), librivox[1].path, options)
    events: list = []
    got = _segments(target, AS2D(target, drafter), librivox[1].path, options, events.append)
    assert got == want
    assert any(isinstance(e, Note) and "temperature 0.6" in e.message for e in events)
    assert any(e.accepted for e in events if isinstance(e, Verified))  # the samples' passes


@pytest.mark.slow
def test_speculative_beam_is_exact_whatever_the_drafter_says(beam_model, librivox):
    """A property: the drafter's stream damaged at random (words dropped, replaced, inserted,
    segments closed anywhere, timestamps guessed wrong, a stream cut short) changes how many
    passes a window takes, never its tokens or score."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from as2d.runtime.speculative.stream import CandidateStream
    from as2d.runtime.transcribe.stream_source import StreamProposer

    model = beam_model("tiny.en")
    tk = model.tokenizer
    ctx, prompt, rules = _window(model, librivox[0].path)
    options = BeamOptions(5)
    plain = _as2d_beam(model, ctx, prompt, rules, options)
    text = [t for t in plain.tokens if t < tk.eot]
    assert text

    def decode(stream):
        state = model.beam_state(ctx, options.beam_size)
        dec = BeamWindow(state, rules, prompt, prompt.index(tk.sot), model.dims.n_text_ctx // 2,
                         tk.eot, options)
        proposer = StreamProposer(stream, 0.0, tk.timestamp_begin, tk.eot)
        try:
            dec.start()
            k = 1
            while not dec.done:
                props = [proposer.propose(seq, k) for seq in dec.beams]
                dec.step(props)
                k = k % 6 + 1  # every budget, in turn
        finally:
            model.release(state)
        return dec

    edits = st.lists(st.tuples(st.sampled_from(["keep", "drop", "swap", "insert", "close"]),
                               st.integers(0, 50000)), min_size=len(text), max_size=len(text) + 8)

    # Few examples on the real model: the kernel's beam property (tests/test_kernel.py) runs
    # a hundred.
    @settings(max_examples=5, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(edits=edits, cut=st.integers(0, len(text) + 8))
    def check(edits, cut):
        stream = CandidateStream()
        for i, (what, value) in enumerate(edits):
            t = text[i % len(text)]
            if what == "keep":
                stream.extend([t], 0.1 * i)
            elif what == "swap":
                stream.extend([value % tk.eot], 0.1 * i)
            elif what == "insert":
                stream.extend([t, value % tk.eot], 0.1 * i)
            elif what == "close":
                stream.mark_boundary((value % 1500) * 0.02)
                stream.extend([t], 0.1 * i)
            if len(stream) >= cut:
                break
        dec = decode(stream)
        got = dec.result()
        assert (got.tokens, got.sum_logprob) == (plain.tokens, plain.sum_logprob)
        assert dec.steps == plain.counts.passes  # one beam step per plain pass, always

    check()
    # And the stream the target would have liked: fewer passes than beam steps.
    perfect = CandidateStream()
    perfect.extend(text, 0.0)
    dec = decode(perfect)
    assert dec.result().tokens == plain.tokens
    assert dec.counts.passes < dec.steps
