"""Audio input: every file a user may hand us becomes 16 kHz mono float32 or one clear error.

Real clips, and files made from them (resampled, mixed, re-encoded, cut short); long inputs go
to a temporary memory map so that memory does not grow with the length of the recording.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers import sox, write_wav

from as2d.runtime import audio as audio_mod
from as2d.runtime.audio import SAMPLE_RATE, AudioError, load_audio
from as2d.runtime.whisper import features
from as2d.runtime.whisper.features import LogMel


@pytest.fixture(scope="module")
def speech(librivox):
    """A real 16 kHz speech clip (path and samples)."""
    clip = librivox[0]
    return clip.path, load_audio(clip.path).samples


# -- user mistakes: one line each, naming the file --------------------------------------------
def _one_line(exc: pytest.ExceptionInfo, *fragments: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, f"message spans several lines: {msg!r}"
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


def test_missing_file_is_named_in_the_error(tmp_path):
    with pytest.raises(AudioError) as exc:
        load_audio(tmp_path / "nope.wav")
    _one_line(exc, "nope.wav", "no such file")


def test_directory_is_not_an_audio_file(tmp_path):
    with pytest.raises(AudioError) as exc:
        load_audio(tmp_path)
    _one_line(exc, str(tmp_path), "directory")


def test_text_file_named_wav_is_not_a_supported_audio_file(tmp_path):
    p = tmp_path / "notes.wav"
    p.write_text("this is not audio\n" * 50)
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "notes.wav", "not a supported audio file")


def test_empty_wav_has_no_samples(tmp_path):
    p = write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32))
    assert sf.info(str(p)).frames == 0
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "empty.wav", "no audio samples")


def test_nan_samples_are_refused_even_late_in_the_file(tmp_path, speech):
    _, x = speech
    y = np.concatenate([x] * 12)  # > 1 minute, NaN near the end
    y[-100] = np.nan
    p = write_wav(tmp_path / "nan.wav", y, subtype="FLOAT")
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "nan.wav", "NaN")


# -- damaged files: keep what is there, and say the file is truncated -------------------------
def test_truncated_wav_keeps_its_audio_and_is_flagged(tmp_path, speech):
    path, x = speech
    data = Path(path).read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[: len(data) // 3])  # the header still promises the whole clip
    a = load_audio(cut)
    assert a.truncated, "a wav whose header promises more data must be flagged truncated"
    assert 0 < len(a.samples) < len(x)
    np.testing.assert_array_equal(a.samples, x[: len(a.samples)])


def test_complete_wav_is_not_flagged_truncated(speech):
    path, _ = speech
    assert not load_audio(path).truncated


def test_truncated_flac_keeps_what_decodes_before_the_damage(tmp_path, speech):
    _, x = speech
    full = tmp_path / "full.flac"
    sf.write(str(full), x, SAMPLE_RATE, subtype="PCM_16")
    cut = tmp_path / "cut.flac"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    a = load_audio(cut)
    assert a.truncated
    assert len(x) // 4 < len(a.samples) < len(x)
    np.testing.assert_array_equal(a.samples, load_audio(full).samples[: len(a.samples)])


# -- formats, rates, channels -----------------------------------------------------------------
def test_flac_is_lossless(tmp_path, speech):
    _, x = speech
    p = tmp_path / "c.flac"
    sf.write(str(p), x, SAMPLE_RATE, subtype="PCM_16")
    np.testing.assert_array_equal(load_audio(p).samples, x)


@pytest.mark.parametrize("fmt", ["ogg", "mp3"])
def test_lossy_formats_decode_to_the_same_speech(tmp_path, speech, fmt):
    if fmt.upper() not in sf.available_formats():
        pytest.skip(f"this libsndfile cannot write {fmt}")
    _, x = speech
    p = tmp_path / f"c.{fmt}"
    sf.write(str(p), x, SAMPLE_RATE)
    y = load_audio(p).samples
    assert abs(len(y) - len(x)) <= 2 * 1152, "duration changed"
    n = min(len(x), len(y))
    assert np.corrcoef(x[:n], y[:n])[0, 1] > 0.98


def test_8khz_stereo_is_mixed_down_and_resampled_to_16khz(tmp_path, speech):
    path, x = speech
    p = tmp_path / "phone.wav"
    sox(path, "-r", "8000", "-c", "2", p)
    assert sf.info(str(p)).samplerate == 8000 and sf.info(str(p)).channels == 2
    a = load_audio(p)
    assert (a.source_rate, a.source_channels) == (8000, 2)
    assert abs(len(a.samples) - len(x)) <= 2
    n = min(len(x), len(a.samples))
    # Only the content above 4 kHz is lost.
    assert np.corrcoef(x[:n], a.samples[:n])[0, 1] > 0.98


def test_stereo_is_the_mean_of_the_channels(tmp_path, speech):
    _, x = speech
    p = write_wav(tmp_path / "lr.wav", np.stack([x, np.zeros_like(x)], axis=1), subtype="FLOAT")
    np.testing.assert_array_equal(load_audio(p).samples, x / 2)


def test_44100hz_resampling_matches_one_shot_soxr(tmp_path, speech):
    """Block-wise streaming resampling gives the one-shot result (block edges leave no seams)."""
    import soxr

    _, x = speech
    y44 = soxr.resample(np.tile(x, 3), SAMPLE_RATE, 44100).astype(np.float32)
    p = write_wav(tmp_path / "cd.wav", y44, rate=44100, subtype="FLOAT")
    got = load_audio(p).samples
    ref = soxr.resample(y44, 44100, SAMPLE_RATE, quality="HQ").astype(np.float32)
    assert abs(len(got) - len(ref)) <= 1
    n = min(len(got), len(ref))
    np.testing.assert_allclose(got[:n], ref[:n], atol=1e-4)


# -- long inputs: a memory map, lazily read ---------------------------------------------------
def _long_wav(tmp_path: Path, speech, minutes: float, name: str) -> Path:
    _, x = speech
    n = int(minutes * 60 * SAMPLE_RATE)
    return write_wav(tmp_path / name, np.resize(x, n))


def test_long_file_goes_to_a_memmap_with_the_same_samples(tmp_path, speech, monkeypatch):
    p = _long_wav(tmp_path, speech, 1.5, "long.wav")
    in_ram = load_audio(p)
    assert not isinstance(in_ram.samples, np.memmap)
    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", SAMPLE_RATE * 20)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmpdir))
    mapped = load_audio(p)
    assert isinstance(mapped.samples, np.memmap), "a long file must be memory-mapped"
    assert not mapped.samples.flags.writeable
    np.testing.assert_array_equal(mapped.samples, in_ram.samples)
    # The temporary file has no name: nothing can be left in TMPDIR, whatever ends the process.
    assert not list(tmpdir.iterdir())
    fd = mapped._tmp.fileno()
    assert os.fstat(fd).st_size == len(in_ram.samples) * 4, "the reservation was trimmed"
    mapped.close()
    assert len(mapped.samples) == 0


def test_long_resampled_stereo_file_in_a_memmap_equals_the_in_memory_result(tmp_path, speech,
                                                                            monkeypatch):
    path, _ = speech
    short = tmp_path / "phone.wav"
    sox(path, "-r", "8000", "-c", "2", short)
    p = tmp_path / "phone-long.wav"
    sox(*([short] * 10), p)  # ~70 s
    in_ram = load_audio(p)
    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", SAMPLE_RATE * 10)
    mapped = load_audio(p)
    assert isinstance(mapped.samples, np.memmap)
    np.testing.assert_array_equal(mapped.samples, in_ram.samples)
    mapped.close()


def _peak_bytes(fn):
    gc.collect()
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_does_not_grow_with_the_length_of_a_long_file(tmp_path, speech, monkeypatch):
    """A 4× longer recording costs no more RAM to load and to compute log-mel windows of
    (the multi-hour case, scaled down by lowering the in-memory limits)."""
    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", SAMPLE_RATE * 60)
    monkeypatch.setattr(features, "_CACHE_FRAMES", 6000)
    peaks = {}
    for minutes in (2, 8):
        p = _long_wav(tmp_path, speech, minutes, f"{minutes}min.wav")
        a, load_peak = _peak_bytes(lambda: load_audio(p))
        assert isinstance(a.samples, np.memmap)
        mel, mel_peak = _peak_bytes(lambda: LogMel(a, 80))
        assert mel._cache is None, "a long file's log-mel must be computed lazily"
        last = mel.n_frames - 1000
        _, win_peak = _peak_bytes(lambda: (mel.window(0), mel.window(last)))
        peaks[minutes] = (load_peak, mel_peak, win_peak)
        a.close()
    # 6 minutes more of audio are 23 MB more of samples and 11 MB more of log-mel: a peak
    # that grows by less than 2 MB holds neither.
    for i, what in enumerate(("load_audio", "LogMel()", "two windows")):
        small, large = peaks[2][i], peaks[8][i]
        assert large < small + 2e6, f"{what}: peak {small / 1e6:.1f} MB for 2 min, " \
                                    f"{large / 1e6:.1f} MB for 8 min"


def test_short_file_log_mel_peak_memory_is_a_few_times_its_result(speech):
    """The cached path (files up to 20 minutes) must not hold the STFT of the whole file."""
    _, x = speech
    y = np.resize(x, 5 * 60 * SAMPLE_RATE)
    mel, peak = _peak_bytes(lambda: LogMel(y, 80))
    assert mel._cache is not None
    assert peak < 3 * mel._cache.nbytes + 25e6, \
        f"peak {peak / 1e6:.0f} MB for a {mel._cache.nbytes / 1e6:.0f} MB log-mel"


def test_declared_seconds_reads_a_header_and_never_a_stream(tmp_path, speech):
    """The length a run is planned by: a regular file's header says it; standard input, a
    named pipe nobody writes to (opening it would block), a folder, text and a missing file
    give None at once, and load_audio still judges each."""
    import threading

    from as2d.runtime.audio import declared_seconds

    path, samples = speech
    assert declared_seconds(path) == pytest.approx(len(samples) / SAMPLE_RATE, abs=1e-3)
    flac = tmp_path / "a.flac"
    sf.write(flac, samples[:SAMPLE_RATE * 2], SAMPLE_RATE)
    assert declared_seconds(str(flac)) == pytest.approx(2.0)
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    got: list = []
    t = threading.Thread(target=lambda: got.append(declared_seconds(fifo)), daemon=True)
    t.start()
    t.join(5)
    assert got == [None], "a named pipe was opened"
    (tmp_path / "notes.wav").write_text("not audio")
    for other in ("-", tmp_path, tmp_path / "notes.wav", tmp_path / "missing.wav"):
        assert declared_seconds(other) is None, other
