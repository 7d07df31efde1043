"""The VAD filter for files: faster-whisper's speech chunks, decoded joined, timed on the original.

The chunking rule is checked against faster-whisper's own ``get_speech_timestamps`` on the same
speech probabilities (identical chunks for every parameter set), the time map on its own, then
the whole filter on a real recording with long pauses (real clips joined with near-silence,
white noise and mains hum): the segments land on the speech, AS²D, SD and target-only commit the
same tokens, and the command line and the Python API expose it.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from as2d.runtime.audio import load_audio
from as2d.runtime.transcribe.as2d import AS2D
from as2d.runtime.transcribe.longform import LongFormTranscriber, TranscriptionInfo
from as2d.runtime.transcribe.strategy import TargetOnly
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.runtime.transcribe.vad_filter import (
    SAMPLE_RATE,
    Timeline,
    VadParameters,
    join_speech,
    speech_chunks,
    speech_probabilities,
)
from as2d.runtime.vad.silero import SileroVAD
from tests.helpers import cli, error_line, write_wav

SR = SAMPLE_RATE


# -- parameters ---------------------------------------------------------------------------------
def test_defaults_are_faster_whispers():
    p = VadParameters()
    assert (p.threshold, p.neg_threshold, p.min_speech_duration_ms, p.max_speech_duration_s,
            p.min_silence_duration_ms, p.speech_pad_ms) == (0.5, None, 0, float("inf"), 2000,
                                                            400)


def test_parameters_parse_from_text_or_a_dict():
    p = VadParameters.parse("threshold=0.4, min_silence_duration_ms=500,neg_threshold=none")
    assert (p.threshold, p.min_silence_duration_ms, p.neg_threshold) == (0.4, 500, None)
    assert VadParameters.parse({"speech_pad_ms": 100}).speech_pad_ms == 100
    assert VadParameters.parse(None) == VadParameters()


@pytest.mark.parametrize("text", ["threshold", "foo=1", "threshold=high", "threshold=1.5",
                                  "speech_pad_ms=-1", "max_speech_duration_s=0"])
def test_bad_parameters_are_value_errors(text):
    with pytest.raises(ValueError):
        VadParameters.parse(text)


# -- the chunks: faster-whisper's rule -------------------------------------------------------------
@pytest.fixture(scope="module")
def pauses(clips):
    """Real clips joined by long stretches of near-silence, noise and hum, and where the clips
    are (seconds)."""
    rng = np.random.default_rng(7)
    names = ["sense_and_sensibility_01_austen_64kb-0870.wav", "beckett.wav",
             "sense_and_sensibility_01_austen_64kb-0930.wav"]
    paths = {c.name: c.path for c in clips}
    t = np.arange(20 * SR) / SR
    gaps = [(rng.standard_normal(25 * SR) * 1e-4).astype(np.float32),
            (rng.standard_normal(35 * SR) * 0.01).astype(np.float32),
            (0.02 * np.sin(2 * np.pi * 50 * t) + rng.standard_normal(len(t)) * 0.002
             ).astype(np.float32)]
    parts, spans, at = [np.zeros(8 * SR, np.float32)], [], 8.0
    for name, gap in zip(names, gaps):
        x = np.asarray(load_audio(paths[name]).samples, np.float32)
        parts += [x, gap]
        spans.append((at, at + len(x) / SR))
        at += (len(x) + len(gap)) / SR
    return np.concatenate(parts), spans


@pytest.fixture(scope="module")
def pause_probs(pauses):
    """The speech probabilities of ``pauses`` (Silero, over its 108 s), computed once: every
    chunking test reads the same ones."""
    return speech_probabilities(pauses[0], SileroVAD())


PARAMETER_SETS = [{}, {"min_silence_duration_ms": 500, "speech_pad_ms": 200},
                  {"max_speech_duration_s": 3, "min_speech_duration_ms": 250},
                  {"threshold": 0.3, "neg_threshold": 0.1},
                  {"max_speech_duration_s": 2, "min_silence_duration_ms": 100,
                   "speech_pad_ms": 30}]


@pytest.mark.slow
@pytest.mark.parametrize("params", PARAMETER_SETS)
def test_chunks_are_faster_whispers_on_the_same_probabilities(pauses, pause_probs, params):
    fv = pytest.importorskip("faster_whisper.vad")
    audio, _ = pauses
    probs = pause_probs

    class Fixed:  # faster-whisper's model, answering with our detector's probabilities
        def __call__(self, padded):
            assert len(padded) // 512 == len(probs)
            return probs[:, None]

    original = fv.get_vad_model
    fv.get_vad_model = lambda: Fixed()
    try:
        theirs = [(c["start"], c["end"])
                  for c in fv.get_speech_timestamps(audio, fv.VadOptions(**params))]
    finally:
        fv.get_vad_model = original
    ours = speech_chunks(probs, len(audio), VadParameters(**params))
    assert ours == theirs
    assert ours, "speech was found"


def test_chunks_cover_the_speech_and_skip_the_pauses(pauses, pause_probs):
    audio, spans = pauses
    chunks = speech_chunks(pause_probs, len(audio))
    secs = [(a / SR, b / SR) for a, b in chunks]
    for start, end in spans:  # every clip is inside a chunk (chunks are padded by 0.4 s)
        assert any(a <= start + 0.3 and end - 0.3 <= b for a, b in secs), (start, end, secs)
    kept = sum(b - a for a, b in secs)
    assert kept < 0.45 * len(audio) / SR  # the 80 s of pauses are gone


def test_a_chunk_longer_than_the_maximum_is_split():
    probs = np.r_[np.zeros(10), np.ones(400), np.zeros(100)].astype(np.float32)
    chunks = speech_chunks(probs, len(probs) * 512, VadParameters(max_speech_duration_s=4,
                                                                   speech_pad_ms=0))
    assert len(chunks) >= 3 and all((b - a) / SR <= 4 for a, b in chunks)


def test_silence_has_no_chunks():
    assert speech_chunks(np.zeros(300, np.float32), 300 * 512) == []
    assert join_speech(np.zeros(10, np.float32), []).size == 0


# -- the time map ------------------------------------------------------------------------------
def test_times_map_back_to_the_original_recording():
    # speech at 10–12 s and 20–23 s → joined: 0–2 s and 2–5 s
    tl = Timeline([(10 * SR, 12 * SR), (20 * SR, 23 * SR)])
    assert tl.speech_seconds == 5
    assert tl.original(0.5) == 10.5
    assert tl.original(2.5) == 20.5
    assert tl.original(2.0) == 20.0  # a start on the cut belongs to the next chunk
    assert tl.original(2.0, is_end=True) == 12.0  # an end on the cut, to the chunk it ends
    assert tl.original(4.9, is_end=True) == 22.9


def test_a_segment_spans_its_words_and_words_stay_in_one_chunk():
    tl = Timeline([(10 * SR, 12 * SR), (20 * SR, 23 * SR)])
    words = [SimpleNamespace(start=1.5, end=1.9), SimpleNamespace(start=1.9, end=2.1),
             SimpleNamespace(start=2.2, end=2.6)]
    seg = SimpleNamespace(start=1.5, end=2.6, words=words)
    tl.restore(seg)
    # the straddling word's middle (2.0) is on the cut: it goes with the next chunk, whole
    assert [(w.start, w.end) for w in words] == [(11.5, 11.9), (19.9, 20.1), (20.2, 20.6)]
    assert (seg.start, seg.end) == (11.5, 20.6)
    plain = SimpleNamespace(start=0.4, end=2.0, words=None)
    tl.restore(plain)
    assert (plain.start, plain.end) == (10.4, 12.0)


# -- real decoding -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(whisper):
    return whisper("base", "int8", threads=2), whisper("tiny.en", "int8", threads=1,
                                                       role="drafter")


def run(model, decoder, audio, options, info=None):
    t = LongFormTranscriber(model, decoder, voice_detector=SileroVAD())
    return list(t.transcribe(audio, options, info))


VAD = TranscribeOptions(language="en", vad_filter=True)


@pytest.mark.slow
def test_filtered_segments_land_on_the_speech_and_as2d_agrees(models, pauses):
    target, drafter = models
    audio, spans = pauses
    info = TranscriptionInfo(None, 0.0, 0.0)
    ref = run(target, TargetOnly(target), audio, VAD, info)
    assert ref
    assert info.duration == pytest.approx(len(audio) / SR)  # the original's length
    assert info.extra["vad_speech_seconds"] < 0.45 * info.duration
    for s in ref:  # each segment overlaps a clip, and ends by the end of the recording
        assert any(min(s.end, b) - max(s.start, a) > 0 for a, b in spans), (s.start, s.end)
        assert 0 <= s.start <= s.end <= len(audio) / SR
    assert "Dashwood" in "".join(s.text for s in ref)
    assert ref[-1].start > spans[-1][0] - 1.0  # the last sentence is timed where it is said
    tokens = [s.tokens for s in ref]
    assert [s.tokens for s in run(target, AS2D(target, drafter), audio, VAD)] == tokens


@pytest.mark.slow
def test_filter_and_fallback_together_stay_lossless(models, pauses):
    """A bar no decode clears: each window decoded greedily, then sampled (two samples side by
    side), over the joined speech; AS²D keeps target-only's samples."""
    target, drafter = models
    audio, _ = pauses
    opts = TranscribeOptions(language="en", vad_filter=True,
                             temperatures=(0.0, 0.8), logprob_threshold=0.0, best_of=2)
    ref = run(target, TargetOnly(target), audio, opts)
    assert any(s.temperature > 0 for s in ref)
    assert [s.tokens for s in run(target, AS2D(target, drafter), audio, opts)] == [
        s.tokens for s in ref]


@pytest.mark.slow
def test_the_engine_asks_for_a_detector(models):
    target, _ = models
    with pytest.raises(ValueError, match="voice detector"):
        list(LongFormTranscriber(target).transcribe(np.zeros(SR, np.float32), VAD))


@pytest.mark.slow
def test_cli_vad_filter(models_root, pauses, tmp_path):
    """The options reach the run (AS²D: that it commits target-only's tokens under the filter
    is test_filtered_segments_land_on_the_speech_and_as2d_agrees; the API runs the target),
    and a silent file says so."""
    audio, spans = pauses
    path = write_wav(tmp_path / "pauses.wav", audio)
    r = cli("transcribe", path, "-l", "en", "--vad-filter", "--decoder", "as2d", "-f", "json",
            "--no-live", "--vad-parameters", "min_silence_duration_ms=1000",
            models_dir=models_root)
    assert r.exit_code == 0, r.stderr
    assert "VAD filter:" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["decoder"] == "as2d"
    assert doc["segments"][0]["start"] >= spans[0][0] - 1.0

    silent = write_wav(tmp_path / "silent.wav", np.zeros(20 * SR, np.float32))
    r = cli("transcribe", silent, "-l", "en", "--vad-filter", "--no-live",
            models_dir=models_root)
    assert r.exit_code == 0 and r.stdout.strip() == ""
    assert "no speech found" in r.stderr


def test_bad_vad_parameters_are_one_error_line(tmp_path):
    path = write_wav(tmp_path / "a.wav", np.zeros(1600, np.float32))
    error_line(cli("transcribe", path, "--vad-filter", "--vad-parameters", "pad=3"), 2,
               "unknown VAD parameter")


@pytest.mark.slow
def test_the_api_takes_vad_filter_and_its_parameters(models_root, pauses):
    import as2d

    audio, spans = pauses
    with as2d.Transcriber("base", decoder="target", threads=2, models_dir=models_root) as t:
        segments, info = t.transcribe(audio, language="en", vad_filter=True,
                                      vad_parameters={"speech_pad_ms": 200})
        segs = list(segments)
        with pytest.raises(ValueError):
            t.transcribe(audio, vad_filter=True, vad_parameters={"threshold": 2})
    assert segs and segs[0].start >= spans[0][0] - 1.0
    assert len(info.extra["vad_chunks"]) >= len(spans)
