"""The files a :class:`~as2d.runtime.transcribe.longform.LongFormTranscriber` will transcribe next.

Told the next recording (``prefetch``), the transcriber computes its log-mel at once, in the
caller's thread, and hands it to the decoder, whose drafter starts on it when done with the
current file; in the current run's last window the next file's first window is encoded. A
prefetch made between runs is held until the next run has begun, so the decoder learns what
comes *after* the file it works on. :class:`AudioReader` decodes a list of files on a
background thread, each while the one before it is transcribed, and prefetches it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from as2d.runtime.audio import Audio
from as2d.runtime.sessions import Background
from as2d.runtime.transcribe.runner import AheadEncoding
from as2d.runtime.transcribe.strategy import DecodeStrategy
from as2d.runtime.whisper.features import LogMel


@dataclass
class _Upcoming:
    audio: Audio
    mel: LogMel
    language: str | None
    options: object
    handed: bool = False  # given to the decoder
    encoding: AheadEncoding | None = None  # its first window's encoder run, started ahead
    asked: bool = False  # encode_next was asked for it (once)


class Lookahead:
    """Prefetched recordings in the order they will be transcribed, with their log-mels."""

    def __init__(self, strategy: DecodeStrategy, n_mels: int) -> None:
        self.strategy = strategy
        self.n_mels = n_mels
        self._upcoming: list[_Upcoming] = []
        self._running = False
        self._lock = threading.Lock()

    def add(self, audio: Audio, language: str | None, options) -> None:
        mel = LogMel(audio, self.n_mels)  # outside the lock: the slow part
        with self._lock:
            item = _Upcoming(audio, mel, language, options)
            self._upcoming.append(item)
            if self._running:
                self._hand(item)

    def run_started(self, audio: Audio) -> tuple[LogMel | None, AheadEncoding | None]:
        """A run of ``audio`` begins: its prefetched log-mel and first-window encoding, if
        any (earlier prefetches that were not transcribed are forgotten)."""
        with self._lock:
            for i, item in enumerate(self._upcoming):
                if item.audio is audio:
                    skipped = self._upcoming[:i]
                    del self._upcoming[: i + 1]
                    break
            else:
                return None, None
        for other in skipped:  # never to be transcribed: their encoder runs end here
            if other.encoding is not None:
                other.encoding.abandon()
        return item.mel, item.encoding

    def encode_next(self, start: Callable[[Audio, LogMel, object], AheadEncoding | None]
                    ) -> None:
        """The current run is in its last window: start the next recording's first encoder
        run (``start(audio, mel, options)``), so that it overlaps this one's decoding instead
        of following it."""
        with self._lock:
            item = self._upcoming[0] if self._upcoming else None
            if item is None or item.asked:
                return
            item.asked = True
        encoding = start(item.audio, item.mel, item.options)
        with self._lock:
            item.encoding = encoding

    def abandon(self) -> None:
        """Stop the encoder runs started ahead and wait for them (the transcriber is closing,
        or a run ended early: an encoder thread inside onnxruntime at exit aborts the
        process). Their recordings, if transcribed after all, are encoded in their run."""
        with self._lock:
            items = [item for item in self._upcoming if item.encoding is not None]
        for item in items:
            item.encoding.stop()
        for item in items:
            item.encoding.wait()
            with self._lock:
                item.encoding, item.asked = None, False

    def run_begun(self) -> None:
        """The decoder knows the current run: tell it what comes after."""
        with self._lock:
            self._running = True
            for item in self._upcoming:
                self._hand(item)

    def run_ended(self) -> None:
        with self._lock:
            self._running = False

    def _hand(self, item: _Upcoming) -> None:
        if not item.handed:
            item.handed = True
            self.strategy.prefetch(item.mel, item.language, item.options)


class AudioReader:
    """Decodes a list of files one ahead of their use, each on a background thread.

    :meth:`take` ``(i)`` returns file ``i`` (or raises its :class:`AudioError`) and starts
    decoding file ``i + 1``, which then overlaps the transcription of file ``i``; ``ready`` is
    called with each file decoded ahead (``LongFormTranscriber.prefetch``, which adds its log-mel
    and the drafter's head start). File 0 starts at once: it overlaps the loading of the models.
    """

    def __init__(self, paths: list, load: Callable[[object], Audio],
                 ready: Callable[[Audio], None] | None = None) -> None:
        self.paths = list(paths)
        self.load = load
        self.ready = ready
        self._pending: dict[int, Background] = {}
        self._start(0)

    def _start(self, i: int) -> None:
        if i < len(self.paths) and i not in self._pending:
            self._pending[i] = Background(self._load, i)

    def _load(self, i: int) -> Audio:
        audio = self.load(self.paths[i])
        ready = self.ready
        if i > 0 and ready is not None:
            try:
                ready(audio)
            except Exception:  # only a head start is lost: the run computes it again
                pass
        return audio

    def take(self, i: int) -> Audio:
        self._start(i)
        pending = self._pending.pop(i)
        self._start(i + 1)
        return pending.result()

    def close(self) -> None:
        """Close the files decoded ahead and not taken (a temporary memmap each, for long
        audio); one still decoding is left to its daemon thread, which no longer hands it on
        (the decoder it would prefetch into is being closed)."""
        self.ready = None
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if p.done():
                try:
                    p.result().close()
                except Exception:
                    pass
