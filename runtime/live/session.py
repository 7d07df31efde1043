"""Live dictation: audio in, committed text out, decoded by the AS²D engine as speech goes on.

Three threads, so that no stage waits for a slower one:

* the **source** (PortAudio's callback, or a file player) only puts audio into a bounded queue;
* the **listener** thread (:meth:`LiveSession._listen`) runs the voice detector on every 32-ms
  frame, the :class:`~as2d.runtime.live.endpoint.Endpointer`, and decides *what* to decode: the
  growing utterance every ``interval`` seconds of new audio, the utterance's complete audio as
  soon as its end is likely (a speculative final), and its final audio when it has ended;
* the **decoder** thread (:meth:`LiveSession._decode_loop`) decodes one job at a time with a
  :class:`~as2d.runtime.transcribe.longform.LongFormTranscriber` (target-only, SD or AS²D, whose
  drafter runs on a thread of its own) and applies the
  :class:`~as2d.runtime.live.agreement.LocalAgreement` policy.

The decoder never falls behind on what matters: final decodes queue in order and always run;
of the growing-utterance decodes only the newest waits (older ones are stale and dropped), and
a final or speculative-final job cancels a running growing-utterance decode after its current
pass. The utterance's previous committed text prompts the next utterance, as
``condition_on_previous_text`` does for files.

Everything observable is an event (:mod:`as2d.runtime.live.live_events` plus the engine's own);
committed words are never withdrawn, so a writer can append them to a file as they come.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from as2d.runtime.audio import SAMPLE_RATE, Audio
from as2d.runtime.events import (
    LanguageDetected,
    Listener,
    Note,
    RunStarted,
    WindowDone,
    fanout,
    ignore,
)
from as2d.runtime.live.agreement import LocalAgreement
from as2d.runtime.live.audio_input import AudioInputError, AudioSource
from as2d.runtime.live.decode_gate import FINAL, PARTIAL, DecodeGate
from as2d.runtime.live.endpoint import Boundary, EndpointConfig, Endpointer
from as2d.runtime.live.hints import HintedStrategy
from as2d.runtime.live.jobs import Job, Jobs
from as2d.runtime.live.live_events import (
    Committed,
    DecodeStarted,
    Hypothesis,
    ListenDone,
    ListenStarted,
    UtteranceDone,
    UtteranceEnded,
    UtteranceStarted,
    VoiceLevel,
)
from as2d.runtime.live.timeline import Buffer, Clock
from as2d.runtime.rows import rows_exact
from as2d.runtime.transcribe.longform import LongFormTranscriber, TranscriptionInfo
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.runtime.vad.silero import VoiceDetector


@dataclass
class LiveOptions:
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    interval: float = 0.6  # seconds of new audio between decodes of the growing utterance
    first_decode: float = 1.0  # seconds of utterance audio before its first decode
    # Ended utterances waiting for the decoder are decoded together, up to this much audio
    # (one 30-s Whisper window): the encoder costs the same for 2 s as for 28 s.
    merge_seconds: float = 28.0
    # Share of the time the decoder may spend on growing-utterance decodes (an end of speech
    # that finds one running abandons it within one operator, its encoder run included): the
    # rest is left to the VAD, the audio callback and whatever else the machine runs.
    partial_duty: float = 0.5
    agreement: int = 2  # LocalAgreement-n
    language: str | None = None  # None: detected on the first utterance, then kept
    prompt: bool = True  # the previous committed text prompts the next utterance
    prompt_chars: int = 400
    no_speech_threshold: float | None = 0.6
    level_interval: float = 0.1  # seconds between VoiceLevel events
    speculative_final: bool = True  # decode at the tentative end, reuse it if the end holds
    # The previous decode of the same utterance is offered as candidates to the next one.
    hints: bool = True
    # ... and a decode that has one runs without the drafter beside it (see HintedStrategy).
    drafter_with_hints: bool = False


@dataclass
class _Utterance:
    id: int
    agreement: LocalAgreement
    decodes: int = 0
    committed_any: bool = False
    last_commit_wall: float = 0.0
    cache: tuple | None = None  # (span, text, tokens, target seconds) of the latest decode
    hint: list[int] | None = None  # the latest decode's tokens (the next one's candidates)
    settled: bool = False  # a settle committed the text at the current pause
    early_commits: int = 0  # settles after which the speaker went on


class LiveSession:
    """One dictation session: :meth:`start`, then :meth:`wait`; :meth:`stop` finishes the
    utterance in progress, :meth:`abort` keeps only what is already committed."""

    def __init__(self, source: AudioSource, vad: VoiceDetector, transcriber: LongFormTranscriber,
                 options: LiveOptions | None = None, listener: Listener | None = None,
                 decoder: str = "target", drafter: str | None = None,
                 gate: DecodeGate | None = None, owner: str = "live") -> None:
        self.source = source
        # Shared with other sessions and requests on the same engine (a server): each decode
        # holds it while it runs, and nothing else (see decode_gate for who goes next).
        self.gate, self.owner = gate, owner
        self.vad = vad
        self.options = options or LiveOptions()
        self.emit = listener or ignore
        self.transcriber = transcriber
        # The transcriber reports to us too (tokens of each decode, and the start of each
        # run, where a cancellation that came too early is repeated).
        transcriber.emit = fanout(self._tap, _without_language_notes(transcriber.emit))
        self.hinted: HintedStrategy | None = None
        if self.options.hints and not rows_exact(transcriber.model):
            # Verifying a hint's tokens in one pass must give what single passes give; this
            # model (or onnxruntime on this CPU) rounds rows differently, so it decodes alone.
            self.emit(Note(f"{transcriber.model.name}: this model's graph does not compute rows "
                           "independently, so the previous decode is not offered as candidates"))
        elif self.options.hints:
            if not isinstance(transcriber.strategy, HintedStrategy):
                transcriber.strategy = HintedStrategy(transcriber.strategy)
            self.hinted = transcriber.strategy
            self.hinted.drafter_with_hints = self.options.drafter_with_hints
        self.decoder_name, self.drafter_name = decoder, drafter
        self.endpointer = Endpointer(self.options.endpoint, vad.frame_samples, SAMPLE_RATE)
        self.language = self.options.language
        # The job whose decode runs now (None: between decodes). A stop reaches the
        # transcriber only while it runs: one sent between decodes would stop the next one.
        self._decoding: Job | None = None
        self._decoding_lock = threading.Lock()
        self._stop_sent = False  # during the current decode
        self._jobs = Jobs(self._stop_decode)
        self._buffer = Buffer()
        self._clock = Clock(source.speed)
        self._utts: dict[int, _Utterance] = {}
        self._open: int | None = None  # utterance being spoken
        self._last_submit = 0  # stream position of the last growing-utterance decode
        self._tentative = False
        self._stop = threading.Event()
        self._aborted = threading.Event()
        self._done = threading.Event()
        self._listener_done = threading.Event()
        self._job: Job | None = None
        self._win_tokens = 0
        self._win_seconds = 0.0
        self._dropped_noted = 0.0
        self._level = (0.0, -120.0)
        self._next_level = 0
        self.error: str | None = None
        self.results: list[UtteranceDone] = []
        self.committed: list[str] = []  # every committed word, in order
        self._started = 0.0
        self._threads: list[threading.Thread] = []

    # -- control ----------------------------------------------------------------------------------
    def start(self) -> LiveSession:
        self._started = time.perf_counter()
        s = self.source
        self.emit(ListenStarted(s.name, self.vad.name, int(s.rate), s.speed, self.decoder_name,
                                self.transcriber.model.name, self.drafter_name))
        self._threads = [threading.Thread(target=self._listen, name="as2d-listen", daemon=True),
                         threading.Thread(target=self._decode_loop, name="as2d-live-decode",
                                          daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop listening; the utterance in progress is finished and committed."""
        self._stop.set()

    def abort(self) -> None:
        """Stop now: drop queued decodes and cancel the running one; committed text stays."""
        self._stop.set()
        self._aborted.set()
        self._jobs.abort()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def text(self) -> str:
        return " ".join(self.committed)

    def backlog(self) -> tuple[float, int]:
        """(seconds of audio queued at the input, final decodes queued): both stay bounded
        in a session that keeps up."""
        return self.source.queued_seconds, self._jobs.backlog

    # -- the listener thread ----------------------------------------------------------------------
    def _listen(self) -> None:
        reason = "end-of-input"
        stopped_source = False
        try:
            self.source.start()
            while not self._aborted.is_set():
                if self._stop.is_set() and not stopped_source:
                    self.source.stop()
                    stopped_source = True
                try:
                    chunk = self.source.read(0.1)
                except EOFError:
                    reason = "stopped" if self._stop.is_set() else "end-of-input"
                    break
                if chunk is None:
                    continue
                self._ingest(chunk.samples, chunk.wall)
        except AudioInputError as exc:
            self.error = str(exc)
            reason = "input-lost"
        except Exception as exc:  # a bug or a broken detector: say it, keep what we have
            self.error = f"listening failed ({type(exc).__name__}: {exc})"
            reason = "input-lost"
        finally:
            try:
                self.source.stop()
            except Exception:
                pass
            if not self._aborted.is_set():
                for b in self.endpointer.finish(reason):
                    self._boundary(b)
            self._jobs.close()
            self._listener_done.set()

    def _ingest(self, x: np.ndarray, wall: float) -> None:
        buf = self._buffer
        buf.append(x)
        self._clock.add(buf.end, wall)
        dropped = self.source.dropped_seconds
        if dropped - self._dropped_noted >= 0.5:
            self._dropped_noted = dropped
            self.emit(Note(f"the decoder fell behind the microphone: {dropped:.1f} s of audio "
                           "dropped so far", level="warning"))
        ep, f = self.endpointer, self.vad.frame_samples
        level_step = int(self.options.level_interval * SAMPLE_RATE)
        while ep.position + f <= buf.end:
            frame = buf.slice(ep.position, ep.position + f)
            prob = self.vad(frame)
            rms = float(np.sqrt(np.mean(frame * frame) + 1e-12))
            p, db = self._level
            self._level = (max(p, prob), max(db, 20 * math.log10(rms + 1e-10)))
            for b in ep.push(prob):
                self._boundary(b)
            if ep.position >= self._next_level:
                self._next_level = ep.position + level_step
                p, db = self._level
                self._level = (0.0, -120.0)
                self.emit(VoiceLevel(ep.position / SAMPLE_RATE, p, db, ep.active))
        # The growing utterance: decode it again once enough new audio came in.
        if (self._open is not None and not self._tentative
                and ep.position - self._last_submit >= self.options.interval * SAMPLE_RATE
                and ep.position - ep.utterance_start >= self.options.first_decode * SAMPLE_RATE
                and self._partial_allowed()):
            self._submit(self._open, ep.utterance_start, ep.position, final=False)
        # Keep the open utterance's audio and enough before it for the next start's padding.
        keep = ep.utterance_start if ep.active else ep.position
        pad = int((self.options.endpoint.pad + self.options.endpoint.min_speech + 1.0)
                  * SAMPLE_RATE)
        buf.trim(min(keep, ep.position) - pad)

    def _partial_allowed(self) -> bool:
        """Decode the growing utterance only when the decoder is idle, and has been for long
        enough to keep its share of growing-utterance work at ``partial_duty``."""
        jobs = self._jobs
        if not jobs.idle() or (self.gate is not None and not self.gate.free()):
            return False
        duty = min(1.0, max(0.05, self.options.partial_duty))
        gap = jobs.last_partial_seconds * (1.0 / duty - 1.0)
        return time.perf_counter() - jobs.last_finished >= gap

    def _boundary(self, b: Boundary) -> None:
        if b.kind == "start":
            self._open = b.utterance
            self._tentative = False
            self._utts[b.utterance] = _Utterance(b.utterance,
                                                 LocalAgreement(self.options.agreement))
            self._last_submit = b.start
            self.emit(UtteranceStarted(b.utterance, b.start / SAMPLE_RATE))
        elif b.kind == "tentative":
            self._tentative = True
            if self.options.speculative_final:
                self._submit(b.utterance, b.start, b.end, final=False, urgent=True)
        elif b.kind == "settle":
            # The pause is long enough: commit the speculative final's text now (the decode
            # started at the tentative end; this job reuses it, or waits for it).
            u = self._utts.get(b.utterance)
            if u is not None:
                u.settled = True
            self._submit(b.utterance, b.start, b.end, final=False, urgent=True, commit=True,
                         speech_end=b.speech_end)
        elif b.kind == "resume":
            self._tentative = False
            u = self._utts.get(b.utterance)
            if u is not None and u.settled:  # read on the listener thread only
                u.settled = False
                u.early_commits += 1
        elif b.kind == "end":
            self._open = None
            self._tentative = False
            self.emit(UtteranceEnded(b.utterance, b.start / SAMPLE_RATE, b.end / SAMPLE_RATE,
                                     b.speech_end / SAMPLE_RATE, b.reason))
            self._submit(b.utterance, b.start, b.end, final=True, speech_end=b.speech_end,
                         reason=b.reason)

    def _submit(self, utt: int, start: int, end: int, final: bool, urgent: bool = False,
                speech_end: int = 0, reason: str = "", commit: bool = False) -> None:
        samples = self._buffer.slice(start, end)
        if len(samples) == 0:
            return
        job = Job(utt, start, end, samples, final, time.perf_counter(), urgent=urgent,
                  speech_end=speech_end, reason=reason, commit=commit)
        if final:
            job.speech_end_wall = self._clock.wall_of(speech_end)
        else:
            self._last_submit = end
        self._jobs.submit(job)

    # -- the decoder thread -----------------------------------------------------------------------
    def _decode_loop(self) -> None:
        try:
            while True:
                job = self._jobs.take()
                if job is None:
                    break
                if job.final:
                    job = self._merge_backlog(job)
                t0 = time.perf_counter()
                try:
                    self._run(job)
                finally:
                    self._jobs.finished(time.perf_counter() - t0)
        except Exception as exc:  # the models failed: stop listening, keep what is committed
            self.error = self.error or f"decoding failed ({type(exc).__name__}: {exc})"
            self._stop.set()
            self._aborted.set()
            self._jobs.abort()
        finally:
            self._listener_done.wait()
            interrupted = self._stop.is_set() and self.error is None
            audio = self.endpointer.position / SAMPLE_RATE
            self.emit(ListenDone(len(self.results), interrupted, self.error,
                                 time.perf_counter() - self._started, audio))
            self._done.set()

    def _merge_backlog(self, job: Job) -> Job:
        """Join the finals queued behind ``job`` into one decode while they fit one window.

        Only utterances with nothing committed yet are joined (their text is settled by this
        one decode), and only consecutive ones, so the dictation keeps its order.
        """
        limit = int(self.options.merge_seconds * SAMPLE_RATE)
        members = [(job.utterance, job.speech_end, job.speech_end_wall)]
        parts = [job.samples]
        total = len(job.samples)

        def fresh(uid: int) -> bool:
            u = self._utts.get(uid)
            return u is None or not u.agreement.committed

        if not fresh(job.utterance):
            return job
        last = job
        while True:
            nxt = self._jobs.take_mergeable(
                lambda j, last=last, total=total: j.utterance == last.utterance + 1
                and fresh(j.utterance) and total + len(j.samples) <= limit)
            if nxt is None:
                break
            members.append((nxt.utterance, nxt.speech_end, nxt.speech_end_wall))
            parts.append(nxt.samples)
            total += len(nxt.samples)
            self._utts.pop(nxt.utterance, None)
            last = nxt
        if len(members) == 1:
            return job
        merged = Job(job.utterance, job.start, last.end, np.concatenate(parts), True,
                     job.submitted, last.speech_end_wall, last.speech_end, last.reason,
                     members=members)
        self.emit(Note(f"decoder behind: utterances {members[0][0]}-{members[-1][0]} decoded "
                       "together", level="debug"))
        return merged

    def _run(self, job: Job) -> None:
        u = self._utts.get(job.utterance)
        if u is None:  # pragma: no cover - a job always follows its start boundary
            u = self._utts[job.utterance] = _Utterance(job.utterance,
                                                       LocalAgreement(self.options.agreement))
        if job.cancelled:
            return
        reused = u.cache is not None and u.cache[0] == job.span
        if reused:
            _, text, tokens, target_s = u.cache
            seconds = 0.0
        else:
            self.emit(DecodeStarted(job.utterance, job.start / SAMPLE_RATE,
                                    job.end / SAMPLE_RATE, job.final,
                                    time.perf_counter() - job.submitted, job.urgent))
            with self._turn(job) as turn:
                if turn is None:  # stale before its turn came
                    return
                t0 = time.perf_counter()
                out = self._decode(job)
                seconds = time.perf_counter() - t0
            if out is None:  # cancelled: a newer job made it stale
                return
            text, tokens, target_s = out
            u.cache = (job.span, text, tokens, target_s)
            u.decodes += 1
        # A settle commits the whole hypothesis, like a final, but the utterance stays open.
        new = u.agreement.update(text, final=job.final or job.commit)
        now = time.perf_counter()
        if new:
            self.committed.extend(new)
            self.emit(Committed(job.utterance, " ".join(new), not u.committed_any, job.final))
            u.committed_any = True
            u.last_commit_wall = now
        self.emit(Hypothesis(job.utterance, u.agreement.committed_text,
                             u.agreement.tentative_text, job.final,
                             (job.end - job.start) / SAMPLE_RATE, seconds, tokens, target_s,
                             reused))
        if job.final:
            members = job.members or [(job.utterance, job.speech_end, job.speech_end_wall)]
            latencies = tuple(max(0.0, u.last_commit_wall - wall) for _, _, wall in members
                              if u.committed_any and wall is not None)
            latency = latencies[-1] if latencies else None
            done = UtteranceDone(job.utterance, u.agreement.committed_text,
                                 job.start / SAMPLE_RATE, job.end / SAMPLE_RATE,
                                 job.speech_end / SAMPLE_RATE, job.reason, latency, u.decodes,
                                 tokens, target_s, len(members), latencies, u.early_commits)
            self.results.append(done)
            self._utts.pop(job.utterance, None)
            self.emit(done)

    def _turn(self, job: Job):
        """Hold the shared gate (if any) for ``job``'s decode: end-of-speech decodes (finals,
        speculative finals, settles) go first; a growing-utterance decode may be stopped to
        let one of them, or a request, go first."""
        if self.gate is None:
            return contextlib.nullcontext(True)

        def preempt() -> None:
            self._stop_decode(job)

        kind = FINAL if job.final or job.urgent or job.commit else PARTIAL
        return self.gate.hold(self.owner, kind, abandon=lambda: job.cancelled,
                              preempt=preempt)

    def _stop_decode(self, job: Job | None = None) -> None:
        """Cancel ``job`` (None: the one running) and stop its decode if it runs now; a job
        whose decode has not begun does not begin, one whose decode returned keeps it."""
        with self._decoding_lock:
            if job is not None:
                job.cancelled = True
            running = self._decoding
            if running is not None and (job is None or running is job):
                running.cancelled = True
                self._stop_sent = True
                self.transcriber.stop()

    def _decode(self, job: Job) -> tuple[str, int, float] | None:
        with self._decoding_lock:
            if job.cancelled:
                return None
            self._decoding, self._stop_sent = job, False
        try:
            return self._decode_now(job)
        finally:
            with self._decoding_lock:
                self._decoding = None
                if self._stop_sent:  # it may have come as the run ended, after its reset
                    self.transcriber.discard_stop()
                self._stop_sent = False

    def _decode_now(self, job: Job) -> tuple[str, int, float] | None:
        opts = TranscribeOptions(language=self.language, initial_prompt=self._prompt(job),
                                 no_speech_threshold=self.options.no_speech_threshold)
        audio = Audio(job.samples, source=f"utterance {job.utterance}")
        info = TranscriptionInfo(None, 0.0, audio.duration)
        self._job = job
        self._win_tokens, self._win_seconds = 0, 0.0
        u = self._utts.get(job.utterance)
        if self.hinted is not None:
            self.hinted.previous = u.hint if u is not None and not job.members else None
            self.hinted.last = None
        texts: list[str] = []
        gen = self.transcriber.transcribe(audio, opts, info)
        try:
            for seg in gen:
                texts.append(seg.text)
        finally:
            gen.close()
            self._job = None
            if self.hinted is not None:
                if u is not None and self.hinted.last:
                    u.hint = self.hinted.last  # even a cancelled decode's prefix is a good guess
                self.hinted.previous = None  # set again for each decode, or no hint
        if info.interrupted:  # cancelled (a decode that completed first is still good)
            return None
        if self.language is None and info.language and (job.final or
                                                        info.language_probability >= 0.8):
            self.language = info.language
            self.emit(Note(f"language: {info.language} (p={info.language_probability:.2f}), "
                           "kept for the rest of the session"))
        return "".join(texts).strip(), self._win_tokens, self._win_seconds

    def _prompt(self, job: Job) -> str | None:
        """The dictation so far, before this utterance: Whisper continues its style."""
        if not self.options.prompt or not self.committed:
            return None
        done_words = len(self.committed) - len(self._utts[job.utterance].agreement.committed) \
            if job.utterance in self._utts else len(self.committed)
        text = " ".join(self.committed[:done_words])[-self.options.prompt_chars:]
        if " " in text and len(text) >= self.options.prompt_chars:
            text = text[text.index(" ") + 1:]
        return text or None

    def _tap(self, event) -> None:
        """Engine events of the running decode (called on the engine's threads)."""
        if isinstance(event, WindowDone):
            self._win_tokens += event.stats.tokens
            self._win_seconds += event.stats.decode_seconds
        elif isinstance(event, RunStarted):
            job = self._job
            if job is not None and job.cancelled:
                self._stop_decode(job)  # the cancellation came before the run cleared it


def _without_language_notes(listener: Listener) -> Listener:
    """Every decode of an undetermined language reports its detection; the session reports
    the language once, when it settles it, so these repeated events are dropped."""

    def emit(event) -> None:
        if isinstance(event, LanguageDetected):
            return
        listener(event)

    return emit
