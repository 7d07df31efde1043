"""Long-form transcription: Whisper's timestamp-seeking window loop, with pluggable decoders.

Audio of any length is decoded in 30-s windows. After each window the next one starts at the
last complete segment's end timestamp (as openai-whisper does), so words are not cut at window
edges. Each window is encoded and decoded by a
:class:`~as2d.runtime.transcribe.runner.WindowRunner` through a window task
(:mod:`.window_task`: greedy with the candidates of the run's
:class:`~as2d.runtime.transcribe.strategy.DecodeStrategy` — target-only, serial speculative
decoding or AS²D —, beam search, or a fallback's samples); they all commit the tokens the target
alone commits, so this loop and its outputs do not depend on which decoder runs. The loop keeps
seeking, the temperature fallback and the windows; it does not know how a window is decoded.

Segments are produced lazily: :meth:`LongFormTranscriber.transcribe` is a generator that a live
display or a writer can consume while decoding goes on in a worker thread.
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
from as2d.runtime.events import (
    Listener,
    Note,
    RunDone,
    RunStarted,
    SegmentDone,
    WindowDone,
    WindowStats,
    fanout,
    ignore,
)
from as2d.runtime.rows import beams_exact
from as2d.runtime.speculative.candidates import NO_CANDIDATES, CandidateSource
from as2d.runtime.transcribe import fallback, window_task
from as2d.runtime.transcribe import vad_filter as vad
from as2d.runtime.transcribe.ahead import Lookahead
from as2d.runtime.transcribe.beam import length_score
from as2d.runtime.transcribe.drafting import DraftingStrategy
from as2d.runtime.transcribe.plan import RunPlan
from as2d.runtime.transcribe.runner import AheadEncoding, WindowRunner
from as2d.runtime.transcribe.strategy import DecodeStrategy, TargetOnly, Window
from as2d.runtime.transcribe.stream_source import SampledSource, StreamProposer
from as2d.runtime.transcribe.transcribe_options import (
    TranscribeOptions,
    beam_options,
    resolve_language,
)
from as2d.runtime.transcribe.window import DecodingResult
from as2d.runtime.whisper.alignment import (
    Word,
    WordAligner,
)
from as2d.runtime.whisper.features import HOP, N_FRAMES, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import WhisperModel
from as2d.runtime.whisper.seeking import compression_ratio, cut_repetition, split_window


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


def _charged(kept: WindowStats, decodes: list[WindowStats]) -> WindowStats:
    """``kept``'s record charged with every decode of its window (``decodes``, ``kept``'s
    among them): the window's time includes the decodes that were not kept; their tokens and
    passes are counted apart."""
    return replace(kept, encode_seconds=sum(s.encode_seconds for s in decodes),
                   decode_seconds=sum(s.decode_seconds for s in decodes),
                   dropped_decodes=sum(1 + s.dropped_decodes for s in decodes) - 1,
                   dropped_tokens=sum(s.tokens + s.dropped_tokens for s in decodes) - kept.tokens,
                   dropped_passes=sum(s.passes + s.dropped_passes for s in decodes) - kept.passes)


class LongFormTranscriber:
    """Transcribes audio of any length with one target model and one strategy (target-only,
    SD or AS²D): whisper's seeking loop over 30-s windows."""

    def __init__(self, model: WhisperModel, strategy: DecodeStrategy | None = None,
                 listener: Listener | None = None, voice_detector=None):
        self.model = model
        self.strategy = strategy or TargetOnly(model)
        self.emit = listener or ignore
        # Scores 512-sample frames for the VAD filter (``probabilities(samples)``, e.g.
        # as2d.runtime.vad.silero.SileroVAD); only needed with ``vad_filter``.
        self.voice_detector = voice_detector
        self._stop = threading.Event()
        self.run_options = _run_options()
        self.ahead = Lookahead(self.strategy, model.dims.n_mels)
        self._runner: WindowRunner | None = None  # the current run's
        self._plan: RunPlan | None = None  # the current run's
        # The drafter's stream of the current run, for the decodes its aligner does not
        # follow (beam hypotheses, sampled fallback decodes); None: none to look up.
        self._stream = None
        self._sampled_candidates = False  # sampled decodes verify candidates (a speculative run)
        self._batched: bool | None = None  # a fallback's samples side by side? (once)
        # The current window's proposer, keyed by (stream, window seek).
        self._window_proposer: tuple[tuple[int, int], StreamProposer] | None = None

    # -- public API ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the running (or the next) transcription to stop after the current pass.

        An encoder run in progress is abandoned too (onnxruntime's terminate flag), so a stop
        takes effect within one decoder pass, not one 30-s encoder window.
        """
        self._stop.set()
        self.run_options.terminate = True
        runner = self._runner
        if runner is not None:
            runner.stop()  # its first window may be encoding on a thread of its own

    def discard_stop(self) -> None:
        """Forget a stop not yet taken by a run (each run's end does so): for a caller whose
        stops are meant for one run only (a live session's preempted decode), a stop that
        came as that run ended must not stop the next one. Call it with no run in progress."""
        self._stop.clear()
        self.run_options = _run_options()

    def close(self) -> None:
        """Stop the encoder runs started ahead for files not transcribed yet, and wait for
        them (the decoder's threads are its own: see ``DecodeStrategy.close``)."""
        self.ahead.abandon()

    def add_listener(self, listener: Listener) -> None:
        """Also send every event to ``listener``."""
        self.emit = fanout(self.emit, listener)

    def prefetch(self, audio: Audio, options: TranscribeOptions | None = None) -> None:
        """``audio`` is the next recording to transcribe (thread-safe; call it while the current
        one is decoded): its log-mel is computed now, in the calling thread, and the AS²D
        drafter starts on it as soon as it has finished the current file. Pass the same
        ``Audio`` object to :meth:`transcribe` later; the output does not change."""
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
        """Segments of ``audio`` as they are decoded (in a worker thread).

        ``info`` (optional) is filled in as decoding goes (the run's plan, language, duration,
        interruption). ``reason``: why this transcriber's decoder is less than the user asked
        for (the engine's choice), carried into the plan. ``plan``: :meth:`plan`'s for these
        options, if the caller made it already (the engine does, to report it before the run).
        Closing the generator early, or an exception in the consumer, stops the workers.
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
                    speech, timeline = self._speech_only(audio, options, info)
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
            # Drain so the worker never blocks on a full queue, then wait for it.
            while worker.is_alive():
                try:
                    out.get(timeout=0.05)
                except queue.Empty:
                    pass
            worker.join()
            if not (finished and finished[0]):
                # Stopped, failed or closed early: the next file's encoding (started in the
                # last window) may never be used; it must not outlive the process either.
                self.ahead.abandon()
            # Ready for the next call (a stop requested before a call still applies to it).
            self.discard_stop()

    def _encode_first(self, audio: Audio, mel: LogMel, options, turn=None
                      ) -> AheadEncoding | None:
        """Start encoding the first window of a recording on a thread of its own (None: it is
        silent, or empty), so that the encoder (most of a short clip's time) starts as soon as
        the log-mel is ready: the run's Python set-up (rules, the drafter's start) overlaps it.
        The next recording's is encoded outside the encoder turns (no ``turn``): the current
        file's drafter, still drafting for the window being decoded, must not wait for it."""
        first = Window(0, 0, min(N_FRAMES, mel.n_frames))
        if not mel.n_frames or _silent(audio, first, options.silence_peak):
            return None
        return AheadEncoding(self.model, mel, first, turn)

    # -- the window loop ----------------------------------------------------------------------
    def _run(self, audio: Audio, options: TranscribeOptions, info: TranscriptionInfo,
             plan: RunPlan, timeline: vad.Timeline | None = None) -> Iterator[Segment]:
        """The segments of ``audio`` decoded as ``plan`` says; with a ``timeline`` (VAD
        filter), ``audio`` is the joined speech and every time is put back on the original
        recording."""
        model, tk, decoder = self.model, self.model.tokenizer, self.strategy
        t_run = time.perf_counter()
        language, search, multilingual = plan.language, plan.search, plan.multilingual
        self._plan = plan
        # Computed ahead, while the last file decoded: the log-mel, maybe the first encoding.
        mel, encoding = self.ahead.run_started(audio)
        if mel is None:
            mel = LogMel(audio, model.dims.n_mels)
        runner = WindowRunner(model, self.emit, self.run_options, audio.source,
                              decoder.target_encoding)
        self._runner = runner
        encoding = encoding or self._encode_first(audio, mel, options, decoder.target_encoding)
        if encoding is not None:  # the encoder first; the set-up below overlaps it
            runner.adopt(encoding)
        # From here an encoder thread, and soon the drafter, may be running: whatever fails
        # before the window loop (its own try ends them) must end them too.
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
            # faster-whisper's hotwords: after <|startofprev|>, before the previous text, in
            # every window's prompt.
            hot = (tk.encode(" " + options.hotwords.strip())[: n_ctx // 2 - 1]
                   if options.hotwords and options.hotwords.strip() else [])
            seek, index, ids = 0, 0, itertools.count()
            content = mel.n_frames
            aligner = WordAligner.for_run(model, language, options) \
                if options.word_timestamps else None
            decoder.begin(mel, language, options)
            self._stream = decoder.candidate_stream() if plan.speculative else None
            self._window_proposer = None
            # Sampled decodes verify candidates in a speculative run (its target passed the
            # row check); a run that reports itself target-only decodes them alone too.
            self._sampled_candidates = plan.speculative and isinstance(decoder, DraftingStrategy)
            if search is not None and self._stream is None:
                # Beam windows by the target alone, and so sampled ones: a drafter would only
                # take the cores.
                decoder.end()
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
                if multilingual:  # this window's language, from its own encoding (kept for
                    # its decode): one decoder step
                    window = replace(window, language=self._detect(runner, mel, window)[0])
                    if spoken is not None and window.language != spoken:
                        # The previous text is in another language: as a prompt it has
                        # Whisper translate this window into that one.
                        prompt_reset = len(all_tokens)
                    sot_seq, spoken = start_of(window.language), window.language
                    if aligner is not None:
                        aligner.language = window.language
                if seek + window.size >= content:  # the last window (most likely): once
                    # encoded, the next recording's first window is encoded beside its decoding
                    runner.after_encode = lambda: self.ahead.encode_next(self._encode_first)
                prev = all_tokens[prompt_reset:]
                head = [tk.sot_prev] + hot if (prev or hot) else []
                prompt = head + prev[-(n_ctx // 2 - 1):] + sot_seq
                # The repetition guard's prompt: the same without the previous text.
                bare = head + sot_seq if prev else None
                decoded = self._decode(runner, window, mel, prompt, rules, sample_len, options,
                                       bare)
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
        """The language of ``window`` (default: the first), or Cancelled where a stop
        abandoned its encoder run."""
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
        """The run's decisions, made once, before it starts (:mod:`.plan`): what the window
        loop decodes with and what the faces report. Raises ValueError for a language the
        model cannot transcribe, or a beam search it cannot run.

        The decoder is the strategy's, except that speculative beam search needs a drafter's
        stream and batched rows that are the rows of single passes (checked once per model
        and machine, and remembered): otherwise the target decodes the beams alone, and the
        plan says why."""
        model, decoder = self.model, self.strategy
        language, search = resolve_language(model, options.language), beam_options(options)
        name, drafter = decoder.name, decoder.drafter_name
        if search is not None:
            if model.beam_graph is None:  # a Hugging Face ONNX export
                raise ValueError(f"{model.name}: beam search needs an as2d Whisper model "
                                 "(a Hugging Face ONNX export decodes greedily only)")
            exact = beams_exact(model)
            if not exact:
                self.emit(Note("beam search: this machine computes the batched decoder's "
                               "rows differently from single passes; the target decodes "
                               "the beams alone"))
            if drafter is not None and not (exact and decoder.streams):
                reason = ("beam search: the batched decoder's rows are not those of single "
                          "passes on this machine" if not exact else
                          f"beam search: the {name} decoder has no drafter's stream to take "
                          "candidates from")
                name, drafter = "target", None
        return RunPlan(name, drafter, reason, language, search,
                       options.multilingual and model.multilingual)

    def _decode(self, runner: WindowRunner, window: Window, mel: LogMel, prompt: list[int],
                rules: LogitRules, sample_len: int, options: TranscribeOptions,
                bare: list[int] | None = None
                ) -> tuple[DecodingResult, bool, float] | None:
        """Decode one window: ``(result, retried without the previous text, temperature)``;
        None: cancelled.

        Whisper's temperature fallback first (see :mod:`.fallback`): greedy with the run's
        decoder, then each further temperature of the schedule, sampled (with candidates in a
        speculative run: :meth:`_sampled_source`), until a decode passes; the last one is kept
        if none does. Then the repetition guard: a window that still loops is decoded once
        more without the previous text (``bare``, None when the prompt has none) at the last
        temperature tried, and a loop that survives is cut.
        """
        tk = self.model.tokenizer
        thr = options.compression_ratio_threshold
        temps = options.temperatures or (0.0,)
        decodes: list[WindowStats] = []  # the record of every decode, kept or not

        def attempt(t: float, prompt_: list[int], retried: bool = False):
            decoded = self._attempt(runner, window, mel, prompt_, rules, sample_len, options,
                                    t, retried)
            if decoded is not None:
                decodes.append(decoded[1])
            return decoded

        for i, temperature in enumerate(temps):
            decoded = attempt(temperature, prompt)
            if decoded is None:
                return None
            result, stats = decoded
            if i + 1 == len(temps):
                break
            verdict = fallback.judge(result.avg_logprob, self._compression(result),
                                     result.no_speech_prob, thr, options.logprob_threshold,
                                     options.no_speech_threshold)
            if not verdict.needs_fallback:
                break
            self.emit(Note(f"window at {window.start:.1f}s: {verdict.reason}; decoding it again "
                           f"at temperature {temps[i + 1]:g}"))
        if (options.retry_repetitive and thr is not None and bare is not None
                and self._compression(result) > thr):
            # Whisper's loop failure feeds on the previous text: decode again without it.
            self.emit(Note(f"window at {window.start:.1f}s repeats itself; decoding it again "
                           "without the previous text"))
            decoded = attempt(temperature, bare, retried=True)
            if decoded is None:
                return None
            result, stats = decoded
        stats = _charged(stats, decodes)
        if thr is not None and self._compression(result) > thr:
            result.tokens = cut_repetition(result.tokens, tk.timestamp_begin)
            result.compression = None
            stats = replace(stats, tokens=len(result.tokens) + int(result.completed))
        self.emit(WindowDone(stats))
        return result, stats.retried, temperature

    def _compression(self, result: DecodingResult) -> float:
        """The gzip compression ratio of a decode's text (whisper's loop measure), measured
        once per decode: the fallback, the repetition guard and the segments all read it."""
        if result.compression is None:
            result.compression = compression_ratio(self.model.tokenizer.decode(result.tokens))
        return result.compression

    def _attempt(self, runner: WindowRunner, window: Window, mel: LogMel, prompt: list[int],
                 rules: LogitRules, sample_len: int, options: TranscribeOptions,
                 temperature: float, retried: bool):
        """One decode of ``window`` at ``temperature``: beam search (the run's, if any) or
        greedy through the run's decoder, or the best of ``best_of`` seeded samples."""
        search = self._plan.search
        if temperature <= 0:
            if search is not None:
                task = window_task.beam(prompt, rules, sample_len, search,
                                        self._proposer(window))
            else:
                task = window_task.greedy(prompt, rules, sample_len,
                                          lambda: self.strategy.source(window))
            decoded = runner.decode(window, mel, task, self._stop, retried)
            return decoded[0] if decoded is not None else None
        draws = [fallback.SamplingRules.of(rules, temperature, fallback.window_rng(
            options.seed, window.seek, temperature, 2 * draw + int(retried)))
            for draw in range(max(1, options.best_of))]
        batch = self._sample_batching(len(draws))
        if batch:  # the samples side by side (same tokens, fewer passes)
            task = window_task.samples(prompt, draws, sample_len,
                                       [self._sampled_source(window) for _ in draws])
            sampled = runner.decode(window, mel, task, self._stop, retried)
        else:  # one after another
            sampled = []
            for draw in draws:
                task = window_task.greedy(prompt, draw, sample_len,
                                          lambda: self._sampled_source(window))
                decoded = runner.decode(window, mel, task, self._stop, retried)
                if decoded is None:
                    return None
                sampled += decoded
        if sampled is None:
            return None
        # whisper's ranking of best_of samples; the first of equals
        scores = [length_score(r.sum_logprob, len(r.tokens)) for r, _ in sampled]
        result, stats = sampled[scores.index(max(scores))]
        if not batch:
            return result, _charged(stats, [s for _, s in sampled])
        # Side by side, the samples shared one decode's time and passes.
        return result, replace(stats, dropped_decodes=len(sampled) - 1,
                               dropped_tokens=sum(s.tokens for _, s in sampled) - stats.tokens,
                               dropped_passes=max(s.passes for _, s in sampled) - stats.passes)

    def _sample_batching(self, samples: int) -> bool:
        """Are a fallback's samples drawn side by side (:mod:`.samples`), or one after
        another? Side by side needs the batched (beam) decoder, made on the first fallback
        (once per bundle), and rows in it that are bit for bit those of single passes on this
        machine (checked once, as for beam search): then every sample draws the same tokens
        either way. Decided once, a failure included (it is not retried every window)."""
        if samples < 2 or self.model.beam_graph is None:
            return False
        if self._batched is None:
            try:
                self.model.beam_session()
            except Exception:  # noqa: BLE001 - no batched decoder: one sample after another
                self._batched = False
            else:
                self._batched = beams_exact(self.model)
        return self._batched

    def _proposer(self, window: Window) -> StreamProposer | None:
        """Candidates from the drafter's stream for any sequence decoded in ``window`` (None
        when the run has no stream); one per window, shared by its decodes (it only indexes
        the stream)."""
        if self._stream is None:
            return None
        key = (id(self._stream), window.seek)
        if self._window_proposer is None or self._window_proposer[0] != key:
            tk = self.model.tokenizer
            self._window_proposer = (key, StreamProposer(
                self._stream, window.start, tk.timestamp_begin, tk.eot))
        return self._window_proposer[1]

    def _sampled_source(self, window: Window) -> CandidateSource:
        """A sampled decode's candidates (see :mod:`.stream_source`): the decode's own
        repetition, and the drafter's stream (AS²D's; serial SD has none) looked up afresh,
        since the run's aligner follows only the text that is kept. Speculative runs only; a
        target-only run stays the plain decode it is compared with."""
        if not self._sampled_candidates:
            return NO_CANDIDATES
        return SampledSource(self._proposer(window), self.model.tokenizer.timestamp_begin)

    def _speech_only(self, audio: Audio, options: TranscribeOptions, info: TranscriptionInfo
                     ) -> tuple[Audio, vad.Timeline | None]:
        """The VAD filter: ``audio``'s speech chunks joined, and the map back to ``audio``'s
        times (None: no speech at all)."""
        if self.voice_detector is None:
            raise ValueError("the VAD filter needs a voice detector (LongFormTranscriber("
                             "voice_detector=as2d.runtime.vad.silero.SileroVAD()))")
        params = options.vad_parameters  # checked by TranscribeOptions
        t0 = time.perf_counter()
        probs = vad.speech_probabilities(audio.samples, self.voice_detector)
        chunks = vad.speech_chunks(probs, len(audio.samples), params)
        timeline = vad.Timeline(chunks)
        info.extra["vad_chunks"] = [(a / vad.SAMPLE_RATE, b / vad.SAMPLE_RATE)
                                    for a, b in chunks]
        info.extra["vad_speech_seconds"] = timeline.speech_seconds
        info.extra["vad_seconds"] = time.perf_counter() - t0
        self.emit(Note(f"VAD filter: {timeline.speech_seconds:.1f} s of speech in "
                       f"{len(chunks)} chunk(s) kept of {audio.duration:.1f} s "
                       f"({time.perf_counter() - t0:.2f} s)"))
        if not chunks:
            return audio, None
        speech = Audio(vad.join_speech(audio.samples, chunks), audio.source,
                       audio.source_rate, audio.source_channels, audio.truncated)
        return speech, timeline

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
        cr = self._compression(result)
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
