"""Long-form transcription: Whisper's timestamp-seeking window loop, with pluggable decoders.

Audio of any length is decoded in 30-s windows. After each window the next one starts at the
last complete segment's end timestamp (as openai-whisper does), so words are not cut at window
edges. Each window is encoded and decoded by a
:class:`~as2d.runtime.transcribe.runner.WindowRunner` with the candidates of the run's
:class:`~as2d.runtime.transcribe.decoders.Decoder` (target-only, serial speculative decoding or
AS²D); they all commit the same tokens, so this loop and its outputs do not depend on which one
runs.

Segments are produced lazily: :meth:`Transcriber.transcribe` is a generator that a live display
or a writer can consume while decoding goes on in a worker thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from as2d.runtime.audio import Audio
from as2d.runtime.events import (
    Listener,
    Note,
    RunDone,
    RunStarted,
    SegmentDone,
    WindowDone,
    fanout,
    ignore,
)
from as2d.runtime.transcribe.decoders import Decoder, TargetOnly, Window
from as2d.runtime.transcribe.runner import WindowRunner
from as2d.runtime.transcribe.window import DecodingResult
from as2d.runtime.whisper.features import N_FRAMES, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import WhisperModel
from as2d.runtime.whisper.seeking import compression_ratio, cut_repetition, split_window
from as2d.runtime.whisper.tokenizer import normalize_language


def _run_options():
    import onnxruntime as ort

    return ort.RunOptions()


def resolve_language(model, language: str | None) -> str | None:
    """The language to decode ``model``'s audio in: ``language`` normalized (a name or code →
    its code), "en" for an English-only model, None (detect) otherwise.

    Raises ValueError for an unknown language, or one an English-only model cannot transcribe.
    """
    if language is not None:
        language = normalize_language(language)
        if not model.multilingual and language != "en":
            raise ValueError(f"{model.name} is English-only; it cannot transcribe "
                             f"language {language!r}")
    if not model.multilingual:
        language = "en"
    return language


class Cancelled(Exception):
    """Decoding was stopped (Ctrl-C); what was committed has been kept."""


@dataclass
class TranscribeOptions:
    language: str | None = None
    task: str = "transcribe"
    timestamps: bool = True
    condition_on_previous_text: bool = True
    initial_prompt: str | None = None
    no_speech_threshold: float | None = 0.6
    logprob_threshold: float | None = -1.0
    compression_ratio_threshold: float | None = 2.4
    suppress_blank: bool = True
    max_initial_timestamp: float = 1.0
    # Repeated-text guard: a window whose text compresses too well (a loop) is decoded again
    # without the previous text as prompt; if it still loops, the repetition is cut.
    retry_repetitive: bool = True


@dataclass
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    temperature: float = 0.0
    partial: bool = False  # cut short by Ctrl-C

    def to_dict(self) -> dict:
        d = asdict(self)
        d["start"], d["end"] = round(self.start, 3), round(self.end, 3)
        return d


@dataclass
class TranscriptionInfo:
    language: str | None
    language_probability: float
    duration: float
    source: str = "<memory>"
    windows: int = 0
    interrupted: bool = False
    language_detected: bool = False
    extra: dict = field(default_factory=dict)


class Transcriber:
    """Transcribes audio with one target model and one decoder (target-only, SD or AS²D)."""

    def __init__(self, model: WhisperModel, decoder: Decoder | None = None,
                 listener: Listener | None = None):
        self.model = model
        self.decoder = decoder or TargetOnly(model)
        self.emit = listener or ignore
        self._stop = threading.Event()
        self.run_options = _run_options()

    # -- public API ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the running (or the next) transcription to stop after the current pass.

        An encoder run in progress is abandoned too (onnxruntime's terminate flag), so a stop
        takes effect within one decoder pass, not one 30-s encoder window.
        """
        self._stop.set()
        self.run_options.terminate = True

    def add_listener(self, listener: Listener) -> None:
        """Also send every event to ``listener``."""
        self.emit = fanout(self.emit, listener)

    def transcribe(self, audio: Audio | np.ndarray, options: TranscribeOptions | None = None,
                   info: TranscriptionInfo | None = None) -> Iterator[Segment]:
        """Segments of ``audio`` as they are decoded (in a worker thread).

        ``info`` (optional) is filled in as decoding goes (language, duration, interruption).
        Closing the generator early, or an exception in the consumer, stops the workers.
        """
        options = options or TranscribeOptions()
        if not isinstance(audio, Audio):
            audio = Audio.from_array(audio)
        info = info if info is not None else TranscriptionInfo(None, 0.0, audio.duration)
        info.duration, info.source = audio.duration, audio.source
        out: queue.Queue = queue.Queue(maxsize=64)
        done = object()

        def work() -> None:
            try:
                for seg in self._run(audio, options, info):
                    out.put(seg)
            except BaseException as exc:  # handed to the consumer, re-raised there
                out.put(exc)
            finally:
                out.put(done)

        worker = threading.Thread(target=work, name="as2d-target", daemon=True)
        worker.start()
        try:
            while True:
                item = out.get()
                if item is done:
                    break
                if isinstance(item, Cancelled):
                    info.interrupted = True
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._stop.set()
            # Drain so the worker never blocks on a full queue, then wait for it.
            while worker.is_alive():
                try:
                    out.get(timeout=0.05)
                except queue.Empty:
                    pass
            worker.join()
            # Ready for the next call (a stop requested before a call still applies to it).
            self._stop.clear()
            self.run_options = _run_options()

    # -- the window loop ----------------------------------------------------------------------
    def _run(self, audio: Audio, options: TranscribeOptions,
             info: TranscriptionInfo) -> Iterator[Segment]:
        model, tk, decoder = self.model, self.model.tokenizer, self.decoder
        t_run = time.perf_counter()
        mel = LogMel(audio, model.dims.n_mels)
        self.emit(RunStarted(audio.source, audio.duration, decoder.name, model.name,
                             decoder.drafter_name, decoder.threads(),
                             getattr(model, "encoder_name", "onnxruntime")))
        runner = WindowRunner(model, self.emit, self.run_options, audio.source)
        language = resolve_language(model, options.language)
        decoder.start_early(mel, language, options)
        # From here the drafter may be running: whatever fails before the window loop (its own
        # try ends the decoder) must end it too.
        try:
            if language is None:
                language, prob = runner.detect_language(mel)
                info.language_detected = True
                info.language_probability = prob
            info.language = language

            rules = LogitRules(tk, model.dims.n_vocab, timestamps=options.timestamps,
                               suppress_blank=options.suppress_blank,
                               suppress=tuple(tk.suppress_tokens()),
                               max_initial_timestamp=options.max_initial_timestamp)
            sot_seq = tk.sot_sequence(language if model.multilingual else None, options.task)
            if not options.timestamps:
                sot_seq = sot_seq + [tk.no_timestamps]
            n_ctx = model.dims.n_text_ctx
            sample_len = n_ctx // 2

            all_tokens: list[int] = []
            prompt_reset = 0
            if options.initial_prompt:
                all_tokens.extend(tk.encode(" " + options.initial_prompt.strip()))
            seek, index, seg_id = 0, 0, 0
            content = mel.n_frames
            decoder.begin(mel, language, options)
        except BaseException:
            decoder.end()
            raise
        try:
            while seek < content:
                if self._stop.is_set():
                    raise Cancelled()
                window = Window(index, seek, min(N_FRAMES, content - seek))
                prev = all_tokens[prompt_reset:]
                prompt = ([tk.sot_prev] + prev[-(n_ctx // 2 - 1):] if prev else []) + sot_seq
                decoded = self._decode(runner, window, mel, prompt, rules, sample_len, options)
                if decoded is None:  # cancelled inside the window
                    raise Cancelled()
                result, retried = decoded
                segs, advance = self._segments(result, window, options)
                for seg in segs:
                    seg.id = seg_id
                    seg_id += 1
                    self.emit(SegmentDone(seg))
                    yield seg
                all_tokens.extend(t for s in segs for t in s.tokens)
                seek += max(advance, 1)
                index += 1
                info.windows = index
                if not options.condition_on_previous_text or retried:
                    prompt_reset = len(all_tokens)
        except Cancelled:
            partial = runner.partial()
            if partial is not None and partial.tokens:
                window = Window(index, seek, min(N_FRAMES, content - seek))
                segs, _ = self._segments(partial, window, options, final=True)
                for seg in segs:
                    seg.id, seg.partial = seg_id, True
                    seg_id += 1
                    self.emit(SegmentDone(seg))
                    yield seg
            info.interrupted = True
            self.emit(RunDone(time.perf_counter() - t_run, interrupted=True))
            return
        finally:
            decoder.end()
        self.emit(RunDone(time.perf_counter() - t_run))

    def _decode(self, runner: WindowRunner, window: Window, mel: LogMel, prompt: list[int],
                rules: LogitRules, sample_len: int, options: TranscribeOptions
                ) -> tuple[DecodingResult, bool] | None:
        """Decode one window, again without the previous text if it loops; None: cancelled."""
        tk = self.model.tokenizer
        decoded = runner.decode(window, mel, prompt, rules, sample_len, self.decoder.source,
                                self._stop)
        if decoded is None:
            return None
        result, stats = decoded
        thr = options.compression_ratio_threshold
        if (options.retry_repetitive and thr is not None and tk.sot_prev in prompt
                and compression_ratio(tk.decode(result.tokens)) > thr):
            # Whisper's loop failure feeds on the previous text: decode again without it.
            self.emit(Note(f"window at {window.start:.1f}s repeats itself; decoding it again "
                           "without the previous text"))
            bare = prompt[prompt.index(tk.sot):]
            decoded = runner.decode(window, mel, bare, rules, sample_len, self.decoder.source,
                                    self._stop, retried=True)
            if decoded is None:
                return None
            result, stats = decoded
        if thr is not None and compression_ratio(tk.decode(result.tokens)) > thr:
            result.tokens = cut_repetition(result.tokens, tk.timestamp_begin)
            stats = replace(stats, tokens=len(result.tokens) + int(result.completed))
        self.emit(WindowDone(stats))
        return result, stats.retried

    def _segments(self, result: DecodingResult, window: Window, options: TranscribeOptions,
                  final: bool = False) -> tuple[list[Segment], int]:
        """A window's timestamped segments and the frames to seek past it."""
        tk = self.model.tokenizer
        avg_lp = result.avg_logprob
        # Silence: the no-speech token is likely and the text is not confident.
        if (options.no_speech_threshold is not None
                and result.no_speech_prob > options.no_speech_threshold
                and (options.logprob_threshold is None or avg_lp < options.logprob_threshold)):
            return [], window.size
        cr = compression_ratio(tk.decode(result.tokens))
        pieces, advance = split_window(result.tokens, tk.timestamp_begin, window.size,
                                       options.timestamps, final)
        segs = []
        for p in pieces:
            text = tk.decode(p.tokens)
            if text.strip():
                segs.append(Segment(0, window.seek, window.start + p.start,
                                    window.start + p.end, text, list(p.tokens), avg_lp, cr,
                                    result.no_speech_prob))
        return segs, advance
