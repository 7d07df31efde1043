"""The Python API: ``as2d.transcribe``, ``as2d.Transcriber``, ``as2d.ask``, as the README shows.

Real models on real audio, through the same engine as the command line; every decoder gives
the same tokens through the API too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import as2d
from as2d.runtime.audio import Audio, AudioError
from tests.helpers import cli

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "sense_and_sensibility.wav"  # 25 s, five sentences
# One 7-s sentence ("And Mr. John Dashwood had then leisure to consider ..."): where the
# length does not matter (every decode of a one-window recording takes one window).
SENTENCE = Path("/usr/share/pocketsphinx/test/data/librivox/"
                "sense_and_sensibility_01_austen_64kb-0870.wav")
BRIEF = SENTENCE.with_name("sense_and_sensibility_01_austen_64kb-0880.wav")  # one 3-s sentence


def tokens(segments) -> list[int]:
    return [t for s in segments for t in s.tokens]


def test_readme_python_example_runs(models_root, monkeypatch, capsys):
    """The first ```python block of the README's "Python API" section, run as written: in
    this process (what is checked is the code, not a process start), from the repository's
    folder, which its relative path needs."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("AS2D_MODELS_DIR", str(models_root))
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    assert "John Dashwood" in capsys.readouterr().out


def test_segments_are_decoded_only_as_they_are_consumed(models_root):
    # (tiny.en: what is checked is when the windows are decoded, not their words)
    segments, info = as2d.transcribe(SAMPLE, model="tiny.en", language="en",
                                     models_dir=models_root)
    assert info.windows == 0 and info.duration > 10  # known before any decoding
    first = next(segments)
    assert first.text.strip() and first.end > first.start >= 0.0
    after_first = info.windows
    rest = list(segments)
    # How many windows 25 s take depends on where the model's last timestamp falls (one
    # window, or a second from it): a property of the weights and kernels, not pinned here.
    assert 1 <= after_first <= info.windows <= 2
    assert info.language == "en" and not info.interrupted
    assert rest[-1].end <= info.duration + 0.5


def test_as2d_gives_target_only_tokens_from_a_path_or_an_array(models_root):
    """AS²D's tokens for a file are the target alone's for the same recording given as an
    array: the face passes the decoder through, and an array is heard as the file is (two
    decodes for the two; a 3-s sentence, whose length changes neither). Each decoder's
    losslessness is tested on the engine (tests/test_as2d.py, tests/test_kernel.py), SD
    chosen by name in tests/test_engine.py."""
    samples, rate = sf.read(BRIEF, dtype="float32")
    results = {}
    for decoder, audio, kw in (("target", samples, {"sample_rate": rate}),
                               ("as2d", BRIEF, {})):
        with as2d.Transcriber(decoder=decoder, models_dir=models_root) as t:
            segments, info = t.transcribe(audio, **kw)
            results[decoder] = tokens(segments)
            assert info.language == "en" and info.language_detected
    assert results["target"] and results["as2d"] == results["target"], results


def test_user_mistakes_raise_plain_exceptions(models_root, tmp_path):
    with pytest.raises(ValueError, match="decoder"):
        as2d.Transcriber(decoder="fast", models_dir=models_root)
    with as2d.Transcriber(decoder="target", models_dir=models_root) as t:
        with pytest.raises(AudioError):
            t.transcribe(tmp_path / "missing.wav")
        with pytest.raises(ValueError, match="Klingon"):
            list(t.transcribe(SAMPLE, language="Klingon")[0])
    from as2d.loading import ModelError

    with pytest.raises(ModelError):
        as2d.Transcriber(model="huge-v9", models_dir=models_root)


def test_ask_answers_from_the_recording_with_its_evidence(models_root):
    answer = as2d.ask(SENTENCE, "Who had leisure to consider?", decoder="target",
                      models_dir=models_root)
    assert "Dashwood" in answer.text
    assert answer.evidence and answer.evidence[0].start < 10


@pytest.mark.parametrize("question", ["", " ?! ", "why " * 600])
def test_a_question_that_cannot_be_asked_fails_before_any_model_loads(question, tmp_path):
    # an empty models folder: a model load would fail otherwise (or install one)
    with pytest.raises(ValueError, match="question"):
        as2d.ask(tmp_path / "never-read.wav", question, models_dir=tmp_path / "models")


def test_the_one_shot_calls_plan_by_the_recordings_length(monkeypatch, tmp_path):
    """``as2d.transcribe`` tells the engine how long its one recording is (an array by its
    samples, a file by its header), so a one-window recording loads no drafter, as ``as2d
    transcribe FILE`` does (the engine's side: tests/test_engine.py)."""
    import as2d.api as api

    seen: list = []

    class Stop(Exception):
        pass

    def spy(*args, **kw):  # the Transcriber's arguments, and no model loaded
        seen.append(kw["recording_seconds"])
        raise Stop

    monkeypatch.setattr(api, "Transcriber", spy)
    wav = tmp_path / "a.wav"
    sf.write(wav, np.zeros(16000 * 3, np.float32), 16000)
    for audio, kw in ((np.zeros(8000 * 5, np.float32), {"sample_rate": 8000}), (wav, {}),
                      (str(wav), {})):
        with pytest.raises(Stop):
            api.transcribe(audio, **kw)
    assert seen == [5.0, 3.0, 3.0]
    clip = Audio.from_array(np.zeros(16000, np.float32), 16000)
    with pytest.raises(Stop):
        api.transcribe(clip)  # an Audio: its own length
    assert seen[-1] == 1.0
    clip.close()


def test_ask_refuses_a_bad_option_before_reading_the_audio(tmp_path):
    """A decoder that does not exist is said before the recording is decoded (which may take
    long): the missing file is never looked at."""
    with pytest.raises(ValueError, match="decoder"):
        as2d.ask(tmp_path / "missing.wav", "What was said?", decoder="fast")


# -- arrays and options, checked before anything loads (issue #45) ----------------------------
def _speech() -> np.ndarray:
    x, _ = sf.read(SENTENCE, dtype="float32")
    return x


@pytest.mark.parametrize("dtype", ["int16", "int32"])
def test_integer_pcm_is_scaled_as_soundfile_reads_it(dtype):
    """int16/int32 samples are PCM: scaled to ±1 exactly as soundfile reads the same file,
    not taken as floats and clipped (which gave garbage text with no error)."""
    pcm, _ = sf.read(SAMPLE, dtype=dtype)
    as_float, _ = sf.read(SAMPLE, dtype="float32")
    clip = Audio.from_array(pcm)
    assert clip.clipped == 0
    np.testing.assert_allclose(clip.samples, as_float, atol=1e-7)


def test_uint8_is_offset_binary_and_int8_signed():
    x = np.array([0, 64, 128, 192, 255], np.uint8)
    np.testing.assert_allclose(Audio.from_array(x).samples,
                               [-1.0, -0.5, 0.0, 0.5, 127 / 128])
    np.testing.assert_allclose(Audio.from_array(np.array([-128, 0, 64], np.int8)).samples,
                               [-1.0, 0.0, 0.5])


@pytest.mark.parametrize("samples", [np.zeros(16000, bool), np.zeros(16000, np.int64),
                                     np.zeros(16000, np.complex64), np.zeros(16000, object),
                                     np.array(["a"] * 100)])
def test_samples_that_are_not_audio_are_a_type_error_naming_the_dtype(samples):
    with pytest.raises(TypeError, match=str(samples.dtype)):
        Audio.from_array(samples)


def test_channels_first_is_refused_with_the_way_out():
    x = np.zeros((2, 32000), np.float32)
    with pytest.raises(AudioError, match=r"samples\.T"):
        Audio.from_array(x)
    assert Audio.from_array(x.T).source_channels == 2  # channels last, as soundfile gives


def test_a_recording_over_the_limit_is_refused_before_any_copy():
    """50 hours as a zero-stride view (no memory): refused from its shape, not after copying
    10.7 GiB; integer PCM likewise, before its conversion."""
    for dtype in (np.float32, np.int16):
        huge = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=(50 * 3600 * 16000,),
                                               strides=(0,))
        with pytest.raises(AudioError, match="more than 48 h"):
            Audio.from_array(huge)


@pytest.mark.parametrize("kw,error,fragment", [
    ({"task": "summarize"}, ValueError, "task must be transcribe or translate"),
    ({"beam_size": 1_000_000}, ValueError, "beam_size must be at most 16"),
    ({"temperature": 0.5, "best_of": 100_000}, ValueError, "best_of must be at most 16"),
    ({"temperature": float("nan")}, ValueError, "temperature must be a finite number"),
    ({"no_speech_threshold": float("nan")}, ValueError, "no_speech_threshold"),
    ({"unknown_option": 1}, TypeError, "unknown_option"),
    ({"silence_peak": 0.1}, TypeError, "silence_peak"),  # an option's field, not the API's
])
def test_a_bad_option_fails_before_the_audio_and_the_models(kw, error, fragment, tmp_path):
    # A missing file and an empty models folder: either would fail otherwise.
    with pytest.raises(error, match=fragment):
        as2d.transcribe(tmp_path / "missing.wav", models_dir=tmp_path / "models", **kw)


@pytest.mark.parametrize("audio,error,fragment", [
    (np.zeros((2, 32000), np.float32), AudioError, "transpose|samples.T"),
    (np.zeros(16000, bool), TypeError, "bool"),
    (42, TypeError, "int"),
    ([0.0] * 100, TypeError, "list"),
])
def test_bad_audio_fails_before_the_models(audio, error, fragment, tmp_path):
    with pytest.raises(error, match=fragment):
        as2d.transcribe(audio, models_dir=tmp_path / "models")


def test_ask_refuses_a_question_that_is_not_text_and_no_tokens(tmp_path):
    with pytest.raises(TypeError, match="question must be text, not int"):
        as2d.ask(tmp_path / "missing.wav", 42)
    with pytest.raises(ValueError, match="max_tokens must be a whole number of 1 or more"):
        as2d.ask(tmp_path / "missing.wav", "Who is it?", max_tokens=0,
                 models_dir=tmp_path / "models")


@pytest.mark.slow
def test_integer_arrays_and_other_rates_transcribe_as_the_file_does(models_root):
    """int16, int32, uint8 and channels-last stereo give the file's text (int16 used to give
    garbage, uint8 nothing), and stereo at 44.1 kHz is mixed down and resampled to the file's
    tokens (the front end's work: the smallest model hears it as well as any). One Transcriber
    for all (``as2d.transcribe`` makes one per call and hands it the array: the same
    conversion)."""
    import soxr

    x = _speech()
    with as2d.Transcriber("tiny.en", decoder="target", models_dir=models_root) as t:
        def text(audio):
            return "".join(s.text for s in t.transcribe(audio)[0])

        reference = list(t.transcribe(SENTENCE)[0])
        want = "".join(s.text for s in reference)
        assert "Dashwood" in want
        pcm16, _ = sf.read(SENTENCE, dtype="int16")
        assert text(pcm16) == want
        pcm32, _ = sf.read(SENTENCE, dtype="int32")
        assert text(pcm32) == want
        assert text(np.stack([x, x], axis=1)) == want
        u8 = (np.round(x * 127) + 128).astype(np.uint8)
        assert "Dashwood" in text(u8)
        at_44k = soxr.resample(np.stack([x, x], axis=1), 16000, 44100)
        resampled = tokens(t.transcribe(at_44k, sample_rate=44100, language="en")[0])
    assert resampled and resampled[:20] == tokens(reference)[:20]


@pytest.mark.slow
def test_an_english_only_model_refuses_to_translate(models_root):
    """tiny.en has no translate task: refused (as the server's 400), not silently
    transcribed."""
    with as2d.Transcriber("tiny.en", decoder="target", models_dir=models_root) as t:
        with pytest.raises(ValueError, match="task translate needs a multilingual model"):
            t.transcribe(SAMPLE, task="translate")


@pytest.mark.slow
def test_word_timestamps_through_the_api_are_the_command_lines(models_root, tmp_path):
    """faster-whisper's ``word_timestamps=True``: the same tokens as without, every segment's
    words spell its text inside its span, and they are the words ``--word-timestamps`` writes."""
    def run(**kw):
        segments, _ = as2d.transcribe(SENTENCE, model="tiny.en", decoder="target",
                                      models_dir=models_root, **kw)
        return list(segments)

    timed = run(word_timestamps=True)
    assert tokens(timed) == tokens(run())
    for seg in timed:
        assert seg.words and "".join(w.word for w in seg.words) == seg.text
        assert all(w.start <= w.end for w in seg.words)
    # The command line in this process: what is compared is what it writes.
    out = cli("transcribe", SENTENCE, "-m", "tiny.en", "--decoder", "target",
              "--word-timestamps", "-f", "json", "-q", "-o", tmp_path, models_dir=models_root)
    assert out.exit_code == 0, out.stderr
    written = json.loads((tmp_path / f"{SENTENCE.stem}.json").read_text())["segments"]
    assert [[w.to_dict() for w in s.words] for s in timed] == [s["words"] for s in written]


@pytest.mark.slow
def test_a_model_that_cannot_time_words_fails_before_decoding(models_root, monkeypatch):
    from as2d.engine import ModelError

    with as2d.Transcriber("tiny.en", decoder="target", models_dir=models_root) as t:
        # As a model without alignment heads declares itself (an exported folder's).
        monkeypatch.setattr(t.engine.target, "alignment_graph", None)
        with pytest.raises(ModelError, match="cannot give word timestamps"):
            t.transcribe(SAMPLE, word_timestamps=True)
