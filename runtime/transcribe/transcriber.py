"""Long-form transcription: Whisper's timestamp-seeking window loop, with pluggable decoders.

Audio of any length is decoded in 30-s windows. After each window the next one starts at the
last complete segment's end timestamp (as openai-whisper does), so words are not cut at window
edges. How a window is decoded is the business of a :class:`~as2d.runtime.transcribe.decoders.Strategy`
(target-only, serial speculative decoding or AS²D); they all commit the same tokens, so this loop
and its outputs do not depend on which one runs.

Segments are produced lazily: :meth:`Transcriber.transcribe` is a generator that a live display
or a writer can consume while decoding goes on in a worker thread.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator

import numpy as np

from as2d.runtime.audio import Audio
from as2d.runtime.transcribe.window import DecodingResult, compression_ratio
from as2d.runtime.events import Listener, Note, RunDone, RunStarted, SegmentDone, WindowDone, ignore
from as2d.runtime.whisper.features import FRAMES_PER_SECOND, N_FRAMES, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.tokenizer import TIME_PRECISION, normalize_language
from as2d.runtime.whisper.model import WhisperModel

INPUT_STRIDE = 2  # mel frames per encoder output position (and per 20-ms timestamp)


def _run_options():
    import onnxruntime as ort

    return ort.RunOptions()


def seek_split(tokens: list[int], ts_begin: int) -> tuple[list[int], bool]:
    """Where a window's tokens split into segments, and whether it ended on one timestamp.

    Segments end at each pair of consecutive timestamps. A window that does not end on a
    single timestamp resumes at its last pair: the text after it is decoded again.
    """
    is_ts = [t >= ts_begin for t in tokens]
    cuts = [i + 1 for i in range(len(is_ts) - 1) if is_ts[i] and is_ts[i + 1]]
    single_ending = len(is_ts) >= 2 and is_ts[-2:] == [False, True]
    return cuts, single_ending


def kept_text_tokens(tokens: list[int], ts_begin: int) -> int:
    """How many text tokens of a window survive the timestamp seek (see :func:`seek_split`)."""
    cuts, single_ending = seek_split(tokens, ts_begin)
    end = cuts[-1] if cuts and not single_ending else len(tokens)
    return sum(1 for t in tokens[:end] if t < ts_begin)


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
    """Transcribes audio with one target model and one decoding strategy."""

    def __init__(self, model: WhisperModel, strategy=None, listener: Listener | None = None):
        from as2d.runtime.transcribe.decoders import TargetOnly

        self.model = model
        self.strategy = strategy or TargetOnly(model)
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
        from as2d.runtime.events import fanout

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
        model, tk = self.model, self.model.tokenizer
        t_run = time.perf_counter()
        mel = LogMel(audio, model.dims.n_mels)
        self.emit(RunStarted(audio.source, audio.duration, self.strategy.name, model.name,
                             getattr(self.strategy, "drafter_name", None),
                             self.strategy.threads()))
        language = resolve_language(model, options.language)
        self.strategy.start_early(mel, language, options)
        if language is None:
            try:
                language, prob = self.detect_language(mel, keep_encoding=True)
            except BaseException:
                self.strategy.end()
                raise
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
        seek, window, seg_id = 0, 0, 0
        content = mel.n_frames
        self.strategy.begin(mel, language, options)
        try:
            while seek < content:
                if self._stop.is_set():
                    raise Cancelled()
                size = min(N_FRAMES, content - seek)
                offset = seek / FRAMES_PER_SECOND
                prev = all_tokens[prompt_reset:]
                prompt = ([tk.sot_prev] + prev[-(n_ctx // 2 - 1):] if prev else []) + sot_seq
                result, retried = self._decode(window, mel, seek, size, prompt, rules,
                                               sample_len, options)
                if result is None:  # cancelled inside the window
                    raise Cancelled()
                segs, advance = self._segments(result, seek, size, offset, options, tk)
                for seg in segs:
                    seg.id = seg_id
                    seg_id += 1
                    self.emit(SegmentDone(seg))
                    yield seg
                all_tokens.extend(t for s in segs for t in s.tokens)
                seek += max(advance, 1)
                window += 1
                info.windows = window
                if not options.condition_on_previous_text or retried:
                    prompt_reset = len(all_tokens)
        except Cancelled:
            partial = self.strategy.partial()
            if partial is not None and partial.tokens:
                segs, _ = self._segments(partial, seek, min(N_FRAMES, content - seek),
                                         seek / FRAMES_PER_SECOND, options, tk, final=True)
                for seg in segs:
                    seg.id, seg.partial = seg_id, True
                    seg_id += 1
                    self.emit(SegmentDone(seg))
                    yield seg
            info.interrupted = True
            self.emit(RunDone(time.perf_counter() - t_run, interrupted=True))
            return
        finally:
            self.strategy.end()
        self.emit(RunDone(time.perf_counter() - t_run))

    def _decode(self, window: int, mel: LogMel, seek: int, size: int, prompt: list[int],
                rules: LogitRules, sample_len: int, options: TranscribeOptions):
        """Decode one window; returns (result, retried) or (None, _) when cancelled."""
        tk = self.model.tokenizer
        start = seek / FRAMES_PER_SECOND
        end = (seek + size) / FRAMES_PER_SECOND
        result = self.strategy.decode_window(window, mel, seek, size, prompt, rules, sample_len,
                                             self._stop, run_options=self.run_options)
        if result is None:
            return None, False
        retried = False
        thr = options.compression_ratio_threshold
        if (options.retry_repetitive and thr is not None and tk.sot_prev in prompt
                and compression_ratio(tk.decode(result.tokens)) > thr):
            # Whisper's loop failure feeds on the previous text: decode again without it.
            self.emit(Note(f"window at {start:.1f}s repeats itself; decoding it again "
                           "without the previous text"))
            bare = prompt[prompt.index(tk.sot):]
            again = self.strategy.decode_window(window, mel, seek, size, bare, rules,
                                                sample_len, self._stop, reuse_encoding=True,
                                                run_options=self.run_options)
            if again is None:
                return None, False
            result, retried = again, True
        if thr is not None and compression_ratio(tk.decode(result.tokens)) > thr:
            result.tokens = _cut_repetition(result.tokens, tk.timestamp_begin)
        self.emit(WindowDone(window, start, end, len(result.tokens) + int(result.completed),
                             result.passes, result.seconds, self.strategy.last_encode_seconds,
                             result.offered, result.accepted, result.alone, retried))
        return result, retried

    def _segments(self, result: DecodingResult, seek: int, size: int, offset: float,
                  options: TranscribeOptions, tk, final: bool = False):
        """Split a window's tokens into timestamped segments; returns (segments, frames to seek)."""
        tokens = result.tokens
        avg_lp = result.avg_logprob
        text_all = tk.decode(tokens)
        cr = compression_ratio(text_all)
        # Silence: the no-speech token is likely and the text is not confident.
        if (options.no_speech_threshold is not None
                and result.no_speech_prob > options.no_speech_threshold
                and (options.logprob_threshold is None or avg_lp < options.logprob_threshold)):
            return [], size

        def make(start: float, end: float, toks: list[int]) -> Segment | None:
            text = tk.decode(toks)
            if not text.strip():
                return None
            return Segment(0, seek, start, end, text, [t for t in toks], avg_lp, cr,
                           result.no_speech_prob)

        segs: list[Segment] = []
        duration = size / FRAMES_PER_SECOND
        tb = tk.timestamp_begin
        consecutive, single_ending = seek_split(tokens, tb)
        if options.timestamps and consecutive:
            slices = consecutive + ([len(tokens)] if single_ending else [])
            last = 0
            for cur in slices:
                part = tokens[last:cur]
                s = make(offset + (part[0] - tb) * TIME_PRECISION,
                         offset + (part[-1] - tb) * TIME_PRECISION, part)
                if s:
                    segs.append(s)
                last = cur
            if single_ending or final:
                advance = size
                if final and last < len(tokens):
                    rest = tokens[last:]
                    start = offset + ((rest[0] - tb) * TIME_PRECISION if rest[0] >= tb else 0)
                    s = make(start, offset + duration, rest)
                    if s:
                        segs.append(s)
            else:
                advance = (tokens[last - 1] - tb) * INPUT_STRIDE
        else:
            end = duration
            stamps = [t for t in tokens if t >= tb]
            if options.timestamps and stamps and stamps[-1] != tb:
                end = (stamps[-1] - tb) * TIME_PRECISION
            start = (tokens[0] - tb) * TIME_PRECISION if tokens and tokens[0] >= tb else 0.0
            s = make(offset + start, offset + end, tokens)
            if s:
                segs.append(s)
            advance = size
        return segs, advance

    def detect_language(self, mel: LogMel, keep_encoding: bool = False) -> tuple[str, float]:
        """Most probable language of the first window (multilingual models).

        With ``keep_encoding`` the first window's encoding is handed to the strategy, which
        decodes that same window next, so detection costs one decoder step, not an encoder run.
        """
        tk = self.model.tokenizer
        t0 = time.perf_counter()
        ctx = self.model.encode(mel.window(0))
        if keep_encoding:
            self.strategy.preencoded(0, min(N_FRAMES, mel.n_frames), ctx,
                                     time.perf_counter() - t0)
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
        self.emit(Note(f"detected language: {codes[best]} (p={p[best]:.2f})"))
        return codes[best], float(p[best])


def _cut_repetition(tokens: list[int], ts_begin: int, min_repeats: int = 4,
                    max_period: int = 24) -> list[int]:
    """Cut a trailing loop (the same ≤ ``max_period`` text tokens ``min_repeats``+ times)."""
    text = [t for t in tokens if t < ts_begin]
    for period in range(1, max_period + 1):
        if len(text) < period * min_repeats:
            break
        unit = text[-period:]
        reps = 1
        while (reps + 1) * period <= len(text) and \
                text[-(reps + 1) * period : -reps * period] == unit:
            reps += 1
        if reps >= min_repeats:
            keep_text = len(text) - (reps - 1) * period
            out, seen = [], 0
            for t in tokens:
                if t < ts_begin:
                    if seen >= keep_text:
                        break
                    seen += 1
                out.append(t)
            return out
    return tokens
