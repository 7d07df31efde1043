"""Where live audio comes from: a microphone (sounddevice) or a file played at a set pace.

Both hand 16 kHz mono float32 :class:`Chunk` s through a bounded queue to the session's
listening thread, stamped with the wall time at which their last sample was captured, so that
latency can be measured from the moment the speaker stopped.

The microphone's audio callback runs on PortAudio's thread and must never wait: it only copies
the block into the queue (dropping it, and counting the drop, if the queue is full because the
consumer stalled). Resampling to 16 kHz happens on the consumer's side. A device that stops
delivering (unplugged) is noticed after ``stall_timeout`` seconds without audio and raised as
:class:`AudioInputError`.

The file source plays decoded audio into the same queue at ``speed`` × real time (blocking,
never dropping: a file has no deadline), so tests, demos and benchmarks run the very pipeline a
microphone does.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from as2d.runtime.audio import SAMPLE_RATE, Audio
from as2d.runtime.option_errors import OptionError


class AudioInputError(Exception):
    """The audio input cannot be opened or failed while running (one-line message)."""


@dataclass
class Chunk:
    samples: np.ndarray  # 16 kHz mono float32
    wall: float  # perf_counter() when its last sample was captured


class AudioSource:
    """A started source yields chunks from :meth:`read` until it ends (``None`` on timeout)."""

    name = "audio"
    rate = SAMPLE_RATE  # the native rate of the input
    speed: float | None = None  # file pace (None: live input)
    _q: queue.Queue | None = None  # captured blocks not yet read (a source with a queue)
    _block_seconds = 0.0

    def start(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def read(self, timeout: float) -> Chunk | None:
        """The next chunk, ``None`` if none came within ``timeout``; raises EOFError at the end
        and :class:`AudioInputError` when the input failed."""
        raise NotImplementedError  # pragma: no cover - interface

    def stop(self) -> None:
        """Stop capturing; what was captured can still be read, then EOFError."""

    @property
    def dropped_seconds(self) -> float:
        return 0.0

    @property
    def queued_seconds(self) -> float:
        """Audio captured but not yet read by the session (the input queue's depth)."""
        return self._q.qsize() * self._block_seconds if self._q is not None else 0.0


_END = object()


class FileSource(AudioSource):
    """Plays ``audio`` as if it were a microphone, at ``speed`` × real time (0: no pacing)."""

    def __init__(self, audio: Audio, speed: float = 1.0, block: int = 512,
                 queue_seconds: float = 10.0) -> None:
        if speed < 0:
            raise OptionError("speed", "cannot be negative")
        self.audio = audio
        self.name = audio.source
        self.rate = audio.source_rate
        self.speed = speed
        self.block = block
        self._block_seconds = block / SAMPLE_RATE
        self._q: queue.Queue = queue.Queue(maxsize=max(4, int(queue_seconds * SAMPLE_RATE
                                                              / block)))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="as2d-file-source",
                                        daemon=True)
        self.started_at = 0.0

    def start(self) -> None:
        self.started_at = time.perf_counter()
        self._thread.start()

    def _play(self) -> None:
        x = self.audio.samples
        n, b = len(x), self.block
        t0 = self.started_at
        try:
            for i in range(0, n, b):
                if self._stop.is_set():
                    break
                end = min(n, i + b)
                if self.speed > 0:
                    due = t0 + end / SAMPLE_RATE / self.speed
                    delay = due - time.perf_counter()
                    if delay > 0:
                        if self._stop.wait(delay):
                            break
                chunk = Chunk(np.array(x[i:end], dtype=np.float32), time.perf_counter())
                while not self._stop.is_set():
                    try:
                        self._q.put(chunk, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        finally:
            self._put_end()

    def _put_end(self) -> None:
        while True:
            try:
                self._q.put(_END, timeout=0.1)
                return
            except queue.Full:
                try:  # stopping: make room (the reader has gone)
                    self._q.get_nowait()
                except queue.Empty:
                    pass

    def read(self, timeout: float) -> Chunk | None:
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self._q.put(_END)  # stay ended for later reads
            raise EOFError
        return item

    def stop(self) -> None:
        self._stop.set()


def import_sounddevice():
    """The sounddevice module, or an AudioInputError that says what is missing."""
    try:
        import sounddevice as sd
    except OSError as exc:  # sounddevice raises OSError when libportaudio cannot be loaded
        raise AudioInputError(f"cannot use the microphone: the PortAudio library is missing "
                              f"({exc}); install it (Debian/Ubuntu: apt install libportaudio2) "
                              "or transcribe a file with --input FILE") from None
    except ImportError as exc:
        raise AudioInputError(f"cannot use the microphone: the sounddevice package is not "
                              f"installed ({exc}); pip install sounddevice") from None
    return sd


@dataclass(frozen=True)
class InputDevice:
    index: int
    name: str
    hostapi: str
    channels: int
    default_rate: float
    default: bool


def list_input_devices() -> list[InputDevice]:
    """Every device that can record, as PortAudio sees it (raises AudioInputError)."""
    sd = import_sounddevice()
    try:
        devices = sd.query_devices()
        apis = sd.query_hostapis()
        default_in = sd.default.device[0] if sd.default.device else -1
    except Exception as exc:  # sd.PortAudioError
        raise AudioInputError(f"cannot list audio devices ({exc})") from None
    out = []
    for i, d in enumerate(devices):
        if d.get("max_input_channels", 0) > 0:
            api = apis[d["hostapi"]]["name"] if 0 <= d.get("hostapi", -1) < len(apis) else "?"
            out.append(InputDevice(i, d["name"], api, int(d["max_input_channels"]),
                                   float(d["default_samplerate"]), i == default_in))
    return out


class MicSource(AudioSource):
    """Records from a sounddevice input device (default: the system's default input)."""

    def __init__(self, device: str | int | None = None, block_seconds: float = 0.032,
                 queue_seconds: float = 30.0, stall_timeout: float = 2.0) -> None:
        self.sd = import_sounddevice()
        self.device = _parse_device(device)
        self.stall_timeout = stall_timeout
        self.info = self._resolve()
        self.name = f"microphone: {self.info['name']}"
        self.rate = self._pick_rate()
        self.block = max(64, int(round(self.rate * block_seconds)))
        self._block_seconds = self.block / self.rate
        self._q: queue.Queue = queue.Queue(maxsize=max(8, int(queue_seconds / block_seconds)))
        self._dropped = 0  # samples lost to a full queue
        self._finished = threading.Event()
        self._stopping = False
        self._stream = None
        self._resampler = None
        self._last = 0.0
        if self.rate != SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate, SAMPLE_RATE, 1, dtype="float32",
                                                  quality="HQ")

    def _resolve(self) -> dict:
        sd = self.sd
        try:
            info = sd.query_devices(self.device, kind="input")
        except ValueError as exc:  # no such device / no default input
            if self.device is None:
                raise AudioInputError("no audio input device found (is a microphone "
                                      "connected?); list them with `as2d mic --list-devices`, "
                                      "or transcribe a file with --input FILE") from None
            raise AudioInputError(f"no input device {self.device!r} ({exc}); list them with "
                                  "`as2d mic --list-devices`") from None
        except Exception as exc:  # sd.PortAudioError: with no default input, "device -1"
            if self.device is None:
                raise AudioInputError(f"no audio input device found ({exc}; is a microphone "
                                      "connected?); list them with `as2d mic --list-devices`,"
                                      " or transcribe a file with --input FILE") from None
            raise AudioInputError(f"cannot open the audio input {self.device!r} ({exc})") \
                from None
        if int(info.get("max_input_channels", 0)) < 1:
            raise AudioInputError(f"device {info.get('name', self.device)!r} cannot record "
                                  "(no input channels); see `as2d mic --list-devices`")
        return dict(info)

    def _pick_rate(self) -> int:
        """16 kHz when the device takes it (no resampling), else its own default rate."""
        sd = self.sd
        dev = self.device if self.device is not None else self.info.get("index")
        for rate in (SAMPLE_RATE, int(self.info.get("default_samplerate") or 0), 48000, 44100):
            if rate <= 0:
                continue
            try:
                sd.check_input_settings(device=dev, channels=1, dtype="float32",
                                        samplerate=rate)
                return rate
            except Exception:
                continue
        raise AudioInputError(f"device {self.info.get('name')!r} accepts none of the usual "
                              "sample rates in mono float32")

    # -- PortAudio's thread: copy and go --------------------------------------------------------
    def _callback(self, indata, frames, time_info, status) -> None:
        try:
            self._q.put_nowait(Chunk(indata[:, 0].copy(), time.perf_counter()))
        except queue.Full:
            self._dropped += frames

    def _on_finished(self) -> None:
        self._finished.set()

    # -- the consumer ---------------------------------------------------------------------------
    def start(self) -> None:
        sd = self.sd
        try:
            self._stream = sd.InputStream(
                device=self.device, channels=1, samplerate=self.rate, dtype="float32",
                blocksize=self.block, callback=self._callback,
                finished_callback=self._on_finished)
            self._stream.start()
        except Exception as exc:  # sd.PortAudioError and friends
            raise AudioInputError(f"cannot start recording from {self.info.get('name')!r} "
                                  f"({exc})") from None
        self._last = time.perf_counter()

    def read(self, timeout: float) -> Chunk | None:
        try:
            chunk = self._q.get(timeout=timeout)
        except queue.Empty:
            if self._stopping:
                raise EOFError from None
            now = time.perf_counter()
            if self._finished.is_set() or now - self._last > self.stall_timeout:
                raise AudioInputError(
                    f"the audio input {self.info.get('name')!r} stopped delivering sound "
                    f"(disconnected?)") from None
            return None
        self._last = time.perf_counter()
        if self._resampler is not None:
            x = self._resampler.resample_chunk(chunk.samples)
            chunk = Chunk(np.asarray(x, dtype=np.float32), chunk.wall)
        return chunk

    def stop(self) -> None:
        self._stopping = True
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except Exception:  # the device may already be gone
                pass

    @property
    def dropped_seconds(self) -> float:
        return self._dropped / self.rate


def _parse_device(device: str | int | None) -> str | int | None:
    """``--device 3`` is an index, anything else a (sub)string of the name, as sounddevice
    takes it."""
    if device is None or isinstance(device, int):
        return device
    text = str(device).strip()
    if not text:
        return None
    return int(text) if text.isdigit() else text


class PushSource(AudioSource):
    """Audio pushed in by someone else (a server's socket): 16-bit or float samples at
    ``rate`` Hz, mono, in blocks of any size, as they arrive.

    :meth:`push` never waits: a block that finds the queue full is dropped and counted (the
    session then says it fell behind), as a microphone's callback would. :meth:`end` says no
    more audio will come; the session finishes the utterance in progress and ends. Resampling
    to 16 kHz happens on the reading side, as for the microphone.
    """

    def __init__(self, rate: int = SAMPLE_RATE, name: str = "stream",
                 queue_seconds: float = 30.0, block_seconds: float = 0.02) -> None:
        if rate <= 0:
            raise ValueError(f"sample rate must be positive, not {rate}")
        self.name = name
        self.rate = int(rate)
        self._block_seconds = block_seconds  # a typical block (for queued_seconds)
        self._q: queue.Queue = queue.Queue(maxsize=max(8, int(queue_seconds / block_seconds)))
        # Audio waiting to be read, in samples at ``rate``: bounded whatever the block sizes.
        self._most = int(queue_seconds * self.rate)
        self._queued = 0
        self._lock = threading.Lock()
        self._dropped = 0  # samples lost to a full queue
        self._ended = threading.Event()
        self._resampler = None
        if self.rate != SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate, SAMPLE_RATE, 1, dtype="float32",
                                                  quality="HQ")

    def start(self) -> None:
        pass

    def push(self, samples: np.ndarray) -> bool:
        """Queue a block (int16 PCM or float in [-1, 1]); False if it was dropped or the
        source has ended."""
        if self._ended.is_set():
            return False
        x = np.asarray(samples)
        if x.dtype == np.int16:
            x = x.astype(np.float32) / 32768.0
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        if not len(x):
            return True
        with self._lock:
            if self._queued + len(x) > self._most:
                self._dropped += len(x)
                return False
            try:
                self._q.put_nowait(Chunk(x, time.perf_counter()))
            except queue.Full:
                self._dropped += len(x)
                return False
            self._queued += len(x)
        return True

    def end(self) -> None:
        """No more audio: what was pushed is read, then EOFError."""
        if self._ended.is_set():
            return
        self._ended.set()
        while True:
            try:
                self._q.put(_END, timeout=0.1)
                return
            except queue.Full:  # the reader has gone: make room for the end mark
                try:
                    self._q.get_nowait()
                except queue.Empty:
                    pass

    def read(self, timeout: float) -> Chunk | None:
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self._q.put(_END)  # stay ended for later reads
            raise EOFError
        with self._lock:
            self._queued -= len(item.samples)
        if self._resampler is not None:
            x = self._resampler.resample_chunk(item.samples)
            item = Chunk(np.asarray(x, dtype=np.float32), item.wall)
        return item

    def stop(self) -> None:
        self.end()

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    @property
    def queued_seconds(self) -> float:
        return max(0, self._queued) / self.rate

    @property
    def dropped_seconds(self) -> float:
        return self._dropped / self.rate
