"""Kaldi-compatible log-mel filterbank features in numpy, as CAM++ was trained on.

CAM++ (3D-Speaker) was trained on 80-bin Kaldi fbanks of 16-kHz audio in [-1, 1] (Kaldi's
defaults: 25-ms frames every 10 ms with edges snipped, DC offset removed per frame, pre-emphasis
0.97, Povey window, 512-point FFT of the power spectrum, triangular filters evenly spaced on
Kaldi's mel scale from 20 Hz to Nyquist, natural log floored at float32's epsilon, no dither),
and it embeds them after subtracting their mean over time. This reimplements that front end so
the runtime needs neither torch nor torchaudio; the tests compare it with a reference.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16000
FRAME_LENGTH = 400  # samples: 25 ms
FRAME_SHIFT = 160  # samples: 10 ms
N_FFT = 512  # the frame length rounded up to a power of two
N_MELS = 80
LOW_FREQ = 20.0
PREEMPHASIS = 0.97
_LOG_FLOOR = float(np.finfo(np.float32).eps)


def _mel(freq):
    return 1127.0 * np.log(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


@lru_cache(maxsize=4)
def mel_banks(n_mels: int = N_MELS, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Kaldi's triangular filters, ``[N_FFT // 2 + 1, n_mels]`` (the Nyquist bin weighs 0)."""
    low, high = _mel(LOW_FREQ), _mel(sample_rate / 2)
    delta = (high - low) / (n_mels + 1)
    left = low + delta * np.arange(n_mels)[:, None]
    center, right = left + delta, left + 2 * delta
    mel = _mel(sample_rate / N_FFT * np.arange(N_FFT // 2))[None, :]
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    banks = np.maximum(0.0, np.minimum(up, down))
    banks = np.concatenate([banks, np.zeros((n_mels, 1))], axis=1)
    return np.ascontiguousarray(banks.T)


@lru_cache(maxsize=1)
def povey_window() -> np.ndarray:
    n = np.arange(FRAME_LENGTH, dtype=np.float64)
    return (0.5 - 0.5 * np.cos(2 * np.pi * n / (FRAME_LENGTH - 1))) ** 0.85


def num_frames(n_samples: int) -> int:
    """Frames Kaldi makes of ``n_samples`` (edges snipped: whole frames only)."""
    return 0 if n_samples < FRAME_LENGTH else 1 + (n_samples - FRAME_LENGTH) // FRAME_SHIFT


def fbank(samples: np.ndarray, n_mels: int = N_MELS) -> np.ndarray:
    """Log-mel fbank ``[frames, n_mels]`` (float32) of 16-kHz mono ``samples`` in [-1, 1]."""
    x = np.asarray(samples, dtype=np.float64).reshape(-1)
    n = num_frames(x.size)
    if n == 0:
        return np.zeros((0, n_mels), dtype=np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(x, FRAME_LENGTH)[::FRAME_SHIFT][:n]
    frames = frames - frames.mean(axis=1, keepdims=True)  # a copy, then updated in place
    # Pre-emphasis; the first sample is emphasised against itself, as Kaldi does.
    emphasised = frames.copy()
    emphasised[:, 1:] -= PREEMPHASIS * frames[:, :-1]
    emphasised[:, 0] -= PREEMPHASIS * frames[:, 0]
    emphasised *= povey_window()
    frames = emphasised
    power = np.abs(np.fft.rfft(frames, n=N_FFT, axis=1)) ** 2
    mel = power @ mel_banks(n_mels)
    return np.log(np.maximum(mel, _LOG_FLOOR)).astype(np.float32)


def speaker_features(samples: np.ndarray) -> np.ndarray:
    """What CAM++ embeds: the fbank with its mean over time subtracted (float32)."""
    feats = fbank(samples)
    if len(feats):
        feats -= feats.mean(axis=0, keepdims=True)
    return feats
