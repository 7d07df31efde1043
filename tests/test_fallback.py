"""Temperature fallback, as openai-whisper and faster-whisper do it, without losing losslessness.

The schedule, the verdict on a decode and the sampling rule are specified on their own first;
then on real audio made hard (a clip under white noise at -5 dB SNR, and clean clips under a raised
log-probability threshold): windows that fall back are sampled by the target alone, with a seeded
generator, so AS²D, classic SD and target-only still give the same tokens, a run is reproducible,
and the seed (and nothing else) changes the sampled text. Then hotwords, the prompt reset after a
hot window, the command line and the Python API.
"""

from __future__ import annotations

import numpy as np
import pytest

from as2d.runtime.audio import load_audio
from as2d.runtime.events import Note
from as2d.runtime.transcribe.as2d import AS2D
from as2d.runtime.transcribe.attempts import Attempts
from as2d.runtime.transcribe.fallback import (
    DEFAULT_TEMPERATURES,
    judge,
    temperature_schedule,
    window_rng,
)
from as2d.runtime.transcribe.longform import LongFormTranscriber
from as2d.runtime.transcribe.sd import SerialSD
from as2d.runtime.transcribe.strategy import TargetOnly
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.runtime.whisper.logits import sample
from tests.helpers import cli, error_line, write_wav

NEG_INF = np.float32(-np.inf)


# -- the schedule ------------------------------------------------------------------------------
def test_the_default_schedule_is_whispers():
    assert DEFAULT_TEMPERATURES == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert temperature_schedule() == DEFAULT_TEMPERATURES
    # openai-whisper's command line: --temperature 0 --temperature_increment_on_fallback 0.2
    assert temperature_schedule("0", 0.2) == DEFAULT_TEMPERATURES


def test_a_single_temperature_grows_by_the_increment_up_to_one():
    assert temperature_schedule(0.5, 0.2) == (0.5, 0.7, 0.9)
    assert temperature_schedule(0.0, 0.5) == (0.0, 0.5, 1.0)
    assert temperature_schedule(0.3) == (0.3,)  # no increment: no fallback
    assert temperature_schedule("0", 0) == (0.0,)  # increment 0: greedy only


def test_a_list_is_used_as_given():
    assert temperature_schedule("0, 0.5,1", 0.2) == (0.0, 0.5, 1.0)
    assert temperature_schedule([0.0, 0.7]) == (0.0, 0.7)


@pytest.mark.parametrize("text", ["abc", "", "0,x", "-0.2", "nan"])
def test_a_bad_temperature_is_a_value_error(text):
    with pytest.raises(ValueError):
        temperature_schedule(text, 0.2)


# -- the verdict -------------------------------------------------------------------------------
def test_a_loop_or_low_confidence_falls_back():
    assert judge(-0.3, 2.6, 0.0, 2.4, -1.0, 0.6).needs_fallback  # repetition
    assert judge(-1.3, 1.2, 0.0, 2.4, -1.0, 0.6).needs_fallback  # not confident
    assert not judge(-0.3, 1.2, 0.0, 2.4, -1.0, 0.6).needs_fallback


def test_probable_silence_does_not_fall_back():
    # whisper: no-speech over its threshold and a low log-probability → the loop skips it
    verdict = judge(-1.3, 1.2, 0.9, 2.4, -1.0, 0.6)
    assert not verdict.needs_fallback and verdict.reason == "silence"
    # a confident window is never silence, however likely no-speech was
    assert not judge(-0.2, 1.2, 0.9, 2.4, -1.0, 0.6).needs_fallback


def test_thresholds_set_to_none_never_fall_back():
    assert not judge(-9.0, 9.0, 0.0, None, None, None).needs_fallback


# -- the sampling rule ---------------------------------------------------------------------------
def test_a_masked_token_is_never_drawn():
    row = np.zeros(50, np.float32)
    row[::2] = NEG_INF
    rng = np.random.default_rng(0)
    assert all(sample(row, 1.0, rng) % 2 == 1 for _ in range(500))


def test_sampling_follows_the_softened_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1], np.float32))
    rng = np.random.default_rng(1)
    draws = np.bincount([sample(logits, 1.0, rng) for _ in range(4000)], minlength=3) / 4000
    assert np.allclose(draws, [0.6, 0.3, 0.1], atol=0.03)
    # a low temperature sharpens it towards the greedy choice
    sharp = [sample(logits, 0.05, rng) for _ in range(200)]
    assert sharp.count(0) == 200


def test_the_generator_depends_on_seed_window_temperature_and_draw():
    def first(*key):
        return window_rng(*key).random()

    base = first(0, 3000, 0.2, 0)
    assert first(0, 3000, 0.2, 0) == base
    assert len({base, first(1, 3000, 0.2, 0), first(0, 3001, 0.2, 0), first(0, 3000, 0.4, 0),
                first(0, 3000, 0.2, 1)}) == 5


# -- real audio --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def noisy_clip():
    """A short LibriVox sentence (3 s) under white noise (-5 dB SNR): whisper's greedy decode is
    not confident of it (average log-probability about -1, at whisper's default bar; the tests
    that need a fallback set a higher bar), nor sure it is silence (no-speech about 0.3)."""
    x = load_audio("/usr/share/pocketsphinx/test/data/librivox/"
                   "sense_and_sensibility_01_austen_64kb-0930.wav").samples
    rng = np.random.default_rng(11)
    noise = rng.standard_normal(len(x)).astype(np.float32)
    noise *= np.sqrt(np.mean(x ** 2) / np.mean(noise ** 2)) * 10 ** (5 / 20)  # -5 dB
    return (x + noise).astype(np.float32)


@pytest.fixture(scope="module")
def long_clip(clips):
    """Two windows of speech: two_cities' first 33 s (the first window's 30 s, and a second
    one wherever that window's last whole segment ends; the other 11 s add nothing)."""
    samples = load_audio(next(c.path for c in clips if c.name == "two_cities.wav")).samples
    return samples[: 16000 * 33]


@pytest.fixture(scope="module")
def models(whisper):
    return whisper("base", "int8", threads=2), whisper("tiny.en", "int8", threads=1,
                                                       role="drafter")


def run(model, decoder, audio, options, events=None):
    listener = events.append if events is not None else None
    return list(LongFormTranscriber(model, decoder, listener).transcribe(audio, options))


FALLBACK = TranscribeOptions(language="en", temperatures=DEFAULT_TEMPERATURES)
# A bar no decode clears (an average log-probability is below 0), under the first three
# temperatures of whisper's schedule and two samples each: every attempt takes the path the
# full schedule's do (greedy, then samples side by side, then samples again), at a third of
# the decodes, and none passes.
NOISY_FALLBACK = TranscribeOptions(language="en", temperatures=DEFAULT_TEMPERATURES[:3],
                                   logprob_threshold=0.0, best_of=2)


@pytest.mark.slow
def test_a_noisy_window_falls_back_and_every_decoder_agrees(models, noisy_clip):
    """The window is sampled at each temperature in turn, and as none passes the last decode
    is kept (whisper's rule); AS²D and SD give target-only's tokens (each run draws from its
    own generator, seeded alike: a run is reproducible, whichever decoder runs), and another
    seed (nothing else changed) draws another text."""
    target, drafter = models
    events: list = []
    reference = run(target, TargetOnly(target), noisy_clip, NOISY_FALLBACK, events)
    notes = [e.message for e in events if isinstance(e, Note)]
    assert any("decoding it again at temperature 0.2" in n for n in notes), notes
    assert any("decoding it again at temperature 0.4" in n for n in notes), notes
    assert {s.temperature for s in reference} == {0.4}  # none passed: the last is kept
    greedy = run(target, TargetOnly(target), noisy_clip, TranscribeOptions(language="en"))
    assert [s.tokens for s in greedy] != [s.tokens for s in reference]
    assert all(s.temperature == 0 for s in greedy)
    tokens = [s.tokens for s in reference]
    assert [s.tokens for s in run(target, AS2D(target, drafter), noisy_clip,
                                  NOISY_FALLBACK)] == tokens
    # SD too: its serial drafter re-drafts each sampled attempt itself
    assert [s.tokens for s in run(target, SerialSD(target, drafter), noisy_clip,
                                  NOISY_FALLBACK)] == tokens
    reseeded = [TranscribeOptions(**{**vars(NOISY_FALLBACK), "seed": s}) for s in (1, 2)]
    assert any([s.tokens for s in run(target, TargetOnly(target), noisy_clip, o)] != tokens
               for o in reseeded)


@pytest.mark.slow
def test_clean_speech_stays_greedy_under_the_default_schedule(models, librivox,
                                                              base_target_only):
    target, drafter = models
    audio = load_audio(librivox[0].path)
    events: list = []
    segs = run(target, AS2D(target, drafter), audio, FALLBACK, events)
    assert all(s.temperature == 0 for s in segs)
    assert not [e for e in events if isinstance(e, Note) and "temperature" in e.message]
    # greedy target-only (TranscribeOptions(language="en")) of the same base: the session's
    assert [s.tokens for s in segs] == base_target_only(librivox[0].path)


def _windows(monkeypatch, target, audio, options) -> list[dict]:
    """Decode ``audio`` target-only and return, per decoded window in order: its index, the
    prompts of its attempts (those without the repetition guard's retry), the temperature it
    was kept at, whether it was retried without the previous text, and its tokens."""
    windows: dict[int, dict] = {}
    attempt, decode = Attempts.attempt, Attempts.decode

    def spy_attempt(self, runner, window, mel, prompt, temperature, retried):
        w = windows.setdefault(window.index, dict(index=window.index, seek=window.seek,
                                                  prompts=[]))
        if not retried:
            w["prompts"].append(list(prompt))
        return attempt(self, runner, window, mel, prompt, temperature, retried)

    def spy_decode(self, runner, window, *rest, **kw):
        decoded = decode(self, runner, window, *rest, **kw)
        if decoded is not None:
            windows[window.index].update(retried=decoded[1], temperature=decoded[2])
        return decoded

    monkeypatch.setattr(Attempts, "attempt", spy_attempt)
    monkeypatch.setattr(Attempts, "decode", spy_decode)
    try:
        segments = run(target, TargetOnly(target), audio, options)
    finally:
        monkeypatch.undo()
    for w in windows.values():
        w["tokens"] = [t for s in segments if s.seek == w["seek"] for t in s.tokens]
        assert {s.temperature for s in segments if s.seek == w["seek"]} <= {w["temperature"]}
    return [windows[i] for i in sorted(windows)]


@pytest.mark.slow
def test_a_hot_window_does_not_prompt_the_next(whisper, long_clip, monkeypatch):
    """whisper's prompt_reset_on_temperature: text sampled above 0.5 is not carried on.

    The condition is made, not hoped for, so that it holds on any CPU: the schedule is 0.6
    alone (the rule reads the temperature a window was kept at, not how it got there: no
    greedy attempt to fail first), and no no-speech threshold means no window is judged
    silent, so every window is sampled at 0.6. The rule is then checked on every pair of
    windows the run decoded, whichever they are.

    The second run, whose windows prompt the next, also has hotwords: they lead every prompt
    as in faster-whisper, alone before the first window, then before the previous text.

    tiny.en decodes: the rule and the prompts are the long-form loop's, whichever model
    samples (it samples the two windows in half the time base takes)."""
    target = whisper("tiny.en", "int8", threads=2)
    tk = target.tokenizer
    sot_seq = tk.sot_sequence("en" if target.multilingual else None)
    opts = TranscribeOptions(language="en", temperatures=(0.6,), logprob_threshold=0.0,
                             no_speech_threshold=None, best_of=1)

    def pairs(windows):
        """(window, the next one) where the first said something (its text could prompt)."""
        return [(a, b) for a, b in zip(windows, windows[1:])
                if b["index"] == a["index"] + 1 and a["tokens"] and b["prompts"]]

    def carried(a, b) -> bool:
        """Do b's prompts hold a's text after <|startofprev|>? (checked, not assumed)"""
        found = []
        for p in b["prompts"]:
            prev = p[p.index(tk.sot_prev) + 1:len(p) - len(sot_seq)] if tk.sot_prev in p \
                else []
            n = min(len(prev), len(a["tokens"]))
            found.append(n > 0 and prev[-n:] == a["tokens"][-n:])
        assert len(set(found)) == 1, found  # every attempt of a window has the same prompt
        return found[0]

    hot = _windows(monkeypatch, target, long_clip, opts)
    assert all(w["temperature"] == 0.6 for w in hot), hot
    assert pairs(hot), hot  # at least one hot window followed by another
    for a, b in pairs(hot):
        assert not carried(a, b)
        assert all(p == sot_seq for p in b["prompts"])  # nothing before the text: no prompt

    # The same windows are not hot under a threshold of 1.0: their text prompts the next.
    warm = _windows(monkeypatch, target, long_clip,
                    TranscribeOptions(**{**vars(opts), "prompt_reset_on_temperature": 1.0,
                                         "hotwords": "Dashwood, Norland"}))
    kept = [(a, b) for a, b in pairs(warm) if not a["retried"]]
    assert kept, warm
    for a, b in kept:
        assert a["temperature"] == 0.6 and carried(a, b)
    head = [tk.sot_prev] + tk.encode(" Dashwood, Norland")
    first, second = warm[0], warm[1]
    assert (first["index"], second["index"]) == (0, 1)
    assert first["prompts"] == [head + sot_seq]  # nothing before: hotwords alone
    # then the previous text (the first window's: nothing was reset before it)
    assert second["prompts"][0] == head + first["tokens"] + sot_seq


# -- command line and API ---------------------------------------------------------------------
@pytest.mark.slow
def test_cli_fallback_is_identical_across_decoders_and_reproducible(models, models_root,
                                                                    noisy_clip, tmp_path):
    """``as2d transcribe`` with whisper's fallback flags: AS²D's segments are, field for field,
    the ones the target alone draws with the same options (parsed as every face parses them),
    decoded in-process just before. Two runs in one process, each sampling from its own
    seeded generator: the command's repeating the first's samples proves both the decoders'
    agreement and that a run is reproducible (a generator carried over would draw other
    samples). --temperature-increment-on-fallback 0 turns the fallback off."""
    import json

    from as2d.writers import segment_dict

    path = write_wav(tmp_path / "noisy.wav", noisy_clip, subtype="FLOAT")  # the very samples
    # A bar no decode clears (an average log-probability is below 0; the noisy window's sits
    # near whisper's default -1.0, on one side or the other depending on the CPU's
    # rounding): it falls back, and the last decode is kept.
    bar = ("--logprob-threshold", "0")
    # Two samples a temperature (the default is five): the same path, samples side by side.
    # Two temperatures, as a list (--temperature's other form): greedy, then samples, as
    # whisper's schedule (the flags' default, parsed as every face parses it:
    # tests/test_option_errors.py) starts; its later temperatures are the same path again.
    sampling = ("--best-of", "2", "--temperature", "0,0.2")
    target, _ = models
    alone = run(target, TargetOnly(target), load_audio(path), TranscribeOptions.parse(
        language="en", logprob_threshold=0.0, best_of=2, temperature="0,0.2"))
    # A named drafter: one window of audio would otherwise be decoded by the target alone.
    r = cli("transcribe", path, "-l", "en", "--decoder", "as2d", "--drafter", "tiny.en",
            "-f", "json", "--no-live", *bar, *sampling, models_dir=models_root)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["decoder"] == "as2d"
    assert doc["segments"] == [json.loads(json.dumps(segment_dict(s))) for s in alone]
    assert {s["temperature"] for s in doc["segments"]} == {0.2}
    greedy = cli("transcribe", path, "-l", "en", "-f", "json", "--no-live", *bar,
                 "--temperature-increment-on-fallback", "0", models_dir=models_root)
    assert all(s["temperature"] == 0 for s in json.loads(greedy.stdout)["segments"])


@pytest.mark.parametrize("args, fragment", [
    (["--temperature", "warm"], "--temperature"),
    (["--temperature", "-1"], "temperature"),
    (["--best-of", "0"], "--best-of"),
    (["--seed", "-3"], "--seed"),
])
def test_bad_fallback_options_are_one_error_line(args, fragment, tmp_path):
    path = write_wav(tmp_path / "a.wav", np.zeros(1600, np.float32))
    error_line(cli("transcribe", path, *args), 2, fragment)


@pytest.mark.slow
def test_the_api_takes_whispers_fallback_options(models_root, noisy_clip):
    """seed, best_of, logprob_threshold and a temperature list (greedy, then samples; that
    whisper's schedule is the API's default is test_the_engine_default_stays_greedy_only's),
    and a single temperature (no fallback)."""
    import as2d

    with as2d.Transcriber("base", decoder="target", threads=2, models_dir=models_root) as t:
        segments, _ = t.transcribe(noisy_clip, language="en", seed=5, best_of=2,
                                   temperature=(0.0, 0.2),
                                   logprob_threshold=0.0)  # a bar it cannot clear
        sampled = list(segments)
        segments, _ = t.transcribe(noisy_clip, language="en", temperature=0)
        greedy = list(segments)
        with pytest.raises(ValueError):
            t.transcribe(noisy_clip, temperature=[])
    assert {s.temperature for s in sampled} == {0.2}
    assert all(s.temperature == 0 for s in greedy)


def test_the_engine_default_stays_greedy_only():
    # Dictation, ask and the benchmark build TranscribeOptions themselves and rely on it; the
    # command line and the Python API pass whisper's schedule (the API's, by its default).
    import inspect

    from as2d.api import Transcriber

    assert TranscribeOptions().temperatures == (0.0,)
    default = inspect.signature(Transcriber.transcribe).parameters["temperature"].default
    assert tuple(default) == DEFAULT_TEMPERATURES


# -- sampled decodes take candidates, losslessly ------------------------------------------------
def test_a_repetition_is_continued_as_it_went():
    """A loop's next tokens are its last turn's: for any prefix and any repeated unit (tokens
    of their own, so the period is the only place the suffix recurs), the offer is exactly
    the periodic continuation, however far past the suffix it reaches."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from as2d.runtime.speculative.lookup import repetition

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.lists(st.integers(1000, 1999), max_size=12),
           st.lists(st.integers(0, 999), min_size=1, max_size=9, unique=True),
           st.integers(2, 6), st.integers(0, 8), st.integers(1, 20))
    def check(prefix, unit, turns, cut, k):
        seq = prefix + unit * turns + unit[: cut % len(unit)]
        p = len(unit)
        expected = [seq[len(seq) - p + (i % p)] for i in range(k)]
        got = repetition(seq, k)
        if (turns - 1) * p + cut % p >= 4:  # a suffix of 4 tokens has occurred before
            assert got == expected
        else:
            assert got in ([], expected)

    check()


def test_nothing_is_offered_without_a_repeated_suffix():
    from as2d.runtime.speculative.lookup import repetition

    assert repetition(list(range(50)), 8) == []
    assert repetition([1, 2, 3, 9, 1, 2, 3], 4) == []  # a 3-token suffix: ordinary speech
    assert repetition([1, 2, 3, 4, 9, 1, 2, 3, 4], 3) == [9, 1, 2]
    assert repetition([1, 2, 3, 4, 9, 1, 2, 3, 4], 0) == []


def test_a_loops_turns_differ_only_in_their_timestamps():
    """Whisper's loop writes each turn as its own segment: the turns match whatever their
    times, the offer stops before the next (unguessable) time, and a closing time is
    followed by the same time opening the next segment."""
    from as2d.runtime.transcribe.stream_source import window_repetition

    tb = 1000
    turn = [11, 12, 13, 14, 15]
    ctx = [tb] + turn + [tb + 100, tb + 100] + turn + [tb + 200]
    assert window_repetition(ctx, 9, tb) == [tb + 200] + turn  # the lead, then the turn
    assert window_repetition(ctx[:-1], 9, tb) == []  # the closing time is not guessed
    assert window_repetition(ctx[:-2], 9, tb) == [15]  # up to the next turn's time
    assert window_repetition(ctx[:-3], 9, tb) == []  # three text tokens: no evidence
    assert window_repetition(ctx, 1, tb) == [tb + 200]
    for k in (1, 9):  # no repetition: not even the opening time is offered
        assert window_repetition([tb, 11, 12, 13, 14, tb + 50], k, tb) == []
    # Two segment breaks around two words: the timestamps are no part of the evidence.
    assert window_repetition([tb, 5, 6, 7, 1, tb + 9, tb + 9, 2, 3, 8, 1, tb + 20, tb + 20, 2, 3],
                             9, tb) == []


def _verified(events):
    from as2d.runtime.events import Verified

    return [e for e in events if isinstance(e, Verified)]


@pytest.mark.slow
def test_sampled_windows_take_candidates_and_keep_their_tokens(models, librivox, monkeypatch):
    """Every decode sampled (one temperature above 0, best of 2, through the long-form loop):
    AS²D offers the drafter's words to the sampled decodes and commits exactly the target-only
    samples, whether the samples are drawn side by side or one after another (side by side in
    fewer passes), and --stats loses no token and no pass either way. One AS²D run of each
    kind, both held to the same target-only run, on a sentence of 7 s (what is checked is each
    sampled decode, not the loop's seeking across windows: test_a_hot_window_does_not_prompt_
    the_next decodes two)."""
    from as2d.runtime.transcribe.stats import StatsCollector

    target, drafter = models
    opts = TranscribeOptions(language="en", temperatures=(0.4,), best_of=2, seed=5)
    clip = load_audio(librivox[0].path)  # sense_and_sensibility 0870, 7.1 s
    plain_events: list = []
    plain = run(target, TargetOnly(target), clip, opts, plain_events)
    assert not any(e.offered for e in _verified(plain_events))

    def transcribe():
        events: list = []
        segs = run(target, AS2D(target, drafter), clip, opts, events)
        collector = StatsCollector()
        for e in events:
            collector(e)
        return segs, collector.current.summary(), _verified(events)

    side, s_side, passes_side = transcribe()
    monkeypatch.setattr(Attempts, "sample_batching", lambda self, n: None)
    alone, s_alone, passes_alone = transcribe()
    assert [s.tokens for s in side] == [s.tokens for s in plain]
    assert [s.tokens for s in alone] == [s.tokens for s in plain]
    assert {s.temperature for s in side} == {0.4}
    assert sum(e.accepted for e in passes_side) > 0.3 * sum(len(e.committed)
                                                            for e in passes_side)
    assert len(passes_side) < 0.8 * len(_verified(plain_events))
    # --stats counts the samples not kept apart from the kept ones, and loses none.
    for s, passes in ((s_side, passes_side), (s_alone, passes_alone)):
        assert s["dropped_decodes"] == s["windows"] == len({seg.seek for seg in side})
        assert s["committed_tokens"] + s["dropped_tokens"] == sum(len(e.committed)
                                                                  for e in passes)
        assert s["target_passes"] + s["dropped_passes"] == len(passes)
    assert s_side["committed_tokens"] == s_alone["committed_tokens"]
    assert s_side["dropped_tokens"] == s_alone["dropped_tokens"]
    assert len(passes_side) < len(passes_alone)


@pytest.mark.slow
def test_sampled_decodes_are_exact_whatever_the_candidates(models, librivox):
    """A property: a sampled decode given any candidates at all (the true continuation
    damaged at random, a loop guessed where there is none) commits the tokens of the same
    seeded decode without candidates."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from as2d.runtime.speculative import candidates as cands
    from as2d.runtime.speculative.candidates import CandidateSource
    from as2d.runtime.transcribe.window import WindowState
    from as2d.runtime.whisper.features import LogMel
    from as2d.runtime.whisper.logits import LogitRules
    from tests.helpers import prompt_for

    target, _ = models
    tk = target.tokenizer
    ctx = target.encode(LogMel(load_audio(librivox[1].path), target.dims.n_mels).window(0, 3000))
    prompt = prompt_for(target, True)
    rules = LogitRules(tk, target.dims.n_vocab, timestamps=True,
                       suppress=tuple(tk.suppress_tokens()))

    def decode(source):
        sampling = rules.sampling(0.6, window_rng(3, 0, 0.6, 0))
        state = target.decoder_state(ctx)
        try:
            dec = WindowState(state, sampling, prompt, prompt.index(tk.sot), 224, tk.eot)
            dec.start()
            cands.run(dec, source)
            return list(dec.generated), dec.counts.passes, dec.sum_logprob
        finally:
            target.release(state)

    plain, plain_passes, plain_score = decode(cands.NO_CANDIDATES)
    assert len(plain) > 10

    class Damaged(CandidateSource):
        def __init__(self, edits):
            self.edits = edits

        def propose(self, context, room):
            n = len(context)
            k, how = self.edits[n % len(self.edits)]
            out = list(plain[n:n + k])
            if how == "swap" and out:
                out[len(out) // 2] = (out[len(out) // 2] + 1) % tk.eot
            elif how == "loop":
                out = list(context[-k:]) if k else []
            return out[:room]

    # Few examples on the real model: the kernel's property (tests/test_kernel.py) takes
    # a hundred.
    @settings(max_examples=5, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["true", "swap", "loop"])),
                    min_size=1, max_size=6))
    def check(edits):
        tokens, passes, score = decode(Damaged(edits))
        assert tokens == plain
        assert score == plain_score  # what best_of ranks samples by
        if all(how == "true" and k > 1 for k, how in edits):
            assert passes < plain_passes

    check()


@pytest.mark.slow
def test_samples_side_by_side_draw_what_they_draw_alone(models, librivox):
    """A property: ``best_of`` samples decoded as one batch (:mod:`.samples`), each given any
    candidates at all (its true continuation damaged at random, a loop where there is none,
    nothing), commit each sample's tokens and log-probability of the same seeded decode alone,
    in fewer passes than the samples one after another."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from as2d.runtime.rows import beams_exact
    from as2d.runtime.speculative import candidates as cands
    from as2d.runtime.speculative.candidates import CandidateSource
    from as2d.runtime.transcribe.samples import Sample, SampleBatch
    from as2d.runtime.transcribe.window import WindowState
    from as2d.runtime.whisper.features import LogMel
    from as2d.runtime.whisper.logits import LogitRules
    from tests.helpers import prompt_for

    target, _ = models
    if not beams_exact(target):
        pytest.skip("this machine's batched rows differ from single passes: samples are "
                    "drawn one after another here")
    tk = target.tokenizer
    ctx = target.encode(LogMel(load_audio(librivox[1].path), target.dims.n_mels).window(0, 3000))
    prompt = prompt_for(target, True)
    rules = LogitRules(tk, target.dims.n_vocab, timestamps=True,
                       suppress=tuple(tk.suppress_tokens()))
    draws = 3

    def sampling(draw):
        return rules.sampling(0.8, window_rng(3, 0, 0.8, draw))

    def decode_alone(sample_len):
        out = []
        for draw in range(draws):
            state = target.decoder_state(ctx)
            try:
                dec = WindowState(state, sampling(draw), prompt, prompt.index(tk.sot),
                                  sample_len, tk.eot)
                dec.start()
                cands.run(dec, cands.NO_CANDIDATES)
                out.append((list(dec.generated), dec.sum_logprob, dec.completed,
                            dec.counts.passes))
            finally:
                target.release(state)
        return out

    alone = decode_alone(224)
    assert len({tuple(a[0]) for a in alone}) == draws  # the samples differ
    # A short length limit, reached mid-batch by samples with a backlog: they end as alone.
    short = decode_alone(9)
    assert all(len(a[0]) == 9 and not a[2] for a in short)

    class Damaged(CandidateSource):
        def __init__(self, truth, edits):
            self.truth, self.edits = truth, edits

        def propose(self, context, room):
            n = len(context)
            k, how = self.edits[n % len(self.edits)]
            out = list(self.truth[n:n + k])
            if how == "swap" and out:
                out[len(out) // 2] = (out[len(out) // 2] + 1) % tk.eot
            elif how == "loop":
                out = list(context[-k:]) if k else []
            return out[:room]

    def batch(sources, sample_len=224):
        state = target.beam_state(ctx, draws)
        try:
            b = SampleBatch(state, [Sample(sampling(d), src) for d, src in enumerate(sources)],
                            prompt, prompt.index(tk.sot), sample_len, tk.eot)
            b.start()
            while not b.done:
                b.step()
            return b
        finally:
            target.release(state)

    plain = batch([cands.NO_CANDIDATES] * draws)
    assert [(r.tokens, r.sum_logprob, r.completed) for r in plain.results()] == \
        [a[:3] for a in alone]
    assert plain.passes == max(a[3] for a in alone)  # one pass per token of the longest

    # Few examples on the real model: the kernel's property (tests/test_kernel.py) takes
    # a hundred.
    @settings(max_examples=4, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.lists(st.tuples(st.integers(0, 6),
                                       st.sampled_from(["true", "swap", "loop"])),
                             min_size=1, max_size=5), min_size=draws, max_size=draws))
    def check(edits):
        b = batch([Damaged(a[0], e) for a, e in zip(alone, edits)])
        assert [(r.tokens, r.sum_logprob, r.completed) for r in b.results()] == \
            [a[:3] for a in alone]
        if all(how == "true" and k > 1 for e in edits for k, how in e):
            assert b.passes < plain.passes
        b = batch([Damaged(a[0], e) for a, e in zip(short, edits)], sample_len=9)
        assert [(r.tokens, r.sum_logprob, r.completed) for r in b.results()] == \
            [a[:3] for a in short]

    check()
