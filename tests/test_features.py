"""The log-mel front end equals Whisper's (faster-whisper's numpy port) and stays bounded.

Whisper computes the log-mel of the whole file followed by 30 s of silence and floors every value
at the file's maximum minus 8. Our :class:`LogMel` computes the same numbers lazily, window by
window, so that a long file never needs its whole spectrogram in memory; the lazy path must give
exactly the cached path's numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

from as2d.runtime.audio import load_audio
from as2d.runtime.whisper import features
from as2d.runtime.whisper.features import HOP, N_FRAMES, LogMel, mel_filters

fw_features = pytest.importorskip("faster_whisper.feature_extractor")


@pytest.fixture(scope="module")
def audios(clips):
    return [(c.name, load_audio(c.path)) for c in clips]


def test_mel_filters_equal_faster_whisper():
    ours = mel_filters(80)
    ref = fw_features.FeatureExtractor(80).mel_filters
    assert ours.shape == ref.shape == (80, 201)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-9)


def test_mel_filters_for_128_bins_equal_faster_whisper():
    # large-v3 style models use 128 bins; the same code path must serve them.
    ref = fw_features.FeatureExtractor.get_mel_filters(16000, 400, n_mels=128).astype(np.float32)
    np.testing.assert_allclose(mel_filters(128), ref, rtol=1e-6, atol=1e-9)


def test_log_mel_equals_faster_whisper_on_every_real_clip(audios):
    fe = fw_features.FeatureExtractor(80)
    for name, audio in audios:
        mel = LogMel(audio, 80)
        assert mel.n_frames == len(audio.samples) // HOP
        ref = fe(audio.samples, padding=N_FRAMES * HOP)[:, : mel.n_frames]
        ours = mel.frames(0, mel.n_frames)
        assert ours.shape == ref.shape, name
        err = np.abs(ours - ref).max()
        assert err <= 1e-5, f"{name}: log-mel differs from faster-whisper by {err:g}"


def test_window_is_zero_padded_to_3000_frames_like_pad_or_trim(audios):
    name, audio = audios[0]
    mel = LogMel(audio, 80)
    w = mel.window(0)
    assert w.shape == (1, 80, N_FRAMES)
    np.testing.assert_array_equal(w[0, :, : mel.n_frames], mel.frames(0, mel.n_frames))
    assert not w[0, :, mel.n_frames:].any(), "frames past the audio must be zero (pad_or_trim)"
    # A window cut shorter than the audio keeps only its frames.
    short = mel.window(10, n_frames=50)
    np.testing.assert_array_equal(short[0, :, :50], mel.frames(10, 60))
    assert not short[0, :, 50:].any()


def test_digital_silence_gives_whisper_constant_floor():
    x = np.zeros(16000 * 3, np.float32)
    mel = LogMel(x, 80)
    # log10(1e-10) = -10 everywhere, so (x + 4) / 4 = -1.5 (to float32 rounding of 1e-10).
    np.testing.assert_allclose(mel.frames(0, mel.n_frames), -1.5, atol=1e-6)
    ref = fw_features.FeatureExtractor(80)(x, padding=N_FRAMES * HOP)[:, : mel.n_frames]
    np.testing.assert_allclose(mel.frames(0, mel.n_frames), ref, atol=1e-6)


def _long_signal(audios, seconds: int) -> np.ndarray:
    """Real speech repeated to ``seconds``, with a louder stretch near the end so that the
    file's maximum (which floors every frame) lies far from the start."""
    speech = np.concatenate([a.samples for _, a in audios[:5]])
    x = np.resize(speech, seconds * 16000).astype(np.float32)
    x[-20 * 16000: -15 * 16000] *= 3.0
    return x


def test_lazy_log_mel_equals_cached_log_mel_bit_for_bit(audios, monkeypatch):
    samples = _long_signal(audios, 100)
    cached = LogMel(samples, 80)
    assert cached._cache is not None
    monkeypatch.setattr(features, "_CACHE_FRAMES", 500)
    lazy = LogMel(samples, 80)
    assert lazy._cache is None, "a long file must not keep its whole log-mel in memory"
    assert lazy.n_frames == cached.n_frames
    assert lazy._floor == cached._floor
    # Windows at arbitrary (odd) seeks, and the ragged last one.
    for start in (0, 1, 1234, 3000, 4567, cached.n_frames - 1700):
        np.testing.assert_array_equal(lazy.window(start), cached.window(start),
                                      err_msg=f"window at frame {start}")


def test_lazy_log_mel_works_on_a_memmap_without_reading_it_all(audios, monkeypatch, tmp_path):
    samples = _long_signal(audios, 100)
    path = tmp_path / "x.f32"
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=samples.shape)
    mm[:] = samples
    mm.flush()
    ro = np.memmap(path, dtype=np.float32, mode="r", shape=samples.shape)
    monkeypatch.setattr(features, "_CACHE_FRAMES", 500)
    lazy = LogMel(ro, 80)
    assert lazy._cache is None
    assert np.shares_memory(lazy.samples, ro), "LogMel must read the memmap, not a copy"
    np.testing.assert_array_equal(lazy.window(2222), LogMel(samples, 80).window(2222))


def test_a_frame_is_the_same_whatever_batch_computes_it(audios):
    """A frame's bits must not depend on the other frames computed with it (nor on a BLAS
    thread count: the mel product is summed bin by bin, not by a BLAS), so that a lazily read
    long file, a Ray worker and the in-memory path all feed the encoder the same input."""
    from as2d.runtime.whisper.features import log_mel_frames, mel_filters

    samples = _long_signal(audios, 40)
    full = log_mel_frames(samples, 0, 3000, 80)
    for lo, hi in ((0, 1), (1, 2), (1234, 1500), (7, 2999), (2999, 3000)):
        np.testing.assert_array_equal(log_mel_frames(samples, lo, hi, 80), full[:, lo:hi],
                                      err_msg=f"frames {lo}..{hi}")
    # Still the filters' product, to float32 rounding.
    frames = np.lib.stride_tricks.sliding_window_view(
        np.concatenate([samples[1:201][::-1], samples[:160 * 99 + 200]]), 400)[::160]
    spec = np.fft.rfft(frames * features._window(), axis=-1)
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
    ref = np.log10(np.maximum(mel_filters(80).astype(np.float64) @ power.T, 1e-10))
    np.testing.assert_allclose(full[:, :100], ref, atol=1e-5)
