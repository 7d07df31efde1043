"""Audio input: any audio or video file, or a pipe, as 16 kHz mono float32, without surprises.

Two readers: libsndfile (``soundfile``) is the fast path for what it reads (wav, flac, ogg,
mp3, aiff, ...); everything else — m4a/aac, opus, webm, mp4, mkv and any other container
FFmpeg opens — goes through PyAV (``av``, whose wheels bundle FFmpeg). A video gives its first
audio stream (:attr:`Audio.stream` says which when there are several). ``-`` is standard
input; pipes, ``/dev/stdin``, ``<(cat x.mp3)`` and named pipes are read as non-seekable
streams (no frame count is trusted; a named pipe that no program opens for writing is an error
after a wait, not a silent hang).

Decoding streams: blocks are mixed down, resampled (soxr, streaming) and written as they come,
to RAM for short inputs and to an unnamed, preallocated temporary file beyond
``_IN_MEMORY_LIMIT`` that is then memory-mapped read-only. Nothing is mapped while decoding,
so a multi-hour video keeps the process's memory flat; the file has no name, so it cannot be
left behind in TMPDIR whatever ends the process; space is reserved with ``posix_fallocate``, so
a full TMPDIR is a clear error rather than a bus error.

Every failure a user can cause (missing file, not audio, no audio stream, no samples, absurd
sample rate, hostile samples) becomes an :class:`AudioError` with a one-line message; a file cut
short (its header promises more, or decoding fails part-way) keeps the audio that decodes and is
flagged ``truncated``. Samples beyond full scale are clipped to ±1 (as 16-bit PCM, the form in
which openai-whisper reads every file through ffmpeg, would) and counted in ``clipped``; NaN or
infinite samples are refused.
"""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

SAMPLE_RATE = 16000
# Inputs decoding to more than this many samples go to a temporary memmap instead of RAM.
_IN_MEMORY_LIMIT = SAMPLE_RATE * 60 * 20
# Frames decoded per read, and after a read error (a failed read returns nothing): the damaged
# stretch is re-read in small steps, so that what decodes before the damage is kept.
_BLOCK = 1 << 16
_SALVAGE_BLOCK = 1024
# Samples (frames × channels) per block: a header declaring hundreds of channels must not turn
# one block into gigabytes.
_BLOCK_VALUES = 1 << 20
# The temporary file grows by at least this many samples at a time (64 MB).
_GROW = 1 << 24
# Sample rates and channel counts outside these bounds are a damaged or hostile header: a 20-KB
# WAV declaring 1 Hz would otherwise expand into hours of audio.
MIN_RATE = 1000
MAX_RATE = 1_536_000
MAX_CHANNELS = 1024
# Decoded audio longer than this is refused (AS2D_MAX_AUDIO_HOURS changes it).
MAX_HOURS = float(os.environ.get("AS2D_MAX_AUDIO_HOURS") or 48)
# How long to wait for a program to open a named pipe for writing (AS2D_FIFO_TIMEOUT).
FIFO_TIMEOUT = float(os.environ.get("AS2D_FIFO_TIMEOUT") or 30)
# A stream (a pipe, a device) still not ended after this long is said to be one, once: a live
# pipe is legitimate input, but is transcribed only when it ends.
STREAM_NOTE_SECONDS = 60.0
# ISO base media (MP4, M4A, MOV, 3GP) boxes that open a file: the one family of formats whose
# index may sit at the end, so that a piped copy must be read whole and decoded from a file.
_ISO_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot")
# libsndfile's parse log says so when a header promises more data than the file holds.
_SHORT_CHUNK = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.M)

AudioSource = str | os.PathLike | bytes | BinaryIO


class AudioError(Exception):
    """A user-facing problem with an input file."""

    seek_might_help = False  # a seekable copy of an unseekable input might read


@dataclass
class Audio:
    """16 kHz mono float32 samples (an ndarray or a read-only memmap) and where they came from."""

    samples: np.ndarray
    source: str = "<memory>"
    source_rate: int = SAMPLE_RATE
    source_channels: int = 1
    # The header promised more audio than the file holds: what was there was decoded.
    truncated: bool = False
    # Samples beyond full scale (|x| > 1) that were clipped to ±1.
    clipped: int = 0
    # Which audio stream was decoded, when the file has several ("stream 1 of 2: eng, aac").
    stream: str | None = None
    streams: int = 1
    # The reader that decoded it: "sndfile", "ffmpeg" or "array".
    reader: str = "array"
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
        """Samples in memory, sanitised like a file's: mono ``(frames,)`` or channels-last
        ``(frames, channels)`` as soundfile returns them; float (full scale ±1) or integer
        PCM, scaled as soundfile reads it (int8/int16/int32 by 2^7/2^15/2^31, uint8 offset
        by 128). Raises TypeError for samples that are not numbers (bool, complex, int64,
        object, ...) and AudioError for a shape that is not one of those (a channels-first
        ``(channels, frames)`` array: transpose it) or audio over the length limit, before
        anything is copied."""
        if isinstance(samples, (list, tuple)):  # numbers, read as float samples (as always)
            samples = np.asarray(samples, dtype=np.float32)
        if not isinstance(samples, np.ndarray):
            raise TypeError("audio array: expected a numpy array of samples, not "
                            f"{type(samples).__name__}")
        x = samples
        kind = _ARRAY_KINDS.get(x.dtype.str[1:]) if x.dtype.kind in "iu" else None
        if x.dtype.kind != "f" and kind is None:
            raise TypeError(f"audio array: samples of dtype {x.dtype} are not audio (give "
                            "float samples in ±1, or int8/int16/int32/uint8 PCM)")
        if x.ndim not in (1, 2) or x.size == 0:
            raise AudioError(f"audio array: expected samples or frames × channels, "
                             f"got shape {x.shape}")
        if x.ndim == 2 and (x.shape[1] > x.shape[0] or x.shape[1] > MAX_CHANNELS):
            raise AudioError(f"audio array: shape {x.shape} has more channels than frames; "
                             "give frames × channels, as soundfile returns them (for "
                             "channels-first samples, pass samples.T)")
        _check_rate("audio array", rate)
        if x.shape[0] / rate > MAX_HOURS * 3600:  # before any copy
            raise AudioError(f"audio array: {x.shape[0] / rate / 3600:.1f} h of audio is more "
                             f"than {MAX_HOURS:g} h (the limit; AS2D_MAX_AUDIO_HOURS changes it)")
        if kind is not None:
            offset, scale = kind
            x = (x.astype(np.float32) - np.float32(offset)) * np.float32(1.0 / scale)
        block = x if x.ndim == 2 else x[:, None]
        mono, clipped = _sanitise(block, "audio array")
        if rate != SAMPLE_RATE:
            mono = resample(mono, rate)
        return cls(np.ascontiguousarray(mono), source_rate=rate,
                   source_channels=block.shape[1], clipped=clipped)


# Integer PCM as soundfile reads it into floats: (offset, full scale) per dtype.
_ARRAY_KINDS = {"i1": (0, 2.0 ** 7), "i2": (0, 2.0 ** 15), "i4": (0, 2.0 ** 31),
                "u1": (128, 2.0 ** 7)}


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    import soxr

    return soxr.resample(x, rate, SAMPLE_RATE, quality="HQ").astype(np.float32, copy=False)


def display_name(path: str | os.PathLike | bytes) -> str:
    """``path`` as text that can always be printed: bytes that are not UTF-8 become ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


# -- samples ----------------------------------------------------------------------------------
def _sanitise(block: np.ndarray, name: str) -> tuple[np.ndarray, int]:
    """(frames × channels) floats → mono float32, clipped to ±1 *before* mixing (two samples
    near the float maximum would otherwise sum to infinity); NaN or infinity is an error."""
    if not np.isfinite(block).all():
        raise AudioError(f"{name}: contains invalid (NaN or infinite) samples")
    over = np.abs(block) > 1.0
    clipped = int(np.count_nonzero(over))
    if clipped:
        block = np.clip(block, -1.0, 1.0)
    if block.dtype != np.float32:
        block = block.astype(np.float32)
    if block.shape[1] == 1:
        return np.ascontiguousarray(block[:, 0]), clipped
    return block.mean(axis=1, dtype=np.float32), clipped


def _check_rate(name: str, rate: int, channels: int = 1) -> None:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioError(f"{name}: implausible sample rate {rate} Hz (a damaged header? "
                         f"as2d reads {MIN_RATE}–{MAX_RATE} Hz)")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioError(f"{name}: implausible channel count {channels} (a damaged header? "
                         f"as2d reads 1–{MAX_CHANNELS} channels)")


def _max_samples() -> int:
    return int(MAX_HOURS * 3600 * SAMPLE_RATE)


class _Pipeline:
    """Blocks of (frames × channels) samples → sanitised, mixed, resampled, into a sink."""

    def __init__(self, name: str, sink: _Sink) -> None:
        self.name = name
        self.sink = sink
        self.rate = 0
        self.stream = None
        self.clipped = 0

    def push(self, block: np.ndarray, rate: int, last: bool = False) -> None:
        import soxr

        if rate != self.rate:
            self.flush()
            _check_rate(self.name, rate, block.shape[1])
            self.rate = rate
            self.stream = None if rate == SAMPLE_RATE else soxr.ResampleStream(
                rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        mono, clipped = _sanitise(block, self.name)
        self.clipped += clipped
        if self.stream is not None:
            mono = self.stream.resample_chunk(mono, last=last)
            if last:
                self.stream = None
        self.sink.write(mono)

    def flush(self) -> None:
        if self.stream is not None:
            self.sink.write(self.stream.resample_chunk(np.zeros(0, np.float32), last=True))
            self.stream = None


class _Sink:
    """Collects decoded audio in RAM, or — past ``_IN_MEMORY_LIMIT`` samples — in an unnamed
    temporary file written with ``pwrite`` (nothing mapped while decoding) whose space is
    reserved ahead with ``posix_fallocate``, then mapped read-only by :meth:`finish`."""

    def __init__(self, name: str, expected: int = 0) -> None:
        self.name = name
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.tmp = None
        self.capacity = 0
        self.limit = _max_samples()
        if expected > _IN_MEMORY_LIMIT:
            self._spill(min(expected, self.limit))

    def _spill(self, capacity: int) -> None:
        try:
            self.tmp = tempfile.TemporaryFile(prefix="as2d-audio-", suffix=".f32")
        except OSError as exc:
            raise self._space_error(exc, capacity) from None
        self._reserve(capacity)
        parts, self.parts, n, self.n = self.parts, [], self.n, 0
        for p in parts:
            self._pwrite(p)
        assert self.n == n

    def _space_error(self, exc: OSError, need: int) -> AudioError:
        where = tempfile.gettempdir()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            try:
                free = f"; {shutil.disk_usage(where).free / 1e6:.0f} MB free"
            except OSError:
                free = ""
            return AudioError(
                f"{self.name}: no space left in {where} for the decoded audio "
                f"({need * 4 / 1e6:.0f} MB needed{free}); set TMPDIR to a folder with room")
        return AudioError(f"{self.name}: cannot write the decoded audio to {where} "
                          f"({exc.strerror or exc})")

    def _reserve(self, capacity: int) -> None:
        fd = self.tmp.fileno()
        try:
            os.posix_fallocate(fd, 0, capacity * 4)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                self.discard()
                raise self._space_error(exc, capacity) from None
            os.ftruncate(fd, capacity * 4)  # a file system without fallocate
        self.capacity = capacity

    def _pwrite(self, x: np.ndarray) -> None:
        if self.n + len(x) > self.capacity:
            self._reserve(max(self.n + len(x), self.capacity + self.capacity // 4,
                              self.capacity + _GROW))
        data = memoryview(np.ascontiguousarray(x, dtype=np.float32)).cast("B")
        offset = self.n * 4
        try:
            while data:
                done = os.pwrite(self.tmp.fileno(), data, offset)
                data, offset = data[done:], offset + done
        except OSError as exc:
            self.discard()
            raise self._space_error(exc, self.n + len(x)) from None
        self.n += len(x)

    def write(self, x: np.ndarray) -> None:
        if len(x) == 0:
            return
        if self.n + len(x) > self.limit:
            self.discard()
            raise AudioError(f"{self.name}: decodes to more than {MAX_HOURS:g} h of audio "
                             "(the limit; AS2D_MAX_AUDIO_HOURS changes it)")
        if self.tmp is not None:
            self._pwrite(x)
            return
        self.parts.append(np.array(x, dtype=np.float32))
        self.n += len(x)
        if self.n > _IN_MEMORY_LIMIT:
            self._spill(self.n + _GROW)

    def discard(self) -> None:
        tmp, self.tmp = self.tmp, None
        self.parts = []
        if tmp is not None:
            tmp.close()

    def finish(self):
        if self.tmp is None:
            out = np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)
            self.parts = []
            return out, None
        if self.n == 0:
            self.discard()
            return np.zeros(0, np.float32), None
        os.ftruncate(self.tmp.fileno(), self.n * 4)  # give back the unused reservation
        out = np.memmap(self.tmp, dtype=np.float32, mode="r", shape=(self.n,))
        return out, self.tmp


# -- opening ----------------------------------------------------------------------------------
def _wait_for_writer(path: Path, name: str, timeout: float,
                     on_wait: Callable[[str], None] | None) -> BinaryIO:
    """Open a named pipe for reading. ``open`` blocks until some program opens it for
    writing; this gives up after ``timeout`` seconds (saying so) instead of hanging."""
    opened: dict = {}

    def opener() -> None:
        try:
            opened["f"] = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the caller
        except OSError as exc:
            opened["error"] = exc

    t = threading.Thread(target=opener, name="as2d-fifo-open", daemon=True)
    t.start()
    t.join(min(timeout, 1.0))
    if t.is_alive() and on_wait is not None:
        on_wait(f"{name}: waiting up to {timeout:g} s for a program to write to this named pipe")
    t.join(max(0.0, timeout - 1.0))
    if t.is_alive():
        # Become the writer ourselves for a moment, so that the blocked open returns.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
        t.join(5.0)
        f = opened.get("f")
        if f is not None:
            f.close()
        raise AudioError(f"{name}: named pipe with no writer (nothing opened it for writing "
                         f"within {timeout:g} s; AS2D_FIFO_TIMEOUT changes the wait)")
    if "error" in opened:
        exc = opened["error"]
        raise AudioError(f"{name}: cannot open ({exc.strerror or exc})") from None
    return opened["f"]


def _stdin(on_wait) -> tuple[BinaryIO, bool]:
    try:
        st = os.fstat(0)
    except OSError:
        raise AudioError("-: standard input is closed") from None
    if os.isatty(0):
        raise AudioError("-: standard input is a terminal; pipe audio into it "
                         "(as2d transcribe - < talk.mp3)")
    f = os.fdopen(os.dup(0), "rb", buffering=0)
    return f, stat.S_ISREG(st.st_mode)


def load_audio(source: AudioSource, *, fifo_timeout: float | None = None,
               on_wait: Callable[[str], None] | None = None) -> Audio:
    """Decode a file (a path; ``-`` for standard input; or a binary file object) to 16 kHz
    mono float32, mixing channels down and resampling in blocks.

    ``on_wait`` receives one-line notes: a named pipe has no writer yet (after
    ``fifo_timeout`` seconds, default ``FIFO_TIMEOUT``, that is an :class:`AudioError`); a
    stream has been read for :data:`STREAM_NOTE_SECONDS` without ending (a live pipe, or
    ``/dev/zero`` behind a WAV header: it is read on, in bounded memory, until it ends or
    reaches ``MAX_HOURS``).
    """
    timeout = FIFO_TIMEOUT if fifo_timeout is None else fifo_timeout
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        name = display_name(name) if isinstance(name, str | bytes) else "<stream>"
        seekable = bool(getattr(source, "seekable", lambda: False)())
        return _load_stream(source, name, seekable, on_wait)
    if os.fsdecode(source) == "-":  # str, bytes or Path("-") as typer hands it over
        f, seekable = _stdin(on_wait)
        with f:
            return _load_stream(f, "-", seekable, on_wait)
    path = Path(os.fsdecode(source))
    name = display_name(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise AudioError(f"{name}: no such file") from None
    except OSError as exc:
        raise AudioError(f"{name}: cannot open ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise AudioError(f"{name}: is a directory, not an audio file")
    if stat.S_ISREG(st.st_mode):
        if not os.access(path, os.R_OK):
            raise AudioError(f"{name}: cannot open (permission denied)")
        return _load_file(path, name, st.st_size)
    # A pipe (/dev/stdin, <(cat x.mp3)), a named pipe, a character device, a socket.
    if stat.S_ISFIFO(st.st_mode) and not _is_open_pipe(path):
        f = _wait_for_writer(path, name, timeout, on_wait)
    else:
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115
        except OSError as exc:
            raise AudioError(f"{name}: cannot open ({exc.strerror or exc})") from None
    with f:
        return _load_stream(f, name, False, on_wait)


def load_samples(source: AudioSource) -> np.ndarray:
    """A recording's 16-kHz mono samples as an array of its own in memory (a long file's
    samples live in a temporary memory map, which is closed here): for code that keeps the
    samples beyond the :class:`Audio` (benchmarks, tests, short clips)."""
    audio = load_audio(source)
    try:
        return np.array(audio.samples, dtype=np.float32)
    finally:
        audio.close()


def declared_seconds(source: AudioSource) -> float | None:
    """The length a regular file declares, read from its header without decoding anything:
    libsndfile's frame count, or for a container only FFmpeg reads (m4a, mp4, webm, ...) its
    audio stream's or the container's duration. None for whatever cannot say so cheaply and
    safely: standard input, a pipe or a device (opening could block or consume them), a file
    that declares no length, a damaged header, anything that is not a path. A hint for
    planning a run, never a check: :func:`load_audio` judges the file."""
    try:
        path = Path(os.fsdecode(source))
        if str(path) == "-" or not stat.S_ISREG(path.stat().st_mode):
            return None
    except (TypeError, ValueError, OSError):  # a file object, a NUL byte, nothing there
        return None
    try:
        import soundfile as sf

        info = sf.info(os.fsencode(path))
        seconds = info.frames / info.samplerate
    except Exception:  # noqa: BLE001 - not libsndfile's: FFmpeg's container may say
        seconds = _container_seconds(path)
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


def _container_seconds(path: Path) -> float | None:
    """The duration an FFmpeg-read container declares for its first audio stream (else for
    the whole container), from what opening it probes; None where it declares none. Read
    through an open file, so that no name is taken for an FFmpeg protocol ("concat:...") and
    any name works. Some formats declare nothing and FFmpeg estimates from the bit rate (ADTS
    AAC, a WebM without a duration): a hint still, since only speed hangs on it."""
    try:
        import av

        with open(path, "rb") as f, av.open(f, mode="r", metadata_errors="ignore") as container:
            streams = list(container.streams.audio)
            if not streams:
                return None
            stream = streams[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
            if container.duration is not None:
                return container.duration / av.time_base
    except Exception:  # noqa: BLE001 - unknown here; load_audio will say what is wrong
        return None
    return None


def _is_open_pipe(path: Path) -> bool:
    """Whether ``path`` names a pipe this process already holds (``/dev/stdin``,
    ``/dev/fd/N``, ``/proc/self/fd/N``): opening it never waits for a writer."""
    text = os.fsdecode(path)
    return text in ("/dev/stdin",) or text.startswith(("/dev/fd/", "/proc/self/fd/"))


def _load_file(path: Path, name: str, size: int) -> Audio:
    """A regular file: libsndfile if it knows the format, else FFmpeg."""
    import soundfile as sf

    try:
        f = sf.SoundFile(os.fsencode(path))
    except sf.LibsndfileError as exc:
        sndfile_says = str(exc).split(":")[-1].strip() or "unreadable"
        f = None
    except (RuntimeError, OSError) as exc:
        raise AudioError(f"{name}: cannot open ({exc})") from None
    if f is not None:
        with f:
            return _read_sndfile(f, name, size)
    src: object = str(path)
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # FFmpeg wants UTF-8 names: hand it the open file instead
        src = open(path, "rb")  # noqa: SIM115
    try:
        return _read_av(src, name, seekable=True, size=size, sndfile_says=sndfile_says)
    finally:
        if not isinstance(src, str):
            src.close()


def _load_stream(f: BinaryIO, name: str, seekable: bool,
                 on_note: Callable[[str], None] | None = None) -> Audio:
    """A file object: libsndfile first when it can seek back, else FFmpeg only (a non-seekable
    stream can be read once, and its header's frame count is not trusted)."""
    import soundfile as sf

    sndfile_says = None
    if seekable:
        start = f.tell()
        try:
            with sf.SoundFile(f) as snd:
                return _read_sndfile(snd, name, 0)
        except sf.LibsndfileError as exc:
            sndfile_says = str(exc).split(":")[-1].strip() or "unreadable"
        f.seek(start)
        return _read_av(f, name, seekable=True, size=0, sndfile_says=sndfile_says)
    # Streamed as it arrives. Until the first audio frame decodes, the bytes read are kept in
    # an unnamed temporary file: a format that must seek (an MP4 whose index is at its end)
    # fails before any audio, and is then decoded again from that copy plus the rest. Only
    # an MP4-like stream is copied whole: a stream FFmpeg does not recognise at all
    # (/dev/zero, /dev/urandom) would otherwise be copied into TMPDIR without end.
    spool = _Unseekable(f, name)
    try:
        try:
            return _read_av(spool, name, seekable=False, size=0, sndfile_says=None,
                            on_audio=spool.stop_copying, on_note=on_note)
        except AudioError as exc:
            if (not exc.seek_might_help or spool.copy is None
                    or spool.head[4:8] not in _ISO_BOXES):
                raise
            copy = spool.copy_rest()
            try:
                return _read_av(copy, name, seekable=True, size=0, sndfile_says=None)
            except AudioError:
                raise exc from None
    finally:
        spool.close()


class _Unseekable(io.RawIOBase):
    """A read-only view of a stream that says it cannot seek (so FFmpeg does not try), and
    copies what it reads into an unnamed temporary file until :meth:`stop_copying`."""

    def __init__(self, f: BinaryIO, name: str = "<stream>") -> None:
        self.f = f
        self.name = name
        self.copy = None
        self.head = b""  # the stream's first bytes (what kind of container it is)
        try:
            self.copy = tempfile.TemporaryFile(prefix="as2d-input-")
        except OSError:
            pass  # no temporary space: streamed only

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buf) -> int:
        data = self.f.read(len(buf))
        if len(self.head) < 16 and data:
            self.head += data[: 16 - len(self.head)]
        if self.copy is not None and data:
            self._keep(data)
        buf[: len(data)] = data
        return len(data)

    def _keep(self, data: bytes) -> None:
        try:
            self.copy.write(data)
        except OSError as exc:
            self.stop_copying()
            raise _Sink(self.name)._space_error(exc, len(data) // 4) from None

    def stop_copying(self) -> None:
        copy, self.copy = self.copy, None
        if copy is not None:
            copy.close()

    def copy_rest(self):
        """The temporary copy, completed with the rest of the stream, from its start."""
        while True:
            data = self.f.read(1 << 20)
            if not data:
                break
            self._keep(data)
        self.copy.flush()
        self.copy.seek(0)
        return self.copy

    def close(self) -> None:
        self.stop_copying()
        super().close()


# -- libsndfile -------------------------------------------------------------------------------
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


def _expected(frames: int, rate: int, size: int) -> int:
    """Output samples to reserve for a header's frame count, bounded by what the file's size
    can plausibly hold (a header can lie; the sink grows if the audio is really longer)."""
    if frames <= 0:
        return 0
    want = int(frames * SAMPLE_RATE / rate) + SAMPLE_RATE
    return min(want, size * 8 + SAMPLE_RATE) if size > 0 else want


def _read_sndfile(f, name: str, size: int) -> Audio:
    import soundfile as sf

    rate, channels = f.samplerate, f.channels
    if rate <= 0 or channels <= 0:
        raise AudioError(f"{name}: invalid header (rate {rate}, channels {channels})")
    _check_rate(name, rate, channels)
    try:
        short_header = _header_promises_more(f.extra_info)
    except Exception:  # pragma: no cover - extra_info is informational only
        short_header = False
    # Doubles are read as doubles: a finite value beyond float32's range must be clipped, not
    # turned into infinity by the conversion.
    dtype = "float64" if f.subtype == "DOUBLE" else "float32"
    sink = _Sink(name, _expected(f.frames, rate, size))
    pipe = _Pipeline(name, sink)
    read = 0
    damaged = None
    block_frames = max(_SALVAGE_BLOCK, min(_BLOCK, _BLOCK_VALUES // channels))
    size_now = block_frames
    try:
        while True:
            try:
                block = f.read(size_now, dtype=dtype, always_2d=True)
            except (sf.LibsndfileError, RuntimeError) as exc:
                # A damaged or cut-off stream (a failed read returns nothing): go back and
                # re-read in small steps to keep what decodes before the damage.
                if size_now > _SALVAGE_BLOCK and _seek(f, read):
                    size_now = _SALVAGE_BLOCK
                    continue
                damaged = str(exc).strip() or type(exc).__name__
                block = np.zeros((0, channels), np.float32)
            read += len(block)
            last = damaged is not None or len(block) < size_now
            pipe.push(block, rate, last=last)
            if last:
                break
    except BaseException:
        sink.discard()
        raise
    samples, tmp = sink.finish()
    if len(samples) == 0:
        if damaged is not None:
            raise AudioError(f"{name}: audio data is corrupt or truncated ({damaged})")
        raise AudioError(f"{name}: contains no audio samples")
    truncated = damaged is not None or short_header or (0 < f.frames and read < f.frames)
    return Audio(samples, source=name, source_rate=rate, source_channels=channels,
                 truncated=truncated, clipped=pipe.clipped, reader="sndfile", _tmp=tmp)


# -- FFmpeg (PyAV) ----------------------------------------------------------------------------
_INT_SCALE = {"u8": 128.0, "s16": 32768.0, "s32": 2.0**31, "s64": 2.0**63}


def _endless_note(name: str, samples: int) -> str:
    minutes = samples / SAMPLE_RATE / 60
    return (f"{name}: reading an endless stream? {STREAM_NOTE_SECONDS:g} s and "
            f"{minutes:.1f} min of audio so far, and it has not ended; it is transcribed when "
            f"it ends, or refused at {MAX_HOURS:g} h of audio (AS2D_MAX_AUDIO_HOURS). "
            "Ctrl-C stops")


def _frame_samples(frame) -> np.ndarray:
    """A decoded PyAV frame as (frames × channels) floats, whatever its sample format."""
    a = frame.to_ndarray()
    fmt = frame.format
    channels = len(frame.layout.channels) or 1
    a = a.T if fmt.is_planar else a.reshape(-1, channels)
    base = fmt.name.rstrip("p")
    if base in ("flt", "dbl"):
        return a
    if base == "u8":
        return (a.astype(np.float32) - 128.0) / 128.0
    return (a / _INT_SCALE[base]).astype(np.float32)


def _describe(stream, index: int, count: int) -> str:
    cc = stream.codec_context
    bits = [str(stream.metadata.get("language") or "").strip(),
            str(stream.metadata.get("title") or "").strip(), cc.name,
            f"{cc.channels} ch" if getattr(cc, "channels", 0) else ""]
    return f"stream {index + 1} of {count}: " + ", ".join(b for b in bits if b and b != "und")


def _seek_might_help(message: str) -> AudioError:
    exc = AudioError(message)
    exc.seek_might_help = True
    return exc


def _read_av(src, name: str, seekable: bool, size: int, sndfile_says: str | None,
             on_audio: Callable[[], None] | None = None,
             on_note: Callable[[str], None] | None = None) -> Audio:
    try:
        import av
    except ImportError:  # pragma: no cover - av is a dependency
        raise AudioError(f"{name}: not a supported audio file ({sndfile_says}); install "
                         "PyAV (pip install av) for m4a, opus, video and other formats") from None
    try:
        container = av.open(src, mode="r", metadata_errors="ignore")
    except (av.FFmpegError, UnicodeError, OSError) as exc:
        detail = (getattr(exc, "strerror", None) or str(exc)).split(":")[0].strip()
        raise _seek_might_help(f"{name}: not a supported audio file "
                               f"({detail or 'unreadable'}); as2d reads what FFmpeg or "
                               "libsndfile reads") from None
    with container:
        streams = list(container.streams.audio)
        if not streams:
            has_video = bool(container.streams.video)
            raise AudioError(f"{name}: no audio stream in this file"
                             + (" (it has only video)" if has_video else ""))
        stream = streams[0]
        cc = stream.codec_context
        rate = cc.sample_rate or 0
        channels = getattr(cc, "channels", 0) or 0
        if rate:
            _check_rate(name, rate, max(1, channels))
        expected = 0
        if seekable and container.duration:
            expected = int(container.duration / 1e6 * SAMPLE_RATE) + SAMPLE_RATE
            expected = min(expected, size * 8 + SAMPLE_RATE) if size else expected
        sink = _Sink(name, expected)
        pipe = _Pipeline(name, sink)
        damaged = None
        bad_packets = 0
        pending: list[np.ndarray] = []
        pending_n = 0
        first_rate = rate

        def drain(last: bool = False) -> None:
            nonlocal pending, pending_n
            if pending:
                pipe.push(np.concatenate(pending) if len(pending) > 1 else pending[0],
                          cur_rate, last=last)
            pending, pending_n = [], 0

        cur_rate = rate
        cur_channels = 0
        note_at = None if seekable or on_note is None else time.monotonic() + STREAM_NOTE_SECONDS
        try:
            try:
                for packet in container.demux(stream):
                    if note_at is not None and time.monotonic() > note_at:
                        note_at = None
                        on_note(_endless_note(name, sink.n))
                    try:
                        frames = packet.decode()
                    except (av.FFmpegError, ValueError):
                        bad_packets += 1  # a damaged packet: skipped, as ffmpeg does
                        continue
                    for frame in frames:
                        if on_audio is not None:
                            on_audio()
                            on_audio = None
                        block = _frame_samples(frame)
                        if frame.sample_rate != cur_rate or block.shape[1] != cur_channels:
                            drain()
                            cur_rate, cur_channels = frame.sample_rate, block.shape[1]
                            first_rate = first_rate or cur_rate
                        pending.append(block)
                        pending_n += len(block)
                        if pending_n >= _BLOCK:
                            drain()
            except (av.FFmpegError, OSError) as exc:
                damaged = str(exc).strip() or type(exc).__name__
            drain(last=True)
            pipe.flush()
        except BaseException:
            sink.discard()
            raise
        samples, tmp = sink.finish()
        if len(samples) == 0:
            if damaged is not None or bad_packets:
                raise _seek_might_help(f"{name}: audio data is corrupt or truncated "
                                       f"({damaged or f'{bad_packets} undecodable packets'})")
            raise AudioError(f"{name}: contains no audio samples")
        return Audio(samples, source=name, source_rate=first_rate or SAMPLE_RATE,
                     source_channels=channels or cur_channels or 1,
                     truncated=damaged is not None or bad_packets > 0,
                     clipped=pipe.clipped,
                     stream=_describe(stream, 0, len(streams)) if len(streams) > 1 else None,
                     streams=len(streams), reader="ffmpeg", _tmp=tmp)


__all__ = ["SAMPLE_RATE", "Audio", "AudioError", "display_name", "load_audio", "resample"]
