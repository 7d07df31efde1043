"""Long-form transcription: Whisper's timestamp-seeking loop over 30-s windows.

After each window the next one starts at the last complete segment's end timestamp (as
openai-whisper does), so words are not cut at window edges. A
:class:`~as2d.runtime.transcribe.runner.WindowRunner` decodes each window through a window task
(:mod:`.window_task`), tried again as whisper's temperature fallback says (:mod:`.attempts`);
every decoder commits the target's tokens, so this loop keeps seeking and the windows and does
not know how a window is decoded.
:meth:`LongFormTranscriber.transcribe` yields segments while a worker thread decodes.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from as2d.runtime.audio import Audio
from as2d.runtime.events import Listener, RunDone, RunStarted, SegmentDone, fanout, ignore
from as2d.runtime.transcribe import vad_filter as vad
from as2d.runtime.transcribe.ahead import Lookahead
from as2d.runtime.transcribe.attempts import Attempts
from as2d.runtime.transcribe.plan import RunPlan
from as2d.runtime.transcribe.plan import make as make_plan
from as2d.runtime.transcribe.runner import AheadEncoding, WindowRunner
from as2d.runtime.transcribe.strategy import DecodeStrategy, TargetOnly, Window
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions, resolve_language
from as2d.runtime.transcribe.window import DecodingResult
from as2d.runtime.whisper.alignment import Word, WordAligner
from as2d.runtime.whisper.features import HOP, N_FRAMES, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import WhisperModel
from as2d.runtime.whisper.seeking import split_window


def _run_options():
    import onnxruntime as ort

    return ort.RunOptions()


class Cancelled(Exception):
    """Decoding was stopped (Ctrl-C); what was committed has been kept."""


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
    words: list[Word] | None = None  # with word timestamps
    speaker: str | None = None  # with diarization (as2d.runtime.speakers.assign)
    language: str | None = None  # its window's detected language (multilingual runs)

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.words is None:
            del d["words"]
        else:
            d["words"] = [w.to_dict() for w in self.words]
        if self.speaker is None:
            del d["speaker"]
        if self.language is None:
            del d["language"]
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
    plan: RunPlan | None = None  # the run's decisions, once it has started
    # Who spoke when (as2d.runtime.speakers.diarize.Diarization), when diarization was asked.
    diarization: object = None


def _silent(audio: Audio, window: Window, peak: float | None) -> bool:
    """Does ``window`` hold nothing louder than ``peak`` (digital silence, dither)?"""
    if peak is None:
        return False
    chunk = audio.samples[window.seek * HOP:(window.seek + window.size) * HOP]
    return bool(len(chunk)) and float(np.max(np.abs(chunk))) <= peak


class LongFormTranscriber:
    """Transcribes audio of any length with one target model and one strategy (target-only,
    SD or AS²D): whisper's seeking loop over 30-s windows."""

    def __init__(self, model: WhisperModel, strategy: DecodeStrategy | None = None,
                 listener: Listener | None = None, voice_detector=None):
        self.model = model
        self.strategy = strategy or TargetOnly(model)
        self.emit = listener or ignore
        self.voice_detector = voice_detector  # for vad_filter (vad_filter.speech_only)
        self._stop = threading.Event()
        self.run_options = _run_options()
        self.ahead = Lookahead(self.strategy, model.dims.n_mels)
        self._runner: WindowRunner | None = None  # the current run's

    # -- public API ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the running (or the next) transcription after the current pass; an encoder
        run in progress is abandoned too (onnxruntime's terminate flag)."""
        self._stop.set()
        self.run_options.terminate = True
        runner = self._runner
        if runner is not None:
            runner.stop()  # its first window may be encoding on a thread of its own

    def discard_stop(self) -> None:
        """Forget a stop not yet taken by a run (each run's end does so), for a caller whose
        stops are meant for one run only. Call it with no run in progress."""
        self._stop.clear()
        self.run_options = _run_options()

    def close(self) -> None:
        """Stop and wait for the encoder runs started ahead for files not transcribed yet."""
        self.ahead.abandon()

    def add_listener(self, listener: Listener) -> None:
        """Also send every event to ``listener``."""
        self.emit = fanout(self.emit, listener)

    def prefetch(self, audio: Audio, options: TranscribeOptions | None = None) -> None:
        """``audio`` is the next recording to transcribe (thread-safe): its log-mel is computed
        now, and the AS²D drafter starts on it once done with the current file. Pass the same
        ``Audio`` object to :meth:`transcribe` later."""
        options = options or TranscribeOptions()
        if options.vad_filter:
            return  # the run decodes the speech cut out of it, not this audio
        try:
            language = resolve_language(self.model, options.language)
        except ValueError:
            return  # transcribe() will say so
        self.ahead.add(audio, language, options)

    def transcribe(self, audio: Audio | np.ndarray, options: TranscribeOptions | None = None,
                   info: TranscriptionInfo | None = None, reason: str | None = None,
                   plan: RunPlan | None = None) -> Iterator[Segment]:
        """Segments of ``audio`` as a worker thread decodes them; ``info`` is filled in as it
        goes. ``reason`` (why the decoder is less than asked) goes into the plan; ``plan`` is
        :meth:`plan`'s, if the caller made it already. Closing the generator stops the workers.
        """
        options = options or TranscribeOptions()
        if not isinstance(audio, Audio):
            audio = Audio.from_array(audio)
        info = info if info is not None else TranscriptionInfo(None, 0.0, audio.duration)
        plan = info.plan = plan or self.plan(options, reason)
        info.duration, info.source = audio.duration, audio.source
        out: queue.Queue = queue.Queue(maxsize=64)
        done = object()
        finished: list[bool] = []  # [True]: the run went to its end, uninterrupted

        def work() -> None:
            try:
                speech, timeline = audio, None
                if options.vad_filter:
                    speech, timeline = vad.speech_only(audio, self.voice_detector,
                                                       options.vad_parameters, info.extra,
                                                       self.emit)
                    if timeline is None:  # no speech at all: nothing to decode
                        return
                for seg in self._run(speech, options, info, plan, timeline):
                    out.put(seg)
                finished.append(not info.interrupted)
            except BaseException as exc:  # handed to the consumer, re-raised there
                out.put(exc)
            finally:
                self.ahead.run_ended()
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
            # Drain so that the worker never blocks on a full queue.
            while worker.is_alive():
                try:
                    out.get(timeout=0.05)
                except queue.Empty:
                    pass
            worker.join()
            if not (finished and finished[0]):
                self.ahead.abandon()  # the next file's encoding may never be used
            self.discard_stop()

    def _encode_first(self, audio: Audio, mel: LogMel, options, turn=None
                      ) -> AheadEncoding | None:
        """Start encoding a recording's first window on a thread of its own (None: silent or
        empty), so that the run's set-up overlaps the encoder. The next recording's is encoded
        outside the encoder turns (no ``turn``): the current drafter must not wait for it."""
        first = Window(0, 0, min(N_FRAMES, mel.n_frames))
        if not mel.n_frames or _silent(audio, first, options.silence_peak):
            return None
        return AheadEncoding(self.model, mel, first, turn)

    # -- the window loop ----------------------------------------------------------------------
    def _run(self, audio: Audio, options: TranscribeOptions, info: TranscriptionInfo,
             plan: RunPlan, timeline: vad.Timeline | None = None) -> Iterator[Segment]:
        """The segments of ``audio`` decoded as ``plan`` says; with a ``timeline`` (VAD
        filter), times are put back on the original recording."""
        model, tk, decoder = self.model, self.model.tokenizer, self.strategy
        t_run = time.perf_counter()
        language, search, multilingual = plan.language, plan.search, plan.multilingual
        mel, encoding = self.ahead.run_started(audio)
        if mel is None:
            mel = LogMel(audio, model.dims.n_mels)
        runner = WindowRunner(model, self.emit, self.run_options, audio.source,
                              decoder.target_encoding)
        self._runner = runner
        encoding = encoding or self._encode_first(audio, mel, options, decoder.target_encoding)
        if encoding is not None:  # the encoder first; the set-up below overlaps it
            runner.adopt(encoding)
        # From here an encoder thread, and soon the drafter, may be running: a failure ends them.
        try:
            if search is not None:
                model.beam_session()  # made (and its graph added) before the first window
            self.emit(RunStarted(audio.source, audio.duration, plan.decoder, model.name,
                                 plan.drafter, decoder.threads(), model.encoder_name,
                                 plan.search_name))
            decoder.start_early(mel, language, options)
            self.ahead.run_begun()  # the drafter may go on to the next files when done here
            if language is None:
                language, prob = self._detect(runner, mel)
                info.language_detected = True
                info.language_probability = prob
            info.language = language

            rules = LogitRules(tk, model.dims.n_vocab, timestamps=options.timestamps,
                               suppress_blank=options.suppress_blank,
                               suppress=tuple(tk.suppress_tokens()),
                               max_initial_timestamp=options.max_initial_timestamp)

            def start_of(lang: str | None) -> list[int]:
                seq = tk.sot_sequence(lang if model.multilingual else None, options.task)
                return seq if options.timestamps else seq + [tk.no_timestamps]

            sot_seq = start_of(language)
            spoken = None  # the language of the window being decoded (multilingual runs)
            n_ctx = model.dims.n_text_ctx
            sample_len = n_ctx // 2

            all_tokens: list[int] = []
            prompt_reset = 0
            if options.initial_prompt:
                all_tokens.extend(tk.encode(" " + options.initial_prompt.strip()))
            # faster-whisper's hotwords: after <|startofprev|>, before the previous text.
            hot = (tk.encode(" " + options.hotwords.strip())[: n_ctx // 2 - 1]
                   if options.hotwords and options.hotwords.strip() else [])
            seek, index, ids = 0, 0, itertools.count()
            content = mel.n_frames
            aligner = WordAligner.for_run(model, language, options) \
                if options.word_timestamps else None
            decoder.begin(mel, language, options)
            stream = decoder.candidate_stream() if plan.speculative else None
            attempts = Attempts(model, decoder, lambda event: self.emit(event), self._stop,
                                options, rules, sample_len, search, stream,
                                plan.speculative and decoder.verifies_samples)
            if search is not None and stream is None:
                decoder.end()  # beams by the target alone: a drafter would only take the cores
        except BaseException:
            try:
                decoder.end()
            finally:
                runner.close()
            raise
        try:
            while seek < content:
                if self._stop.is_set():
                    raise Cancelled()
                window = Window(index, seek, min(N_FRAMES, content - seek))
                if _silent(audio, window, options.silence_peak):
                    seek += window.size  # nothing to decode, nothing to say
                    index += 1
                    info.windows = index
                    prompt_reset = len(all_tokens)  # text before the silence is no prompt
                    continue
                if multilingual:  # this window's language (one decoder step on its encoding)
                    window = replace(window, language=self._detect(runner, mel, window)[0])
                    if spoken is not None and window.language != spoken:
                        # previous text in another language would make Whisper translate
                        prompt_reset = len(all_tokens)
                    sot_seq, spoken = start_of(window.language), window.language
                    if aligner is not None:
                        aligner.language = window.language
                if seek + window.size >= content:  # the last window: encode the next file's first
                    runner.after_encode = lambda: self.ahead.encode_next(self._encode_first)
                prev = all_tokens[prompt_reset:]
                head = [tk.sot_prev] + hot if (prev or hot) else []
                prompt = head + prev[-(n_ctx // 2 - 1):] + sot_seq
                bare = head + sot_seq if prev else None
                decoded = attempts.decode(runner, window, mel, prompt, bare)
                if decoded is None:  # cancelled inside the window
                    raise Cancelled()
                result, retried, temperature = decoded
                segs, advance = self._segments(result, window, options)
                for seg in segs:
                    seg.temperature, seg.language = temperature, window.language
                if aligner is not None:  # words of the committed tokens; they stay as they are
                    aligner.align(segs, runner.encoding(window, mel).cross, window.size)
                yield from self._emitted(segs, ids, timeline)
                all_tokens.extend(t for s in segs for t in s.tokens)
                seek += max(advance, 1)
                index += 1
                info.windows = index
                if (not options.condition_on_previous_text or retried
                        or temperature > options.prompt_reset_on_temperature):
                    prompt_reset = len(all_tokens)
        except Cancelled:
            partial = runner.partial()
            if partial is not None and partial.tokens:
                window = Window(index, seek, min(N_FRAMES, content - seek))
                segs, _ = self._segments(partial, window, options, final=True)
                for seg in segs:
                    seg.partial = True
                    seg.language = spoken
                yield from self._emitted(segs, ids, timeline)
            info.interrupted = True
            self.emit(RunDone(time.perf_counter() - t_run, interrupted=True))
            return
        finally:
            try:
                decoder.end()
            finally:
                runner.close()
        self.emit(RunDone(time.perf_counter() - t_run))

    def _detect(self, runner: WindowRunner, mel: LogMel, window: Window | None = None
                ) -> tuple[str, float]:
        """The language of ``window`` (default: the first); Cancelled if a stop ended it."""
        try:
            return runner.detect_language(mel, window)
        except Exception:
            if self._stop.is_set():
                raise Cancelled() from None
            raise

    def _emitted(self, segs: list[Segment], ids: Iterator[int],
                 timeline: vad.Timeline | None) -> Iterator[Segment]:
        """``segs`` numbered, put back on the recording's times (VAD filter) and announced."""
        for seg in segs:
            seg.id = next(ids)
            if timeline is not None:
                timeline.restore(seg)
            self.emit(SegmentDone(seg))
            yield seg

    def plan(self, options: TranscribeOptions, reason: str | None = None) -> RunPlan:
        """The run's decisions, made once before it starts (:func:`.plan.make`)."""
        return make_plan(self.model, self.strategy, options, reason, self.emit)

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
        cr = result.compression_ratio(tk)
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
