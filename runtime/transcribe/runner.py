"""One run's window loop body: encode a window once, decode it, report every pass.

:class:`WindowRunner` serves every decoder and search: the target's encoder, one loop over a
window task's passes (:mod:`.window_task`), one stats record per decode, the events. It keeps
one encoding, keyed by its window, so that language detection and a repetition retry do not
pay for a second encoder run (most of the time on short clips).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

from as2d.runtime.events import (
    Encoded,
    LanguageDetected,
    Listener,
    Verified,
    WindowStarted,
    WindowStats,
    ignore,
)
from as2d.runtime.sessions import Background
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.strategy import Window
from as2d.runtime.transcribe.window import DecodingResult
from as2d.runtime.transcribe.window_task import Open, WindowDecode
from as2d.runtime.whisper.features import N_FRAMES, LogMel
from as2d.runtime.whisper.model import AudioContext, WhisperModel, detect_language


def _no_turn(mel: LogMel, window: Window) -> AbstractContextManager:
    return nullcontext()


def encode(model: WhisperModel, mel: LogMel, window: Window,
           turn: Callable[[LogMel, Window], AbstractContextManager], run_options
           ) -> tuple[AudioContext, float]:
    """The target's encoding of ``window`` (holding ``turn`` around the encoder run) and the
    seconds it took; ``run_options`` lets a stop abandon it."""
    t0 = time.perf_counter()
    with turn(mel, window):
        ctx = model.encode(mel.window(window.seek, window.size), run_options)
    return ctx, time.perf_counter() - t0


class AheadEncoding:
    """A target encoder run started ahead of its use, on a thread of its own, with its own stop
    flag (the run that started it may end before the run that uses it begins)."""

    def __init__(self, model: WhisperModel, mel: LogMel, window: Window,
                 turn: Callable[[LogMel, Window], AbstractContextManager] | None = None) -> None:
        import onnxruntime as ort

        self.key = (window.seek, window.size)
        self.run_options = ort.RunOptions()
        self._work = Background(encode, model, mel, window, turn or _no_turn, self.run_options,
                                name="as2d-encode")

    def result(self) -> tuple[AudioContext, float]:
        """``(AudioContext, encoder seconds)``, waited for; raises what the run raised."""
        return self._work.result()

    def stop(self) -> None:
        """Abandon the run (onnxruntime's terminate flag): it ends within one operator."""
        self.run_options.terminate = True

    def wait(self) -> None:
        """Wait for the thread to end (one inside onnxruntime at exit aborts the process)."""
        try:
            self._work.result()
        except Exception:  # noqa: BLE001 - abandoned or failed: nobody needs it any more
            pass

    def abandon(self) -> None:
        self.stop()
        self.wait()


class WindowRunner:
    """Encodes and decodes the windows of one run with one target model."""

    def __init__(self, model: WhisperModel, listener: Listener | None = None,
                 run_options=None, audio_source: str = "",
                 encoding_turn: Callable[[LogMel, Window], AbstractContextManager] | None = None
                 ) -> None:
        self.model = model
        # Held around every target encoder run (AS²D: a drafter that is ahead waits).
        self.encoding_turn = encoding_turn or _no_turn
        self.audio_source = audio_source  # named in every window's record
        self.emit = listener or ignore
        self.run_options = run_options  # its terminate flag abandons an encoder run
        # (seek, size) → the encoding and the encoder seconds not yet charged to a window.
        self._encoding: tuple[tuple[int, int], AudioContext, float] | None = None
        # A window being encoded on a thread of its own (see adopt).
        self._pending: AheadEncoding | None = None
        # Called once, after the next window's encoder run (work that should not compete with
        # the encoder but may overlap the decoding).
        self.after_encode: Callable[[], None] | None = None
        self._task: WindowDecode | None = None
        # The last window whose language was detected: ((seek, size), (language, probability)).
        self._detected: tuple[tuple[int, int], tuple[str, float]] | None = None

    def detect_language(self, mel: LogMel, window: Window | None = None) -> tuple[str, float]:
        """Most probable language of ``window`` (default: the first); the encoding is kept
        for its decode, and a window already detected is not detected again."""
        window = window or Window(0, 0, min(N_FRAMES, mel.n_frames))
        key = (window.seek, window.size)
        if self._detected is not None and self._detected[0] == key:
            return self._detected[1]
        self._keep(window, mel)
        found = detect_language(self.model, self._encoding[1])
        last = self._detected[1][0] if self._detected is not None else None
        # Said once per language change: a multilingual run detects every window.
        self.emit(LanguageDetected(*found, at=window.start,
                                   level="info" if found[0] != last else "debug"))
        self._detected = (key, found)
        return found

    def adopt(self, encoding: AheadEncoding) -> None:
        """Use ``encoding`` (started ahead) for the window it encodes."""
        self._pending = encoding
        if self.run_options is not None and self.run_options.terminate:
            encoding.stop()  # the run was stopped already

    def stop(self) -> None:
        """A stop: an encoding started ahead is abandoned too."""
        pending = self._pending
        if pending is not None:
            pending.stop()

    def close(self) -> None:
        """The run is over: an encoding started ahead and never taken is waited for."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.abandon()

    def _take_pending(self, window: Window) -> tuple[AudioContext | None, float]:
        """The encoding started ahead, if it is ``window``'s (waited for; one that failed is
        done again by the caller); one for another window is abandoned."""
        pending = self._pending
        if pending is None:
            return None, 0.0
        if pending.key != (window.seek, window.size):
            self._pending = None
            pending.abandon()
            return None, 0.0
        try:
            # Still in ``_pending`` while waited for, so that a stop() now abandons it.
            return pending.result()
        except Exception:  # noqa: BLE001 - encoded again in this thread
            return None, 0.0
        finally:
            self._pending = None

    def _keep(self, window: Window, mel: LogMel) -> None:
        """Keep ``window``'s encoding: the one kept, the one started ahead, or a new one."""
        key = (window.seek, window.size)
        if self._encoding is not None and self._encoding[0] == key:
            return
        ctx, seconds = self._take_pending(window)
        if ctx is None:
            self._encoding = None  # the previous window's encoding is no longer needed
            ctx, seconds = encode(self.model, mel, window, self.encoding_turn, self.run_options)
        self._encoding = (key, ctx, seconds)

    def encode(self, window: Window, mel: LogMel) -> tuple[AudioContext, float]:
        """The target's encoding of ``window`` and the encoder seconds to charge to it (to the
        first decode that uses it only)."""
        self._keep(window, mel)
        key, ctx, seconds = self._encoding
        if seconds:
            self.emit(Encoded(window.index, seconds, ctx.n_frames))
        self._encoding = (key, ctx, 0.0)
        return ctx, seconds

    def encoding(self, window: Window, mel: LogMel | None = None) -> AudioContext:
        """The kept encoding of ``window``, encoded again from ``mel`` if it was replaced."""
        if self._encoding is not None and self._encoding[0] == (window.seek, window.size):
            return self._encoding[1]
        if mel is None:
            raise ValueError(f"window {window.index} is not encoded")
        return self.encode(window, mel)[0]

    def _begin(self, window: Window, mel: LogMel, stop: threading.Event
               ) -> tuple[AudioContext, float] | None:
        """Announce the window, take its encoding (None when a stop ended the encoder run) and
        run the one-shot ``after_encode`` hook (a head start for the next file)."""
        self.emit(WindowStarted(window.index, window.start, window.end))
        self._task = None  # nothing of this window committed yet
        try:
            encoded = self.encode(window, mel)
        except Exception:
            if stop.is_set():  # the encoder run was terminated by a stop
                return None
            raise
        hook, self.after_encode = self.after_encode, None
        if hook is not None:
            try:
                hook()
            except Exception:  # noqa: BLE001 - only a head start for the next file is lost
                pass
        return encoded

    def decode(self, window: Window, mel: LogMel, task: Open, stop: threading.Event,
               retried: bool = False) -> list[tuple[DecodingResult, WindowStats]] | None:
        """Decode ``window`` with ``task``: each of its decodes' result and record. None when
        ``stop`` was set first (then :meth:`partial` has what the task kept so far)."""
        encoded = self._begin(window, mel, stop)
        if encoded is None:
            return None
        ctx, encode_seconds = encoded
        # Decode time is the wall time of everything after the target's encoder: serial
        # drafting (SD) and scheduling count, concurrent drafting (AS²D) only as it slows this.
        t0 = time.perf_counter()
        report = None if self.emit is ignore else functools.partial(self._report, window.index)
        dec = task(self.model, ctx, report)
        self._task = dec
        try:
            dec.start()
            while not dec.done:
                if stop.is_set():
                    return None
                dec.step()
            seconds = time.perf_counter() - t0
        finally:
            dec.close()
        self._task = None  # complete: nothing partial to recover from this window
        return [(r, WindowStats(window.index, window.start, window.end,
                                len(r.tokens) + int(r.completed), r.counts.passes,
                                r.counts.offered, r.counts.accepted, r.counts.alone,
                                encode_seconds, seconds, retried, self.audio_source, dec.steps))
                for r in dec.results()]

    def partial(self) -> DecodingResult | None:
        """What the window a stop interrupted had committed (None: no window was under way)."""
        return self._task.result() if self._task is not None else None

    def _report(self, window: int, offered: Sequence[int], verdict: Verdict,
                texts: Verdict | None) -> None:
        """One pass as a Verified event (only where somebody listens)."""
        tk = self.model.tokenizer
        shown = texts or verdict  # whose tokens the texts are
        acc = shown.committed[: shown.accepted]
        own = shown.committed[shown.accepted:]
        self.emit(Verified(window, verdict.offered, verdict.accepted, tuple(verdict.committed),
                           tk.decode(acc), tk.decode(own),
                           tk.decode(list(offered[shown.accepted: shown.offered])),
                           verdict.seconds))
