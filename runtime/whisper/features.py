"""Whisper's log-mel front end in numpy, computed lazily window by window.

It reproduces openai-whisper's ``log_mel_spectrogram(audio, padding=N_SAMPLES)``: the signal is
followed by 30 s of silence, framed with a centred (reflect-padded) 400-point periodic Hann STFT
at hop 160, the last frame dropped, projected on Slaney mel filters, ``log10`` clamped at 1e-10,
floored at the *whole file's* maximum minus 8, then mapped by ``(x + 4) / 4``. Because the floor
depends on the whole file, a long file is scanned once for its maximum, and windows are
computed on demand so memory stays bounded.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

from as2d.runtime.audio import SAMPLE_RATE, Audio, AudioError

N_FFT = 400
HOP = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE
N_FRAMES = N_SAMPLES // HOP  # 3000 frames per 30-s window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP  # 100
# Keep the whole log-mel of files up to this many frames in memory (20 minutes, ~38 MB).
_CACHE_FRAMES = 20 * 60 * FRAMES_PER_SECOND
_PAD = N_FFT // 2


@lru_cache(maxsize=4)
def mel_filters(n_mels: int, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-scale, Slaney-normalised triangular filters ``[n_mels, n_fft // 2 + 1]``."""
    f_sp = 200.0 / 3
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz)
                        / logstep, f / f_sp)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)),
                        f_sp * m)

    fft_freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


@lru_cache(maxsize=4)
def _bands(n_mels: int) -> tuple[tuple[int, np.ndarray], ...]:
    """Each filter's nonzero FFT bins: (first bin, its weights as float32 scalars)."""
    out = []
    for row in mel_filters(n_mels):
        nz = np.flatnonzero(row)
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        out.append((lo, row[lo:hi].copy()))
    return tuple(out)


def _mel_product(power_t: np.ndarray, n_mels: int) -> np.ndarray:
    """``mel_filters(n_mels) @ power_t`` (``power_t`` [bins, frames]), every frame summed bin by
    bin in one fixed order. A BLAS product's bits depend on its thread count and on where a
    frame falls among the columns (measured on an AVX2 CPU: ``OMP_NUM_THREADS=1`` changed a
    transcript's log-probabilities), and a frame must be the same whoever computes it: a Ray
    worker, a lazily read long file, the in-memory path."""
    out = np.zeros((n_mels, power_t.shape[1]), np.float32)
    for m, (lo, w) in enumerate(_bands(n_mels)):
        acc = out[m]
        for j, wj in enumerate(w):
            acc += power_t[lo + j] * wj
    return out


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    n = np.arange(N_FFT)
    return (0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)).astype(np.float32)  # periodic Hann


def _padded_slice(samples: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Samples ``lo..hi`` of whisper's STFT input: reflect-padded start, silence after the end."""
    n = len(samples)
    out = np.zeros(hi - lo, dtype=np.float32)
    # Region of the centred signal s' = reflect(s[1:201]) + s + zeros; s' index i ↔ s index i-200.
    a, b = max(lo, _PAD), min(hi, _PAD + n)
    if b > a:
        out[a - lo : b - lo] = samples[a - _PAD : b - _PAD]
    if lo < _PAD:
        # s'[i] = s[200 - i] for i < 200 (reflection without repeating the edge sample).
        idx = np.arange(lo, min(hi, _PAD))
        src = _PAD - idx
        ok = src < n
        out[idx[ok] - lo] = samples[src[ok]]
    return out


def log_mel_frames(samples: np.ndarray, start: int, stop: int, n_mels: int) -> np.ndarray:
    """Unnormalised ``log10`` mel frames ``start..stop`` (clamped at 1e-10)."""
    if stop <= start:
        return np.zeros((n_mels, 0), np.float32)
    sig = _padded_slice(samples, start * HOP, (stop - 1) * HOP + N_FFT)
    frames = np.lib.stride_tricks.sliding_window_view(sig, N_FFT)[::HOP]
    spec = np.fft.rfft(frames * _window(), axis=-1)
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
    mel = _mel_product(np.ascontiguousarray(power.T), n_mels)
    return np.log10(np.maximum(mel, 1e-10))


class LogMel:
    """Normalised log-mel windows of one :class:`Audio`, computed on demand."""

    def __init__(self, audio: Audio | np.ndarray, n_mels: int = 80) -> None:
        self.samples = audio.samples if isinstance(audio, Audio) else np.asarray(audio, np.float32)
        self.n_mels = n_mels
        # Frames holding the audio (whisper's "content frames").
        self.n_frames = len(self.samples) // HOP
        self._cache: np.ndarray | None = None
        self._recent: dict[int, np.ndarray] = {}  # lazily computed chunks, the last two
        self._recent_lock = threading.Lock()  # the drafter's and the target's threads read
        self._others: dict[int, LogMel] = {}  # the same audio in other mel bands (for_mels)
        # Frames past the content still see its tail; include them in the maximum. The STFT
        # runs a chunk of N_FRAMES at a time either way (its float64 temporaries are ~80× the
        # size of the result), so memory stays bounded for any length. The chunks sit on one
        # fixed grid, here and when frames are computed lazily (:meth:`frames`). Each frame is
        # computed on its own (the mel product is summed bin by bin, not by a BLAS whose bits
        # moved with the column's position on an AVX2 CPU), so the grid is a second guarantee:
        # if a library's batched kernel ever made a frame depend on its neighbours, the lazy
        # and in-memory paths would still agree bit for bit. Sequential reads hit the cache.
        stop = self.n_frames + 3
        chunks = (self._chunk(k) for k in range(0, -(-stop // N_FRAMES)))
        if self.n_frames <= _CACHE_FRAMES:
            full = np.concatenate(list(chunks), axis=1)
            self._floor = float(full.max()) - 8.0
            self._cache = self._normalise(full[:, : self.n_frames])
        else:
            self._floor = max(float(c.max()) for c in chunks) - 8.0

    def for_mels(self, n_mels: int) -> LogMel:
        """The same audio with ``n_mels`` bands: itself, or another LogMel made once and kept.

        A drafter may take other mel bands than its target (tiny.en's 80 drafting for
        large-v3's 128); the target's object stays the one windows and turns are keyed by."""
        if n_mels == self.n_mels:
            return self
        if n_mels not in self._others:
            self._others[n_mels] = LogMel(self.samples, n_mels)
        return self._others[n_mels]

    def _chunk(self, k: int) -> np.ndarray:
        """Unnormalised frames of grid chunk ``k``: ``k·N_FRAMES`` up to the next chunk or the
        end (content frames and the three after them)."""
        lo = k * N_FRAMES
        return log_mel_frames(self.samples, lo, min(lo + N_FRAMES, self.n_frames + 3),
                              self.n_mels)

    def _normalise(self, logspec: np.ndarray) -> np.ndarray:
        return ((np.maximum(logspec, self._floor) + 4.0) / 4.0).astype(np.float32)

    @property
    def duration(self) -> float:
        return self.n_frames / FRAMES_PER_SECOND

    def frames(self, start: int, stop: int) -> np.ndarray:
        """Content frames ``start..stop`` (clipped to the audio), normalised."""
        stop = min(stop, self.n_frames)
        start = min(start, stop)
        if self._cache is not None:
            return self._cache[:, start:stop]
        if stop <= start:
            return np.zeros((self.n_mels, 0), np.float32)
        parts = []
        for k in range(start // N_FRAMES, (stop - 1) // N_FRAMES + 1):
            with self._recent_lock:
                chunk = self._recent.get(k)
            if chunk is None:
                chunk = self._chunk(k)
                with self._recent_lock:
                    self._recent[k] = chunk
                    while len(self._recent) > 2:
                        self._recent.pop(next(iter(self._recent)))
            parts.append(chunk)
        lo = start // N_FRAMES * N_FRAMES
        block = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return self._normalise(block[:, start - lo:stop - lo])

    def window(self, start: int, n_frames: int = N_FRAMES, pad_to: int = N_FRAMES) -> np.ndarray:
        """``[1, n_mels, pad_to]``: frames from ``start``, zero-padded as whisper's pad_or_trim."""
        seg = self.frames(start, start + n_frames)
        if not np.isfinite(seg).all():
            # Samples are sanitised when audio is read; this guards every other way in (an
            # array from the API, a live source), so NaN never reaches the models as "text".
            raise AudioError("the audio's log-mel features are not finite (NaN or infinite "
                             "samples?)")
        out = np.zeros((1, self.n_mels, pad_to), np.float32)
        out[0, :, : seg.shape[1]] = seg[:, :pad_to]
        return out
