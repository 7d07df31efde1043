"""Audio input: any file soundfile can read, as 16 kHz mono float32, without surprises.

Long files are decoded once, in blocks, into a temporary memory-mapped file, so a multi-hour
recording costs disk rather than RAM and windows are read lazily. Every failure a user can
cause (missing file, not audio, no samples) becomes an :class:`AudioError` with a one-line
message; a file cut short (its header promises more, or decoding fails part-way) keeps the
audio that decodes and is flagged ``truncated``.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
# Files decoding to more than this many samples go to a temporary memmap instead of RAM.
_IN_MEMORY_LIMIT = SAMPLE_RATE * 60 * 20
# Frames decoded per read, and after a read error (a failed read returns nothing): the damaged
# stretch is re-read in small steps, so that what decodes before the damage is kept.
_BLOCK = 1 << 16
_SALVAGE_BLOCK = 1024
# libsndfile's parse log says so when a header promises more data than the file holds.
_SHORT_CHUNK = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.M)


class AudioError(Exception):
    """A user-facing problem with an input file."""


@dataclass
class Audio:
    """16 kHz mono float32 samples (an ndarray or a read-only memmap) and where they came from."""

    samples: np.ndarray
    source: str = "<memory>"
    source_rate: int = SAMPLE_RATE
    source_channels: int = 1
    # The header promised more audio than the file holds: what was there was decoded.
    truncated: bool = False
    _tmp: object = None  # keeps the temporary file of a memmap alive

    @property
    def duration(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    def __len__(self) -> int:
        return len(self.samples)

    def close(self) -> None:
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            self.samples = np.zeros(0, np.float32)
            tmp.close()

    @classmethod
    def from_array(cls, samples: np.ndarray, rate: int = SAMPLE_RATE) -> Audio:
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim == 2:
            x = x.mean(axis=1, dtype=np.float32)
        if rate != SAMPLE_RATE:
            x = resample(x, rate)
        return cls(np.ascontiguousarray(x), source_rate=rate)


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    import soxr

    return soxr.resample(x, rate, SAMPLE_RATE, quality="HQ").astype(np.float32, copy=False)


def _open(path: Path):
    import soundfile as sf

    if not path.exists():
        raise AudioError(f"{path}: no such file")
    if path.is_dir():
        raise AudioError(f"{path}: is a directory, not an audio file")
    try:
        return sf.SoundFile(str(path))
    except sf.LibsndfileError as exc:
        detail = str(exc).split(":")[-1].strip() or "unreadable"
        raise AudioError(f"{path}: not a supported audio file ({detail}); "
                         "supported: wav, flac, ogg/vorbis, opus, mp3, aiff and others "
                         "that libsndfile reads") from None
    except (RuntimeError, OSError) as exc:
        raise AudioError(f"{path}: cannot open ({exc})") from None


def _seek(f, frame: int) -> bool:
    try:
        if not f.seekable():
            return False
        f.seek(frame)
        return True
    except Exception:
        return False


def _header_promises_more(info: str) -> bool:
    """Whether libsndfile's parse log shows a data chunk cut short (a truncated download or
    an interrupted recording). Streaming writers put 0 or 0xFFFFFFFF there: not truncation."""
    for m in _SHORT_CHUNK.finditer(info or ""):
        promised, there = int(m.group(1)), int(m.group(2))
        if there < promised < 0xFFFFFF00:
            return True
    return "lacks an end-of-stream bit" in (info or "")


def load_audio(path: str | os.PathLike) -> Audio:
    """Decode a file to 16 kHz mono float32, mixing channels down and resampling in blocks."""
    import soundfile as sf
    import soxr

    path = Path(path)
    with _open(path) as f:
        rate, channels = f.samplerate, f.channels
        if rate <= 0 or channels <= 0:
            raise AudioError(f"{path}: invalid header (rate {rate}, channels {channels})")
        try:
            short_header = _header_promises_more(f.extra_info)
        except Exception:  # pragma: no cover - extra_info is informational only
            short_header = False
        expected = int(f.frames * SAMPLE_RATE / rate) + SAMPLE_RATE if f.frames > 0 else 0
        stream = None if rate == SAMPLE_RATE else soxr.ResampleStream(
            rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        sink = _Sink(expected)
        read = 0
        damaged = None
        size = _BLOCK
        while True:
            try:
                block = f.read(size, dtype="float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError) as exc:
                # A damaged or cut-off stream (a failed read returns nothing): go back and
                # re-read in small steps to keep what decodes before the damage.
                if size > _SALVAGE_BLOCK and _seek(f, read):
                    size = _SALVAGE_BLOCK
                    continue
                damaged = str(exc).strip() or type(exc).__name__
                block = np.zeros((0, channels), np.float32)
            read += len(block)
            last = damaged is not None or len(block) < size
            mono = block.mean(axis=1, dtype=np.float32) if channels > 1 else block[:, 0]
            if not np.isfinite(mono).all():
                sink.discard()
                raise AudioError(f"{path}: contains invalid (NaN or infinite) samples")
            if stream is not None:
                mono = stream.resample_chunk(np.ascontiguousarray(mono), last=last)
            sink.write(mono)
            if last:
                break
    samples, tmp = sink.finish()
    if len(samples) == 0:
        if tmp is not None:
            tmp.close()
        if damaged is not None:
            raise AudioError(f"{path}: audio data is corrupt or truncated ({damaged})")
        raise AudioError(f"{path}: contains no audio samples")
    truncated = damaged is not None or short_header or (f.frames > 0 and read < f.frames)
    return Audio(samples, source=str(path), source_rate=rate, source_channels=channels,
                 truncated=truncated, _tmp=tmp)


class _Sink:
    """Collects decoded blocks in RAM, or in a temporary memmap for long inputs."""

    def __init__(self, expected: int) -> None:
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.tmp = None
        self.mm = None
        if expected > _IN_MEMORY_LIMIT:
            self.tmp = tempfile.NamedTemporaryFile(prefix="as2d-audio-", suffix=".f32")
            self.capacity = expected
            self.tmp.truncate(self.capacity * 4)
            self.mm = np.memmap(self.tmp.name, dtype=np.float32, mode="r+", shape=(self.capacity,))

    def write(self, x: np.ndarray) -> None:
        if len(x) == 0:
            return
        if self.mm is None:
            self.parts.append(np.array(x, dtype=np.float32))
        else:
            if self.n + len(x) > self.capacity:
                self._grow(self.n + len(x))
            self.mm[self.n : self.n + len(x)] = x
        self.n += len(x)

    def _grow(self, need: int) -> None:
        self.mm.flush()
        del self.mm
        self.capacity = max(need, int(self.capacity * 1.25))
        self.tmp.truncate(self.capacity * 4)
        self.mm = np.memmap(self.tmp.name, dtype=np.float32, mode="r+", shape=(self.capacity,))

    def discard(self) -> None:
        if self.tmp is not None:
            self.mm = None
            self.tmp.close()

    def finish(self):
        if self.mm is None:
            out = np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)
            return out, None
        self.mm.flush()
        out = np.memmap(self.tmp.name, dtype=np.float32, mode="r", shape=(self.n,))
        return out, self.tmp
