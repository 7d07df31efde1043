"""How one window is decoded: target-only, classic speculative decoding, or AS²D.

Every strategy drives the same :class:`~as2d.runtime.transcribe.window.WindowDecoder`, which commits exactly
what target-only greedy decoding commits. They differ only in where candidate tokens come from
and in what runs concurrently.
"""

from __future__ import annotations

import threading
import time

from as2d.runtime.transcribe.window import DecodingResult, WindowDecoder
from as2d.runtime.events import Encoded, Listener, Verified, WindowStarted, ignore
from as2d.runtime.whisper.features import FRAMES_PER_SECOND, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import AudioContext, WhisperModel


class Strategy:
    """Base: encode the window with the target, decode it with candidates from ``propose``."""

    name = "target"
    drafter_name: str | None = None

    def __init__(self, target: WhisperModel, listener: Listener | None = None) -> None:
        self.target = target
        self.emit = listener or ignore
        self.last_encode_seconds = 0.0
        self._ctx: AudioContext | None = None
        self._decoder: WindowDecoder | None = None
        self._pre: tuple | None = None

    def preencoded(self, seek: int, size: int, ctx: AudioContext, seconds: float) -> None:
        """An encoding of window (seek, size) already made (for language detection)."""
        self._pre = (seek, size, ctx, seconds)

    def threads(self) -> dict:
        return {"target": self.target.threads}

    def start_early(self, mel: LogMel, language: str | None, options) -> None:
        """Called before the target detects the language (``language`` is None until then):
        work that does not wait for the language may start here. :meth:`end` follows
        whatever happens next."""

    def begin(self, mel: LogMel, language: str | None, options) -> None:
        self.mel = mel

    def end(self) -> None:
        self._ctx = None

    def close(self) -> None:
        """Release worker threads and sessions (end of the process's use)."""

    def partial(self) -> DecodingResult | None:
        return self._decoder.result() if self._decoder is not None else None

    def encode(self, window: int, mel: LogMel, seek: int, size: int,
               run_options=None) -> AudioContext:
        pre, self._pre = self._pre, None
        if pre is not None and pre[:2] == (seek, size):
            ctx, self.last_encode_seconds = pre[2], pre[3]
            self.emit(Encoded(window, self.last_encode_seconds, ctx.n_frames))
            return ctx
        t0 = time.perf_counter()
        ctx = self.target.encode(mel.window(seek, size), run_options)
        self.last_encode_seconds = time.perf_counter() - t0
        self.emit(Encoded(window, self.last_encode_seconds, ctx.n_frames))
        return ctx

    def decode_window(self, window: int, mel: LogMel, seek: int, size: int, prompt: list[int],
                      rules: LogitRules, sample_len: int, stop: threading.Event,
                      reuse_encoding: bool = False, run_options=None) -> DecodingResult | None:
        self.emit(WindowStarted(window, seek / FRAMES_PER_SECOND,
                                (seek + size) / FRAMES_PER_SECOND))
        self._decoder = None  # nothing of this window committed yet
        if not (reuse_encoding and self._ctx is not None):
            try:
                self._ctx = self.encode(window, mel, seek, size, run_options)
            except Exception:
                if stop.is_set():  # the encoder run was terminated by a stop
                    return None
                raise
        else:
            self.last_encode_seconds = 0.0
        state = self.target.decoder_state(self._ctx)
        tk = self.target.tokenizer
        dec = WindowDecoder(state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot)
        self._decoder = dec
        # Decode time is the wall time of everything after the target's encoder: serial
        # drafting (SD) and scheduling count, concurrent drafting (AS²D) only as it slows this.
        t0 = time.perf_counter()
        try:
            self.window_begin(window, dec, seek, size)
            first = dec.start()
            self._report(window, [], first)
            while not dec.done:
                if stop.is_set():
                    return None
                cands = self.propose(dec)
                step = dec.step(cands, self.pass_threads(cands))
                self._report(window, cands, step)
            result = dec.result()
            result.seconds = time.perf_counter() - t0
            self._decoder = None  # complete: nothing partial to recover from this window
            return result
        finally:
            self.window_end(window, dec)
            self.target.release(state)

    # -- hooks for speculative strategies -----------------------------------------------------
    def window_begin(self, window: int, dec: WindowDecoder, seek: int, size: int) -> None:
        pass

    def propose(self, dec: WindowDecoder) -> list[int]:
        return []

    def pass_threads(self, candidates: list[int]) -> int | None:
        """Threads for the next target pass (None: the target's own setting)."""
        return None

    def observe(self, dec: WindowDecoder, offered: list[int], step) -> None:
        pass

    def window_end(self, window: int, dec: WindowDecoder) -> None:
        pass

    def _report(self, window: int, offered: list[int], step) -> None:
        self.observe(self._decoder, offered, step)
        if self.emit is ignore:
            return  # nobody listens: skip decoding the texts
        tk = self.target.tokenizer
        acc = step.committed[: step.accepted]
        own = step.committed[step.accepted:]
        self.emit(Verified(window, step.offered, step.accepted, tuple(step.committed),
                           tk.decode(acc), tk.decode(own),
                           tk.decode(offered[step.accepted: step.offered]), step.seconds))


class TargetOnly(Strategy):
    """Plain greedy decoding with the target model alone: the reference output."""

    name = "target"
