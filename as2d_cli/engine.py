"""The engine's one front door: every face builds its engine here, from one spec.

``as2d transcribe``, ``mic``, ``ask``, ``bench`` and ``batch``, the Python API and the server
all describe what they want as an :class:`EngineSpec` (models, decoder, threads, encoder back
end, VAD, word timing, answering model) and get an :class:`Engine`. Building one is where the
decisions live, so that no face can differ from another by omission:

- the thread plan (:func:`plan_threads`): the target always gets every core, as target-only
  decoding does, so speed comparisons are honest; pools spin only where the engine has the
  cores to itself (``shares_cores`` is False and the target decodes alone);
- what loads beside what: the drafter and the answering model load on threads while the
  target loads here (onnxruntime builds sessions without the GIL);
- whether a drafter pays at all: ``--drafter auto`` leaves it out of a one-shot run of one
  recording that fits in one window (:func:`lone_window_note`), where its load costs more than it
  can save;
- the row check (:func:`as2d.runtime.rows.rows_exact`) before any speculation: a target whose
  passes are not row-exact decodes alone, with a note, because speculation could change its
  text;
- the VAD and the word aligner, made before any decoding, so that a missing piece fails
  before a whole transcription rather than after it.

Nothing here touches a terminal: notes go to ``progress``, events to the listener, and
whatever the user can fix is a :class:`~as2d.loading.ModelError` with a one-line message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from as2d import loading
from as2d.loading import ModelError, Progress
from as2d.runtime.events import Listener, fanout, ignore
from as2d.runtime.option_errors import OptionError, check_name
from as2d.runtime.sessions import Background, cpu_count

__all__ = ["AnswerError", "AskResult", "Decoder", "Engine", "EngineSpec", "Heard", "ModelError",
           "SharedModels", "ThreadPlan", "lone_window_note", "plan_threads", "MAX_BUDGET",
           "ONE_WINDOW_SECONDS"]

MAX_BUDGET = 448  # Whisper's whole text context: no pass can verify more candidates
AUTO = "auto"  # the drafter for the language at hand (as2d.loading.choose_drafter)
FIRST_DRAFTER = "tiny.en"  # auto's drafter until the language is known
ONE_WINDOW_SECONDS = 30.0  # the audio one Whisper window holds
# Most threads the diarizer beside a transcription takes: it gets the cores the decoding
# leaves (ThreadPlan), at least one. On 2 cores that is one: its models then take a fifth less
# CPU (15.6 s against 19.3 s for a 10.5-min recording, measured alone), and beside a
# transcription that holds both cores the CPU is what it costs; it still ends well before the
# decoding (bench/results/diarization-cost-words32-epyc-2026-12-07.json). ``as2d.diarize``
# alone takes its own ``threads``.
SPEAKER_THREADS = 2


class Decoder(StrEnum):
    """How a run decodes: ``as2d`` (drafter and target concurrently), ``sd`` (classic serial
    speculative decoding) or ``target`` (the target alone). All three give the same text.

    A ``StrEnum``, so a member is also the plain string the engine and the JSON outputs use.
    """

    AS2D = "as2d"
    SD = "sd"
    TARGET = "target"

    @classmethod
    def parse(cls, value: str) -> Decoder:
        """``value`` as a Decoder; ValueError with a one-line message otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise OptionError("decoder", f"must be as2d, sd or target, not {value!r}") from None


@dataclass(frozen=True)
class ThreadPlan:
    total: int
    target: int  # target encoder and decoder
    drafter: int
    spin: bool = False  # the target's sessions have the cores to themselves

    def as_dict(self) -> dict:
        return {"total": self.total, "target": self.target, "drafter": self.drafter}


def plan_threads(total: int, decoder: Decoder | str, drafter_threads: int = 0,
                 shares_cores: bool = False) -> ThreadPlan:
    """Threads per session. The target always gets every core for its encoder and decoder
    (as target-only does, so the comparison is honest), one session per graph: a second
    decoder session with fewer threads for the passes beside the drafter held a second copy
    of the packed weights and was measured no faster (0.2.0 had one). The drafter gets one
    thread unless told otherwise. Only a target that decodes alone on cores nobody else needs
    spins its pools between operators (:mod:`as2d.runtime.sessions`): a microphone's callback,
    a VAD or another Ray actor would lose the core to a spinning pool."""
    total = max(1, total)
    if decoder == "target":
        return ThreadPlan(total, total, 0, spin=not shares_cores)
    if decoder == "sd":  # serial: each model has every core while it runs
        return ThreadPlan(total, total, drafter_threads or total)
    return ThreadPlan(total, total, max(1, drafter_threads or 1))


def parse_budget(budget: int | str | None) -> int | None:
    """Candidates per pass: a number from 1 to :data:`MAX_BUDGET`, or None for the adaptive
    budget (``auto``); ValueError with a one-line message otherwise."""
    if budget in (None, "auto"):
        return None
    try:
        value = int(budget)
    except (TypeError, ValueError):
        value = 0
    if not 1 <= value <= MAX_BUDGET:
        raise OptionError("budget", f"must be a number from 1 to {MAX_BUDGET} or auto, not "
                          f"{budget!r}")
    return value


@dataclass(frozen=True)
class EngineSpec:
    """Everything an engine is built from. Plain values, so a spec can cross a process
    boundary (Ray actors build their engines from one)."""

    model: str = "base"
    precision: str | None = None
    drafter: str = AUTO  # or a model: auto drafts with tiny.en, or base on another language
    decoder: Decoder | str = Decoder.AS2D  # asked for; Engine.decoder is what is built
    budget: int | str | None = "auto"  # candidates per verification pass, or auto
    threads: int = 0  # 0: every core
    drafter_threads: int = 0  # 0: one (AS²D) or every core (SD)
    encoder: str | None = None  # auto | onnxruntime | openvino; None: $AS2D_ENCODER or auto
    models_dir: str | Path | None = None
    llm: str | None = None  # the answering model, loaded beside the speech models
    llm_precision: str | None = None
    vad: bool = False  # Silero VAD (transcribe's vad_filter, live sessions)
    word_timestamps: bool = False  # the alignment graph, made and loaded before decoding
    speakers: bool = False  # the diarization models, loaded beside the speech models
    shares_cores: bool = False  # a microphone, a VAD or other workers share the cores
    # The length of the one recording a one-shot run (`as2d transcribe FILE`, `as2d ask`)
    # decodes, where it is known before the models load; None for an engine that serves many.
    recording_seconds: float | None = None
    # False: no speech model is loaded, only the answering model (`as2d ask` about a cached
    # transcript or a transcript file: a follow-up question loads nothing it does not use).
    speech: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder", Decoder.parse(self.decoder))
        parse_budget(self.budget)
        if self.threads < 0 or self.drafter_threads < 0:
            raise OptionError("threads", "and {0} cannot be negative", ("drafter_threads",))
        for name, value in (("model", self.model), ("drafter", self.drafter),
                            ("llm", self.llm)):  # before any of them is looked up as a path
            if value is None and (name == "llm" or self.decoder == Decoder.TARGET):
                continue  # none is needed: no answering model, or the target decodes alone
            check_name(name, value)


def speech_identity(spec: EngineSpec) -> dict:
    """What decides the text a spec's speech model writes, for the transcript cache's key
    (:mod:`as2d.runtime.ask.transcripts`): the model (its bundle manifest's digest: a re-converted
    bundle is another model), the encoder back end asked for, the machine that chose and runs
    it and the runtime versions (back ends differ in the last bits). Not the decoder, drafter
    or threads: they are lossless. Resolving a catalog name installs it on first use, as
    loading it would."""
    import hashlib
    import os
    from importlib import metadata

    from as2d.runtime.whisper.encoders import ENV_OV_PRECISION, requested_backend

    folder = loading.resolve_bundle_dir(spec.model, spec.precision, spec.models_dir,
                                        kind="whisper")
    manifest = folder / "manifest.json"
    if manifest.is_file():
        made = hashlib.sha256(manifest.read_bytes()).hexdigest()
    else:  # a Hugging Face export used in place: its files' names, sizes and times
        made = sorted((p.name, p.stat().st_size, int(p.stat().st_mtime))
                      for p in folder.iterdir() if p.is_file())
    versions = {}
    for package in ("onnxruntime", "openvino"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    # `auto`'s back end is chosen per machine (CPU, libraries, int8 kernel) and model, and
    # remembered: the machine keeps a cache shared between machines from mixing their texts.
    from as2d.runtime.sessions import machine

    return {"model": folder.name if manifest.is_file() else str(folder.resolve()), "made": made,
            "encoder": requested_backend(spec.encoder), "machine": machine(),
            "openvino_precision": os.environ.get(ENV_OV_PRECISION, "").strip().lower() or None,
            **versions}


def transcript_key(spec: EngineSpec, audio_digest: str, options=None) -> str:
    """The transcript cache's key of a recording (its digest: :func:`as2d.runtime.ask.
    transcripts.file_digest`) transcribed by ``spec``'s speech model with ``options`` (a
    ``TranscribeOptions``; every field counts, as any may change the text)."""
    from dataclasses import asdict

    from as2d.runtime.ask.transcripts import transcript_key as key

    return key(audio_digest, speech_identity(spec),
               asdict(options or _default_options()))


def lone_window_note(spec: EngineSpec) -> str | None:
    """Why ``spec``'s run decodes with the target alone although it asks for AS²D (a note for
    the user), or None when the drafter is loaded.

    The automatic drafter is left out of a one-shot run whose only recording fits in one
    window. The drafter's load (its sessions, its encoder) and its encoder run are a fixed cost
    paid beside the target's own load and encoder, while the passes it can save are one
    window's. Measured on 2 cores (AMD Zen 4, whole ``as2d transcribe`` processes, interleaved
    rounds, medians; ``bench/results/cold-one-window-zen4-2026-12-04.json``, 6 rounds,
    and ``bench/results/cold-break-even-zen4-2026-12-04.json``, 4 rounds): a 10-s clip took
    1.04 s with the drafter and 0.87 s without, 28 s 1.81 and 1.66 s; against ``--decoder
    target``, a 44-s file (two windows) 1.91 and 1.85 s, 98 s 3.98 and 3.94 s, 196 s 7.07 and
    7.65 s: drafting pays
    somewhere between 98 and 196 s, so the line is drawn at one window, where it never does.
    The text is the same either way (lossless); an explicit ``--drafter`` drafts regardless.
    """
    seconds = spec.recording_seconds
    if (spec.drafter != AUTO or spec.decoder != Decoder.AS2D or seconds is None
            or seconds > ONE_WINDOW_SECONDS):
        return None
    return (f"one window of audio ({seconds:.1f} s): the target decodes alone, a drafter would "
            "cost more than it saves (--drafter tiny.en drafts anyway; the text is the same)")


@dataclass
class AskResult:
    """One ``ask`` run's answer document (:meth:`Engine.ask`), which every face renders:
    ``as2d ask`` prints :attr:`answer`'s text (or :meth:`to_dict` with ``--json``),
    ``as2d.ask`` returns :attr:`answer`, the server's ``/v1/audio/ask`` responds
    :meth:`to_dict`."""

    question: str
    source: str  # the recording, as the document names it
    duration: float  # the whole recording's length, in seconds
    # The transcription's TranscriptionInfo: language, plan (decoder, drafter); its plan is
    # None when nothing was transcribed in this run (a cached transcript, a transcript file).
    info: Any
    spans: list  # the transcript answered from (as2d.runtime.ask.spans.Span)
    interrupted: bool  # the transcription was stopped before the end (a signal, a cancel)
    target: str | None  # the speech model (None: a transcript file's is not known)
    # The Answer (as2d.runtime.ask.answer.Answer); None: nothing to answer from (no speech,
    # or stopped before a window was committed) or a run cancelled before answering.
    answer: Any = None
    llm: str | None = None  # the answering model, once it answered
    candidates: str = "off"  # "verified", "off", or "unavailable: ..." (not row-exact)
    transcription: Any = None  # the transcription's RunStats, where a collector listened
    # Where the transcript came from: "transcribed" (in this run), "cache" (an earlier run's,
    # as2d.runtime.ask.transcripts), "file" (a whisper JSON transcript)
    origin: str = "transcribed"

    @property
    def text(self) -> str | None:
        """The answer's text (None without an answer)."""
        return self.answer.text if self.answer is not None else None

    @property
    def evidence(self) -> tuple:
        """The passages the answer rests on, best first (as2d.runtime.ask.evidence.Evidence);
        () without an answer."""
        return self.answer.evidence if self.answer is not None else ()

    @property
    def abstained(self) -> bool:
        """No answer cleared the bar (the answer's text says the recording does not say)."""
        return self.answer is not None and self.answer.abstained

    @property
    def method(self) -> str | None:
        """How the answer was reached (extracted, generated, not said, ...)."""
        return self.answer.method if self.answer is not None else None

    @property
    def transcribed(self) -> float:
        """Seconds of the recording the spans reach (all of it, unless interrupted)."""
        return self.spans[-1].end if self.spans else 0.0

    def to_dict(self) -> dict:
        """The JSON document (``as2d ask --json``, the server's response): the answer's own
        fields, then the run's. ValueError when there is no answer (nothing was heard)."""
        if self.answer is None:
            raise ValueError("no answer: nothing was transcribed to answer from")
        doc = self.answer.to_dict()
        plan = self.info.plan
        doc.update(
            source=self.source, duration=round(self.duration, 3), language=self.info.language,
            interrupted=self.interrupted, transcript=self.origin,
            models={"target": self.target, "drafter": plan.drafter if plan else None,
                    "decoder": plan.decoder if plan else None, "llm": self.llm},
            candidates=self.candidates,
            stats={"transcription": self.transcription.summary()
                   if self.transcription is not None else None,
                   "answer": self.answer.stats.to_dict()})
        return doc


@dataclass
class Heard:
    """The transcript one ``ask`` run answers from (:meth:`Engine.hear`): transcribed now,
    from the transcript cache, or read from a file (:meth:`of`); with the transcription's
    ``TranscriptionInfo`` and statistics when it was transcribed now."""

    transcript: Any  # as2d.runtime.ask.transcripts.Transcript
    source: str  # the recording (or transcript file), as the document names it
    info: Any = None
    interrupted: bool = False
    transcription: Any = None  # RunStats

    @classmethod
    def of(cls, transcript, source: str) -> Heard:
        return cls(transcript, source)

    def with_speakers(self, diarization) -> Heard:
        """This transcript with each span's speaker (the one talking over most of it) from
        ``diarization`` (a ``Diarization``); the text and times unchanged
        (:func:`as2d.runtime.ask.attribution.label_spans`)."""
        from dataclasses import replace

        from as2d.runtime.ask.attribution import label_spans

        spans = tuple(label_spans(self.transcript.spans, diarization.turns))
        return replace(self, transcript=replace(self.transcript, spans=spans))


class AnswerError(ValueError):
    """:meth:`Engine.ask` could not answer, after the transcription: ``stage`` is
    ``"answerer"`` (options the answering model cannot honour: a prompt style it has no
    template for) or ``"answer"`` (this question under this model: no room for the prompt,
    ...). ``error`` is the ValueError raised (an OptionError names its option); the message is
    its message."""

    def __init__(self, stage: str, error: ValueError) -> None:
        super().__init__(str(error))
        self.stage, self.error = stage, error


WhisperLoader = Callable[[str, str | None, int, str, bool], object]
"""``(name, precision, threads, role, spin) → model``: how an engine loads a Whisper model
(default: :func:`as2d.loading.load_whisper` into the spec's models folder). A benchmark that
runs several configurations passes one that shares models between them."""


class SharedModels:
    """Whisper models loaded once and shared by several engines (a benchmark runs many
    configurations on the same sessions): an engine's ``load_whisper``. One model per name,
    thread count, role and spinning (a session's thread pool is fixed when it is made)."""

    def __init__(self, models_dir: str | Path | None = None, encoder: str | None = None,
                 progress: Progress | None = None) -> None:
        self.models_dir, self.encoder, self.progress = models_dir, encoder, progress
        self._loaded: dict = {}

    def __call__(self, name: str, precision: str | None, threads: int, role: str,
                 spin: bool):
        key = (name, precision, threads, role, spin)
        if key not in self._loaded:
            self._loaded[key] = loading.load_whisper(
                name, precision, self.models_dir, threads, progress=self.progress, role=role,
                encoder=self.encoder, spin=spin)
        return self._loaded[key]

    def encoders(self) -> dict[str, str]:
        """``"base (target, 2 threads)" → "openvino bf16 (measured: …)"`` for every model
        loaded so far: which encoder back end each one runs (a benchmark reports them)."""
        return {f"{name} ({role}, {threads} thread{'s' if threads != 1 else ''})":
                model.encoder_name for (name, _, threads, role, _), model in self._loaded.items()}


@dataclass
class _Parts:
    """What loads beside the target, started before it and settled after it."""

    drafter: Background | None = None
    llm: Background | None = None


class Engine:
    """Loaded models and the machinery around them, for many runs: transcribe, prefetch the
    next file, answer questions, run a live session; stop and close.

    One engine runs one decode at a time (a server queues requests to it). ``listener``
    receives every engine event (:mod:`as2d.runtime.events`); ``progress`` one-line notes (a
    model installed on first use, a target that decodes alone), possibly from a loading
    thread.
    """

    def __init__(self, spec: EngineSpec, *, progress: Progress | None = None,
                 listener: Listener | None = None,
                 load_whisper: WhisperLoader | None = None,
                 llm: Background | None = None) -> None:
        """``llm``: the spec's answering model, already loading (:func:`start_answering_model`:
        ``as2d ask`` starts it before it looks for a cached transcript, which it needs either
        way); None: started here when the spec names one."""
        self.spec = spec
        self.note = progress or (lambda message: None)
        self.listener = listener or ignore
        alone = lone_window_note(spec)
        # The decoder this engine runs: the spec's, or the target alone where a drafter would
        # not pay, planned (spinning included) exactly as `--decoder target`, also beside an
        # answering model's build in `as2d ask` (2 cores, 7 interleaved cold runs of a 10-s
        # clip: spinning 1.27 s, not spinning 1.30 s, medians). Once the target is loaded, a
        # target whose rows fail the check decodes alone too (below).
        self.decoder = Decoder.TARGET if alone else spec.decoder
        self.thread_plan = plan_threads(spec.threads or cpu_count(), self.decoder,
                                 spec.drafter_threads, spec.shares_cores)
        load = self._load = load_whisper or self._load_whisper
        parts = _Parts()
        self.strategy = self._llm = None
        self.target = self.transcriber = self._active = None
        # Why this engine's runs decode with less than the spec asks for (None: as asked):
        # carried into every run's plan (as2d.runtime.transcribe.plan).
        self._reason: str | None = alone
        # auto: other drafters for languages tiny.en cannot draft (made on first use)
        self._by_language: dict[str | None, object] = {}
        self._reasons: dict[str | None, str | None] = {}  # why each of them decodes alone
        # The run in progress (stop() reaches it and nothing else: a stop with no run going
        # on must not stop the next one), and what may be made from another thread (a
        # prefetch comes from the reader's).
        self._lock = threading.Lock()
        self._running = None
        self._answerers: list[Background] = []
        self._closed = False
        # The answering model: the caller's, already loading, or found (or installed) here
        # first, so that a missing package costs nothing else.
        if llm is None and spec.llm:
            llm = start_answering_model(spec, self.note)
        self._speakers: Background | None = None
        if not spec.speech:  # answers transcripts only: the answering model (and the speaker
            self._llm = llm  # models, for a cached transcript's speakers: as2d ask --diarize)
            if spec.speakers:
                self._start_speakers()
            return
        try:
            parts.llm = llm
            if alone:
                self.note(alone)
            if self.decoder != Decoder.TARGET:
                first = FIRST_DRAFTER if spec.drafter == AUTO else spec.drafter
                parts.drafter = Background(load, first, None, self.thread_plan.drafter,
                                           "drafter", False, name="as2d-load-drafter")
            self.target = load(spec.model, spec.precision, self.thread_plan.target, "target",
                               self.thread_plan.spin)
            self.strategy, reason = self._strategy(parts.drafter)
            self._reason = self._reason or reason
            # What was built: the target alone also where its rows failed the check.
            self.decoder = Decoder(self.strategy.name)
        except BaseException:
            if parts.llm is not None:
                _settle(parts.llm)
            raise
        finally:
            if parts.drafter is not None:
                _settle(parts.drafter)  # taken, or not needed: no loader left in onnxruntime
        self._llm = parts.llm
        # The speaker models load on a thread while the transcription starts.
        if spec.speakers:
            self._start_speakers()
        from as2d.runtime.transcribe.longform import LongFormTranscriber

        self.transcriber = self._active = LongFormTranscriber(self.target, self.strategy,
                                                              self.listener)
        try:
            if spec.vad:
                self.transcriber.voice_detector = self.voice_detector()
            if spec.word_timestamps:
                self.prepare_alignment()
        except BaseException:
            self.close()
            raise

    # -- building ---------------------------------------------------------------------------
    def _load_whisper(self, name: str, precision: str | None, threads: int, role: str,
                      spin: bool):
        return loading.load_whisper(name, precision, self.spec.models_dir, threads,
                                    progress=self.note, role=role, encoder=self.spec.encoder,
                                    spin=spin)

    def _strategy(self, drafter: Background | None):
        """``(strategy, reason)``: the run strategy the spec's decoder means on this target,
        and why it is the target alone where the spec asked for a drafter (else None)."""
        from as2d.runtime.rows import rows_exact
        from as2d.runtime.speculative.budget import Budget
        from as2d.runtime.transcribe.strategy import TargetOnly

        decoder = self.decoder
        if decoder == Decoder.TARGET:
            return TargetOnly(self.target, self.listener), None
        if not rows_exact(self.target):
            # Verifying k tokens in one pass must give what k single passes give; this graph
            # (or this onnxruntime on this CPU) rounds differently, so speculation could
            # change the text.
            reason = (f"{self.target.name}: this model's graph does not compute rows "
                      "independently, so speculative decoding could change its output; "
                      "decoding with the target alone")
            self.note(reason)
            return TargetOnly(self.target, self.listener), reason
        draft_model = drafter.result() if isinstance(drafter, Background) else drafter
        budget = Budget(fixed=parse_budget(self.spec.budget))
        if decoder == Decoder.AS2D:
            from as2d.runtime.transcribe.as2d import AS2D

            return AS2D(self.target, draft_model, self.listener, budget), None
        from as2d.runtime.transcribe.sd import SerialSD

        return SerialSD(self.target, draft_model, self.listener, budget), None

    def _start_speakers(self) -> Background:
        """The speaker models' loader, started on its thread on the first call."""
        if self._speakers is None:
            self._speakers = Background(self._load_speakers, name="as2d-load-speakers")
        return self._speakers

    def _load_speakers(self):
        from as2d.models.speakers import install_speaker_models
        from as2d.runtime.speakers.pipeline import Diarizer

        models = install_speaker_models(
            Path(self.spec.models_dir).expanduser() if self.spec.models_dir else None,
            progress=self.note)
        try:
            spare = cpu_count() - self.thread_plan.target - self.thread_plan.drafter
            return Diarizer(models.segmentation, models.embedding,
                            max(1, min(SPEAKER_THREADS, spare)))
        except ValueError as exc:
            raise ModelError(str(exc)) from None

    def diarizer(self):
        """The loaded :class:`~as2d.runtime.speakers.pipeline.Diarizer` (loaded now if this
        engine was not made with ``speakers``); a missing or damaged model is a
        :class:`ModelError`."""
        from as2d.models.bundle import BundleError

        with self._lock:
            pending = self._start_speakers()
        try:
            return pending.result()
        except BundleError as exc:
            raise ModelError(str(exc)) from None

    def diarize_beside(self, samples, options=None):
        """Diarize ``samples`` on a thread while this engine transcribes them: a
        :class:`~as2d.runtime.speakers.pipeline.RunningDiarization` (``.result()`` the
        Diarization; ``.stop()`` when the transcription was cancelled or failed, so nobody
        waits for the rest of the file). The transcript is not touched: speakers are put on it
        afterwards (:func:`as2d.runtime.speakers.assign.assign_speakers`)."""
        from as2d.runtime.speakers.pipeline import RunningDiarization

        return RunningDiarization(self.diarizer, samples, options)

    def prepare_alignment(self) -> None:
        """Make and load the target's word-alignment graph now (once): a model that cannot
        time words is a :class:`ModelError` before anything is decoded."""
        from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
        from as2d.runtime.whisper.alignment import AlignmentError, WordAligner

        try:
            WordAligner.for_run(self.target, None, TranscribeOptions(word_timestamps=True))
        except AlignmentError as exc:
            raise ModelError(str(exc)) from None

    def voice_detector(self):
        """Silero VAD for transcribe's ``vad_filter`` (made once per engine)."""
        self._needs_speech()
        if self.transcriber.voice_detector is None:
            self.transcriber.voice_detector = _voice_detector()
            for run in self._by_language.values():
                run.voice_detector = self.transcriber.voice_detector
        return self.transcriber.voice_detector

    # -- what it offers ---------------------------------------------------------------------
    def _needs_speech(self) -> None:
        if self.transcriber is None:
            raise RuntimeError("this engine has no speech model (EngineSpec.speech is False)")

    @property
    def loaded_drafter(self) -> str | None:
        """The drafter this engine loaded for its runs (None: the target decodes alone), as
        :attr:`decoder` is the decoder it built; one run may still go without it (a language
        the drafter cannot draft), which that run's plan says (``TranscriptionInfo.plan``)."""
        return self.strategy.drafter_name if self.strategy is not None else None

    def add_listener(self, listener: Listener) -> None:
        """Also send every engine event to ``listener``."""
        self.listener = fanout(self.listener, listener)
        with self._lock:
            runs = [r for r in (self.transcriber, *self._by_language.values()) if r is not None]
        for run in runs:
            run.add_listener(listener)
            run.strategy.add_listener(listener)

    def transcribe(self, audio, options=None, info=None) -> Iterator:
        """Segments of ``audio`` (an :class:`~as2d.runtime.audio.Audio`) as they are decoded;
        ``info`` (a ``TranscriptionInfo``) fills in as decoding goes. ``options``: a
        ``TranscribeOptions``; ``vad_filter`` needs an engine made with ``vad``, or makes the
        VAD now."""
        self._needs_speech()
        if options is not None and options.vad_filter:
            self.voice_detector()
        run, reason = self._for_language(options)
        plan = None
        if info is not None:  # read by the faces even when the run never starts (a Ctrl-C)
            try:
                plan = info.plan = run.plan(options or _default_options(), reason)
            except ValueError:
                pass  # raised by the run, on iteration, where its other checks are

        def segments() -> Iterator:
            if options is not None:  # raised where the run's own checks are: on iteration
                from as2d.runtime.transcribe.transcribe_options import check_model

                check_model(self.target, options)  # an English-only model cannot translate
            with self._lock:
                self._running = self._active = run
            try:
                yield from run.transcribe(audio, options, info, reason, plan)
            finally:
                with self._lock:
                    self._running = None

        return segments()

    def prefetch(self, audio, options=None) -> None:
        """``audio`` is the next recording: its log-mel and the drafter's head start begin now
        (thread-safe; call it while the current one is decoded)."""
        self._needs_speech()
        self._for_language(options)[0].prefetch(audio, options)

    def _for_language(self, options):
        """``(transcriber, reason)``: the transcriber whose drafter suits ``options.language``
        (auto drafter only): tiny.en for English or an unknown language, else
        :func:`as2d.loading.choose_drafter`'s choice, loaded on first use, or the target alone
        when nothing smaller would save time; and why its runs decode with less than the spec
        asks for (None: as asked), for their plans. An explicit drafter is used for every
        language."""
        language = options.language if options is not None else None  # a code: parsed once
        if (self.spec.drafter != AUTO or self.decoder == Decoder.TARGET
                or language is None or self.strategy.drafter_name is None):
            return self.transcriber, self._reason
        name, why = loading.choose_drafter(self.target, language)
        if name == FIRST_DRAFTER:
            return self.transcriber, self._reason
        with self._lock:  # one run per language, whichever thread asks first
            if self._closed:
                raise RuntimeError("the engine is closed")
            if language not in self._by_language:
                self._make_run(language, name, why)
            return self._by_language[language], self._reasons[language]

    def _make_run(self, language: str, name: str | None, why: str):
        """A transcriber with the drafter ``name`` (None: the target alone) for ``language``
        (called under the lock: loading a drafter is seconds, once per language)."""
        from as2d.runtime.events import Note
        from as2d.runtime.transcribe.longform import LongFormTranscriber
        from as2d.runtime.transcribe.strategy import TargetOnly

        self.listener(Note(f"drafter: {why}"))
        if name is None:
            strategy, reason = TargetOnly(self.target, self.listener), f"drafter: {why}"
        else:
            strategy, reason = self._strategy(self._load(name, None, self.thread_plan.drafter,
                                                         "drafter", False))
        run = LongFormTranscriber(self.target, strategy, self.listener)
        run.voice_detector = self.transcriber.voice_detector
        self._by_language[language] = run
        self._reasons[language] = reason

    def drafted_text(self) -> str | None:
        """The drafter's own transcript of the last decode (its candidate stream, in the target
        Whisper's token ids), as text; None without a drafter. ``ask`` looks candidates up in
        it."""
        from as2d.runtime.ask.answer import drafter_text

        if self._active is None:
            return None
        return drafter_text(self._active.strategy, self.target)

    def prepare_answerer(self, options=None, listener: Listener | None = None,
                         question: str | None = None) -> Background:
        """Start making the answerer (:class:`~as2d.runtime.ask.answer.Answerer`) on a thread,
        after the answering model has loaded; with ``question``, the prompt head's stored KV
        rows are read there too. ``.result()`` waits for it and raises what failed (a
        :class:`ModelError`, or ValueError for options the model cannot honour)."""
        if self._llm is None:
            raise ModelError("no answering model was loaded (give the engine an llm)")
        pending = self._llm

        def make():
            from as2d.runtime.ask.answer import Answerer

            answerer = Answerer(pending.result(), listener, options)
            if question is not None:
                answerer.warm(question)
            return answerer

        pending = Background(make, name="as2d-answerer")
        self._answerers.append(pending)  # settled by close()
        return pending

    def ask(self, audio, question: str, options=None, transcribe_options=None, *,
            source: str | None = None, listener: Listener | None = None, stats=None,
            on_interrupt: Callable[[], None] | None = None,
            cancelled: Callable[[], bool] | None = None, cache=None,
            digest: str | None = None, speakers=None) -> AskResult:
        """Transcribe ``audio`` (an :class:`~as2d.runtime.audio.Audio`) and answer ``question``
        from what it says: the run's :class:`AskResult`, with no answer when there was nothing
        to answer from. :meth:`hear` then :meth:`answer`, the answerer made (and its prompt
        head read) beside the transcription, so that one that cannot be made fails as soon as
        that is known, not after the whole recording.

        ``options``: an ``AskOptions`` (default: its defaults); ``transcribe_options``: a
        ``TranscribeOptions``; ``source``: the recording's name in the document (default:
        ``audio.source``). ``listener`` receives the answer's events (the transcription's go
        to the engine's listener); ``stats``: the ``StatsCollector`` listening to this engine,
        whose run becomes the document's transcription statistics. ``cache`` (a
        :class:`~as2d.runtime.ask.transcripts.TranscriptCache`) and ``digest`` (the audio's
        content digest): the transcript is taken from the cache, or kept there once made.
        ``speakers`` (a ``SpeakerOptions``): the recording is diarized too, beside the
        transcription, and every span says who speaks over it, so a "who said ..." question
        is answered with a speaker (:mod:`as2d.runtime.ask.attribution`).

        Stopping: with ``on_interrupt``, a first KeyboardInterrupt (Ctrl-C; ``as2d`` raises one
        for SIGTERM and SIGHUP too) during the transcription stops it after the current pass,
        calls ``on_interrupt`` and answers from what was transcribed; a second one, or any
        without ``on_interrupt``, propagates. ``cancelled`` is asked after each segment and
        before answering: true stops the transcription and leaves the answer out.

        Raises what the transcription raises (ValueError for options the model cannot
        honour), a :class:`ModelError` for an answering model that cannot load, and
        :class:`AnswerError` when the answer cannot be made."""
        pending = self.prepare_answerer(options, listener, question)
        try:
            heard = self.hear(audio, transcribe_options, source=source, stats=stats,
                              on_interrupt=on_interrupt, cancelled=cancelled, cache=cache,
                              digest=digest, pending=pending, speakers=speakers)
            return self.answer(heard, question, options, pending=pending, listener=listener,
                               cancelled=cancelled, cache=cache)
        finally:
            _settle(pending)  # not needed (no speech, an error): nor is its error
            if pending in self._answerers:  # a server asks many times: settled, forgotten
                self._answerers.remove(pending)

    def transcript_key(self, digest: str, options=None) -> str:
        """The transcript cache's key of the audio whose content digest is ``digest``,
        transcribed by this engine's speech model with ``options``."""
        return transcript_key(self.spec, digest, options)

    def hear(self, audio, options=None, *, source: str | None = None, stats=None,
             on_interrupt: Callable[[], None] | None = None,
             cancelled: Callable[[], bool] | None = None, cache=None,
             digest: str | None = None, pending: Background | None = None,
             speakers=None) -> Heard:
        """The transcript of ``audio``: the ``cache``'s, when it holds one for ``digest`` (the
        audio's content) and ``options``, else transcribed now (and kept in the cache when the
        whole recording was transcribed). ``pending``: an answerer being made, whose failure
        stops the transcription. ``speakers`` (a ``SpeakerOptions``): diarized beside the
        transcription (alone for a cached transcript), each span given its speaker (the
        cache keeps the transcript without them: the same text either way); not when the
        transcription was interrupted. The rest as :meth:`ask`."""
        from as2d.runtime.ask.spans import spans_from_segments
        from as2d.runtime.ask.transcripts import Transcript
        from as2d.runtime.transcribe.longform import TranscriptionInfo

        beside = None if speakers is None else self.diarize_beside(audio.samples, speakers)
        try:
            name = audio.source if source is None else source
            key = self.transcript_key(digest, options) if cache is not None and digest else None
            found = cache.get(key) if key is not None else None
            if found is not None:
                heard = Heard(found, name)
            else:
                info = TranscriptionInfo(None, 0.0, audio.duration)
                segments, interrupted = self._hear(audio, options, info, pending,
                                                   on_interrupt, cancelled)
                run = stats.runs[-1] if stats is not None and stats.runs else None
                transcript = Transcript(tuple(spans_from_segments(segments)), info.language,
                                        audio.duration, self.drafted_text(),
                                        self.target.name, "transcribed", key)
                stopped = interrupted or (cancelled is not None and cancelled())
                if key is not None and transcript.spans and not stopped:
                    cache.put(key, transcript)  # (without speakers: the same text)
                heard = Heard(transcript, name, info, interrupted, run)
        except BaseException:
            if beside is not None:
                beside.stop()  # nobody waits for the rest of the file
            raise
        if beside is None:
            return heard
        if heard.interrupted or not heard.transcript.spans or (
                cancelled is not None and cancelled()):
            beside.stop()
            return heard
        return heard.with_speakers(beside.result())

    def answer(self, heard: Heard, question: str, options=None, *,
               pending: Background | None = None, answerer=None,
               listener: Listener | None = None,
               cancelled: Callable[[], bool] | None = None, cache=None) -> AskResult:
        """The answer to ``question`` about a transcript (:meth:`hear`'s, or a transcript
        file's: :meth:`Heard.of`), as an :class:`AskResult`: one document whatever face
        renders it. The answerer: ``answerer``, else ``pending``'s, else one made now; many
        questions about one recording share one (:meth:`answerer`). No answer when there is
        no text, or when ``cancelled()``. ``cache``: the transcript cache in use; the
        transcript's KV rows are kept beside the answering model only where its transcript
        may be kept (None: neither)."""
        from as2d.runtime.ask.answer import AskOptions
        from as2d.runtime.events import Note
        from as2d.runtime.transcribe.longform import TranscriptionInfo

        options = options or AskOptions()
        t = heard.transcript
        info = heard.info or TranscriptionInfo(t.language, 1.0, t.duration, heard.source)
        result = AskResult(question, heard.source, t.duration, info, list(t.spans),
                           heard.interrupted, t.model, transcription=heard.transcription,
                           origin=t.origin)
        if not result.spans or (cancelled is not None and cancelled()):
            return result
        if heard.interrupted:
            (listener or ignore)(Note("transcription interrupted: answering from the "
                                      f"{result.transcribed:.0f} s transcribed so far"))
        if answerer is None:
            if pending is None:
                pending = self.prepare_answerer(options, listener, question)
            answerer = _answerer(pending)
        result.llm = answerer.model.name
        result.candidates = ("off" if not options.candidates else "verified"
                             if answerer.lossless else
                             "unavailable: the model's passes are not row-exact")
        try:
            result.answer = answerer.ask(result.spans, question, t.drafted,
                                         language=t.language, keep_rows=cache is not None)
        except ValueError as exc:
            raise AnswerError("answer", exc) from None
        return result

    def _hear(self, audio, options, info, pending: Background | None,
              on_interrupt: Callable[[], None] | None,
              cancelled: Callable[[], bool] | None) -> tuple[list, bool]:
        """``ask``'s transcription: ``(segments, interrupted)``."""

        def kept(segment) -> None:
            if cancelled is not None and cancelled():
                self.stop()  # (a stop reaches only a run in progress)
            if pending is not None and pending.done():  # an answering model that cannot
                _answerer(pending)  # load: say so now

        return self.collect(audio, options, info, on_segment=kept, on_interrupt=on_interrupt)

    def collect(self, audio, options=None, info=None, *,
                on_segment: Callable[[object], None] | None = None,
                on_interrupt: Callable[[], None] | None = None) -> tuple[list, bool]:
        """Run a transcription to its end: ``(segments, interrupted)``. With ``on_interrupt``,
        a first KeyboardInterrupt (Ctrl-C, or a signal turned into one) stops the run after the
        current pass, calls it and keeps every segment decoded so far; a second one, or any
        without ``on_interrupt``, propagates. ``on_segment`` sees each segment as it is kept."""
        segments: list = []
        interrupted = False
        run = self.transcribe(audio, options, info)
        try:
            while True:
                # A signal may arrive while a segment is kept, not only while the next one
                # is awaited: both are inside the try.
                try:
                    for segment in run:
                        segments.append(segment)
                        if on_segment is not None:
                            on_segment(segment)
                    break
                except KeyboardInterrupt:
                    if on_interrupt is None or interrupted:
                        raise
                    interrupted = True
                    self.stop()
                    on_interrupt()
        finally:
            run.close()
        return segments, interrupted or (info is not None and info.interrupted)

    def answerer(self, options=None, listener: Listener | None = None):
        """The answerer, once the answering model has loaded (waits for it)."""
        return self.prepare_answerer(options, listener).result()

    def live_session(self, source, options=None, listener: Listener | None = None,
                     vad: str = "silero", gate=None, owner: str = "live"):
        """A live session (:class:`~as2d.runtime.live.session.LiveSession`) over ``source``:
        the growing utterance decoded by this engine's models. ``listener`` receives the
        session's events and its decodes' (committed words among them; the strategy's go to
        the engine's listener, as for files). ``vad``: the voice detector, ``silero`` or
        ``energy``, made here with a state of its own for this session (a
        :class:`ModelError` when it cannot run). ``gate``: a
        :class:`~as2d.runtime.live.decode_gate.DecodeGate` the session shares with the other
        users of this engine (``owner`` names it there); without one it decodes whenever it
        likes, so the caller runs nothing else on this engine meanwhile."""
        from as2d.runtime.live.session import LiveSession
        from as2d.runtime.transcribe.longform import LongFormTranscriber

        # A transcriber of its own: the session taps its events for the whole session.
        transcriber = LongFormTranscriber(self.target, self.strategy, listener)
        return LiveSession(source, _voice_detector(vad), transcriber, options, listener,
                           self.strategy.name, self.strategy.drafter_name, gate, owner)

    def new_voice_detector(self, vad: str = "silero"):
        """A voice detector with a state of its own (``silero`` or ``energy``), as a live
        session gets: for a face that follows a stream's speech itself (the Wyoming server
        finds where a request's speech ends). A :class:`ModelError` when it cannot run."""
        return _voice_detector(vad)

    def stop(self) -> None:
        """Stop the transcription in progress after the current pass (thread-safe); nothing
        when none is in progress (a stop is not kept for the next run)."""
        with self._lock:
            if self._running is not None:
                self._running.stop()

    def close(self) -> None:
        """End the encoder runs started ahead and the drafter's worker thread (the models are
        freed with the object). Waits for an answering model still loading."""
        with self._lock:
            self._closed = True
        if self.transcriber is not None:
            self.transcriber.close()
        if self.strategy is not None:
            self.strategy.close()
        for pending in self._answerers:
            _settle(pending)
        for run in self._by_language.values():
            run.close()
            run.strategy.close()
        if self._llm is not None:
            _settle(self._llm)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_answering_model(spec: EngineSpec, progress: Progress | None = None) -> Background:
    """``spec``'s answering model, loaded and row-checked on a thread, beside the speech
    models and the transcription (or, for a follow-up question, beside the rest of the start-up:
    its session takes 0.4 s to make); an :class:`Engine` made with it takes it. A catalog name
    is resolved (installed on first use) first, here, so that a missing package fails before
    anything else is loaded (a :class:`ModelError`)."""
    note = progress or (lambda message: None)
    name = spec.llm
    if not name:
        raise ModelError("no answering model was named (give the engine an llm)")
    if not Path(name).expanduser().is_dir():
        name = str(loading.resolve_bundle_dir(name, spec.llm_precision, spec.models_dir,
                                              progress=note, kind="llm"))
    threads = max(1, spec.threads or cpu_count())  # (every plan's total: plan_threads)

    def load():
        lm = loading.load_llm(name, spec.llm_precision, spec.models_dir, threads,
                              progress=note)
        # The one-line answer's stop set (a scan of a Hugging Face vocabulary, 0.15 s for
        # 262k tokens) and the row check, here beside the transcription.
        lm.tokenizer.newline_ids()
        _ = lm.lossless
        return lm

    return Background(load, name="as2d-load-llm")


def _voice_detector(kind: str = "silero"):
    """A voice detector (``silero`` or ``energy``): the engine makes every one, for
    transcribe's VAD filter and each live session."""
    from as2d.runtime.vad.silero import VADUnavailable, make_vad

    try:
        return make_vad(kind)
    except VADUnavailable as exc:
        raise ModelError(f"voice activity detection: {exc}") from None


def answerer_from(pending: Background):
    """The answerer ``pending`` (:meth:`Engine.prepare_answerer`) made, once it is made;
    options the model cannot honour as an AnswerError ("answerer")."""
    return _answerer(pending)


def _answerer(pending: Background):
    """The answerer ``pending`` made; options the model cannot honour as an AnswerError."""
    try:
        return pending.result()
    except ValueError as exc:
        raise AnswerError("answerer", exc) from None


def settle(pending: Background | None) -> None:
    """Wait for a model loading on a thread (:func:`start_answering_model`), whatever its
    outcome, before the process goes on to exit."""
    if pending is not None:
        _settle(pending)


def _settle(pending: Background) -> None:
    """Wait for a loading thread whatever its outcome: no loader may be inside onnxruntime
    when the process exits, and an error nobody needs is nobody's."""
    try:
        pending.result()
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP while waiting: the user's, not its
        raise
    except BaseException:  # noqa: BLE001 - not needed: neither is its error
        pass


def _default_options():
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    return TranscribeOptions()
