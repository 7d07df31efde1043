"""One run's window loop body: encode a window once, decode it, report every pass.

:class:`WindowRunner` is shared by every decoder: the target's encoder, the
:class:`~as2d.runtime.transcribe.window.WindowState`, the one candidate loop
(:func:`~as2d.runtime.speculative.candidates.run`) and the events. A decoder contributes only the
window's :class:`~as2d.runtime.speculative.candidates.CandidateSource`.

It keeps one encoding, keyed by the window it encodes: language detection encodes the first
window and a repetition retry decodes a window again, and neither should pay for a second
encoder run (the encoder is most of the time on short clips).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import numpy as np

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
from as2d.runtime.speculative import candidates
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.beam import BeamOptions, BeamWindow
from as2d.runtime.transcribe.samples import Sample, SampleBatch
from as2d.runtime.transcribe.strategy import Window
from as2d.runtime.transcribe.stream_source import StreamProposer
from as2d.runtime.transcribe.window import DecodingResult, WindowState
from as2d.runtime.whisper.features import N_FRAMES, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import AudioContext, WhisperModel

# Speculative beam search: candidates per hypothesis in the first pass, and at most.
BEAM_BUDGET, MAX_BEAM_BUDGET = 3, 8


class AheadEncoding:
    """A target encoder run started ahead of its use, on a thread of its own, with its own stop
    flag (the run that started it may end before the run that uses it begins)."""

    def __init__(self, model: WhisperModel, mel: LogMel, window: Window,
                 turn: Callable[[LogMel, Window], AbstractContextManager] | None = None) -> None:
        import onnxruntime as ort

        self.key = (window.seek, window.size)
        self.run_options = ort.RunOptions()
        turn = turn or (lambda mel, window: nullcontext())

        def run() -> tuple[AudioContext, float]:
            t0 = time.perf_counter()
            with turn(mel, window):
                ctx = model.encode(mel.window(window.seek, window.size), self.run_options)
            return ctx, time.perf_counter() - t0

        self._work = Background(run, name="as2d-encode")

    def result(self) -> tuple[AudioContext, float]:
        """``(AudioContext, encoder seconds)``, waited for; raises what the run raised."""
        return self._work.result()

    def stop(self) -> None:
        """Abandon the run (onnxruntime's terminate flag): it ends within one operator."""
        self.run_options.terminate = True

    def wait(self) -> None:
        """Wait for the thread to end, whatever the outcome: no encoder thread may be inside
        onnxruntime when the process exits (that aborts it)."""
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
        self.encoding_turn = encoding_turn or (lambda mel, window: nullcontext())
        self.audio_source = audio_source  # named in every window's record
        self.emit = listener or ignore
        self.run_options = run_options  # its terminate flag abandons an encoder run
        # (seek, size) → the encoding and the encoder seconds not yet charged to a window.
        self._encoding: tuple[tuple[int, int], AudioContext, float] | None = None
        # A window being encoded on a thread of its own (see encode_ahead).
        self._pending: AheadEncoding | None = None
        # Called once, after the next window's encoder run (work that should not compete with
        # the encoder but may overlap the decoding).
        self.after_encode: Callable[[], None] | None = None
        self._decoder: WindowState | BeamWindow | SampleBatch | None = None

    def detect_language(self, mel: LogMel) -> tuple[str, float]:
        """Most probable language of the first window (multilingual models).

        The encoding is kept for decoding that same window next, so detection costs one
        decoder step, not an encoder run.
        """
        tk = self.model.tokenizer
        first = Window(0, 0, min(N_FRAMES, mel.n_frames))
        ctx, seconds = self._take_pending(first)
        if ctx is None:
            t0 = time.perf_counter()
            with self.encoding_turn(mel, first):
                ctx = self.model.encode(mel.window(0), self.run_options)
            seconds = time.perf_counter() - t0
        self._encoding = ((first.seek, first.size), ctx, seconds)
        state = self.model.decoder_state(ctx)
        try:
            logits = state.forward([tk.sot])[0]
        finally:
            self.model.release(state)
        codes = list(tk.languages)
        ids = np.array([tk.languages[c] for c in codes])
        sub = logits[ids]
        p = np.exp(sub - sub.max())
        p /= p.sum()
        best = int(np.argmax(p))
        self.emit(LanguageDetected(codes[best], float(p[best])))
        return codes[best], float(p[best])

    def encode_ahead(self, window: Window, mel: LogMel) -> None:
        """Start encoding ``window`` now, on a thread of its own: the first window of a run,
        so that the encoder (most of a short clip's time) starts as soon as the log-mel is
        ready and the run's Python set-up (rules, the drafter's start) overlaps it, instead of
        coming first. :meth:`encode` and language detection take it when they reach it."""
        self.adopt(AheadEncoding(self.model, mel, window, self.encoding_turn))

    def adopt(self, encoding: AheadEncoding) -> None:
        """Use ``encoding`` (started ahead) for the window it encodes."""
        self._pending = encoding
        if self.run_options is not None and self.run_options.terminate:
            encoding.stop()  # the run was stopped already

    def stop(self) -> None:
        """A stop: an encoding started ahead is abandoned too (the run's own encoder runs stop
        through ``run_options``)."""
        pending = self._pending
        if pending is not None:
            pending.stop()

    def close(self) -> None:
        """The run is over: an encoding started ahead and never taken (the run failed or
        was stopped first) is waited for, so that no encoder thread outlives the run."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.abandon()

    def _take_pending(self, window: Window) -> tuple[AudioContext | None, float]:
        """The encoding started ahead, if it is ``window``'s (waited for). One that failed
        (a stop abandoned it) is done again by the caller, which then reports any error; one
        for another window (its first window was skipped) is abandoned."""
        pending = self._pending
        if pending is None:
            return None, 0.0
        if pending.key != (window.seek, window.size):
            self._pending = None
            pending.abandon()
            return None, 0.0
        try:
            # Still reachable through ``_pending`` while it is waited for, so that a stop()
            # now abandons the run (a live session's next utterance waited for this
            # encoder's whole window, up to 0.3 s, when it was dropped before the wait).
            return pending.result()
        except Exception:  # noqa: BLE001 - encoded again in this thread
            return None, 0.0
        finally:
            self._pending = None

    def encode(self, window: Window, mel: LogMel) -> tuple[AudioContext, float]:
        """The target's encoding of ``window`` and the encoder seconds to charge to it: a kept
        encoding is charged to the first decode that uses it, and to no later one."""
        key = (window.seek, window.size)
        ctx, seconds = self._take_pending(window)
        if ctx is not None:
            self._encoding = (key, ctx, seconds)
        if self._encoding is not None and self._encoding[0] == key:
            _, ctx, seconds = self._encoding
            if seconds:
                self.emit(Encoded(window.index, seconds, ctx.n_frames))
        else:
            self._encoding = None  # the previous window's encoding is no longer needed
            t0 = time.perf_counter()
            with self.encoding_turn(mel, window):
                ctx = self.model.encode(mel.window(window.seek, window.size), self.run_options)
            seconds = time.perf_counter() - t0
            self.emit(Encoded(window.index, seconds, ctx.n_frames))
        self._encoding = (key, ctx, 0.0)
        return ctx, seconds

    def encoding(self, window: Window, mel: LogMel | None = None) -> AudioContext:
        """The kept encoding of ``window`` (the one just decoded); encoded again from
        ``mel`` only if another window's encoding has replaced it."""
        if self._encoding is not None and self._encoding[0] == (window.seek, window.size):
            return self._encoding[1]
        if mel is None:
            raise ValueError(f"window {window.index} is not encoded")
        return self.encode(window, mel)[0]

    def _begin(self, window: Window, mel: LogMel, stop: threading.Event
               ) -> tuple[AudioContext, float] | None:
        """What every decode of a window starts with, greedy or beam: announce the window,
        forget the last one's partial result, take its encoding (None when a stop ended the
        encoder run) and run the one-shot ``after_encode`` hook (a head start for the next
        file, whose failure costs only that head start)."""
        self.emit(WindowStarted(window.index, window.start, window.end))
        self._decoder = None  # nothing of this window committed yet
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

    def decode(self, window: Window, mel: LogMel, prompt: list[int], rules: LogitRules,
               sample_len: int, source_for: Callable[[Window], CandidateSource],
               stop: threading.Event, retried: bool = False
               ) -> tuple[DecodingResult, WindowStats] | None:
        """Decode ``window`` after ``prompt``; None when ``stop`` was set first (then
        :meth:`partial` has what was committed)."""
        encoded = self._begin(window, mel, stop)
        if encoded is None:
            return None
        ctx, encode_seconds = encoded
        state = self.model.decoder_state(ctx)
        tk = self.model.tokenizer
        dec = WindowState(state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot)
        self._decoder = dec
        source: CandidateSource | None = None
        # Decode time is the wall time of everything after the target's encoder: serial
        # drafting (SD) and scheduling count, concurrent drafting (AS²D) only as it slows this.
        t0 = time.perf_counter()
        try:
            source = source_for(window)
            on_pass = functools.partial(self._report, window.index)
            first = dec.start()
            source.observe([], first)
            on_pass([], first)
            if not candidates.run(dec, source, on_pass, stop):
                return None
            seconds = time.perf_counter() - t0
        finally:
            if source is not None:
                source.finish(dec.generated)
            self.model.release(state)
        self._decoder = None  # complete: nothing partial to recover from this window
        result = dec.result()
        c = result.counts
        stats = WindowStats(window.index, window.start, window.end,
                            len(result.tokens) + int(result.completed), c.passes, c.offered,
                            c.accepted, c.alone, encode_seconds, seconds, retried,
                            self.audio_source)
        return result, stats

    def decode_beam(self, window: Window, mel: LogMel, prompt: list[int], rules: LogitRules,
                    sample_len: int, beam: BeamOptions, stop: threading.Event,
                    retried: bool = False, proposer: StreamProposer | None = None,
                    threads_for: Callable[[Sequence[int]], int | None] | None = None
                    ) -> tuple[DecodingResult, WindowStats] | None:
        """Decode ``window`` with beam search (:mod:`.beam`): one batched pass per beam step,
        or, with a ``proposer`` (the drafter's stream), speculative beam steps that verify
        every hypothesis's candidates in one pass and take as many beam steps as the computed
        rows decide. None when ``stop`` was set first (:meth:`partial` then has the best
        hypothesis so far). ``threads_for(offered)``: the pass's session threads."""
        encoded = self._begin(window, mel, stop)
        if encoded is None:
            return None
        ctx, encode_seconds = encoded
        state = self.model.beam_state(ctx, beam.beam_size)
        tk = self.model.tokenizer
        dec = BeamWindow(state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot, beam)
        self._decoder = dec
        t0 = time.perf_counter()
        budget = BEAM_BUDGET  # candidates per hypothesis, grown while all are used
        try:
            dec.start()
            while not dec.done:
                if stop.is_set():
                    return None
                props = None
                if proposer is not None and budget:
                    k = min(budget, dec.room)
                    props = [proposer.propose(seq, k) for seq in dec.beams]
                    if not any(props):
                        props = None
                offered = [t for p in props or () for t in p]
                steps = dec.step(props, threads_for(offered) if threads_for else None)
                if props:
                    k = max(len(p) for p in props)
                    budget = (min(budget + 1, MAX_BEAM_BUDGET) if steps > k
                              else max(1, min(budget, steps)))
            seconds = time.perf_counter() - t0
        finally:
            self.model.release_beams(state)
        self._decoder = None
        result = dec.result()
        c = result.counts
        stats = WindowStats(window.index, window.start, window.end,
                            len(result.tokens) + int(result.completed), c.passes, c.offered,
                            c.accepted, c.alone, encode_seconds, seconds, retried,
                            self.audio_source, dec.steps)
        return result, stats

    def decode_samples(self, window: Window, mel: LogMel, prompt: list[int],
                       rules: Sequence[LogitRules], sample_len: int,
                       sources: Sequence[CandidateSource], stop: threading.Event,
                       retried: bool = False,
                       threads_for: Callable[[Sequence[int]], int | None] | None = None
                       ) -> list[tuple[DecodingResult, WindowStats]] | None:
        """Decode ``window`` once per rule of ``rules`` (sampling rules, each with its own
        generator) as one batch (:mod:`.samples`), sample ``i`` with candidates from
        ``sources[i]``; each sample's result and record (the batch's time in every record,
        each sample's own passes). None when ``stop`` was set first (then :meth:`partial` has
        the most probable sample so far)."""
        encoded = self._begin(window, mel, stop)
        if encoded is None:
            return None
        ctx, encode_seconds = encoded
        state = self.model.beam_state(ctx, len(rules))
        tk = self.model.tokenizer
        batch = SampleBatch(state, [Sample(r, src) for r, src in zip(rules, sources)], prompt,
                            prompt.index(tk.sot), sample_len, tk.eot)
        self._decoder = batch
        t0 = time.perf_counter()
        try:
            self._report_batch(window.index, batch.start())
            while not batch.done:
                if stop.is_set():
                    return None
                self._report_batch(window.index, batch.step(threads_for))
            seconds = time.perf_counter() - t0
        finally:
            for s in batch.samples:
                s.source.finish(s.generated)
            self.model.release_beams(state)
        self._decoder = None
        out = []
        for result in batch.results():
            c = result.counts
            out.append((result, WindowStats(
                window.index, window.start, window.end, len(result.tokens) + int(result.completed),
                c.passes, c.offered, c.accepted, c.alone, encode_seconds, seconds, retried,
                self.audio_source)))
        return out

    def partial(self) -> DecodingResult | None:
        """What the window a stop interrupted had committed (None: no window was under way)."""
        return self._decoder.result() if self._decoder is not None else None

    def _report_batch(self, window: int, verdicts: list[tuple[list[int], Verdict]]) -> None:
        """One pass over a batch of samples, as one pass: its counts are every sample's, its
        texts the first live sample's (a view shows one text being decoded; when that sample
        ends, the next one's)."""
        if self.emit is ignore or not verdicts:
            return
        offered, lead = verdicts[0]
        merged = Verdict([t for _, v in verdicts for t in v.committed], [],
                         sum(v.offered for _, v in verdicts),
                         sum(v.accepted for _, v in verdicts),
                         sum(v.ran for _, v in verdicts), lead.seconds)
        self._report(window, offered, merged, lead)

    def _report(self, window: int, offered: Sequence[int], verdict: Verdict,
                texts: Verdict | None = None) -> None:
        if self.emit is ignore:
            return  # nobody listens: skip decoding the texts
        tk = self.model.tokenizer
        shown = texts or verdict  # whose tokens the texts are
        acc = shown.committed[: shown.accepted]
        own = shown.committed[shown.accepted:]
        self.emit(Verified(window, verdict.offered, verdict.accepted, tuple(verdict.committed),
                           tk.decode(acc), tk.decode(own),
                           tk.decode(list(offered[shown.accepted: shown.offered])),
                           verdict.seconds))
