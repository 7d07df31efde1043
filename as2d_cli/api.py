"""as2d from Python: the same engine as the command line, with no terminal attached.

    import as2d

    segments, info = as2d.transcribe("talk.wav", language="en")
    for segment in segments:          # decoded lazily, as you iterate
        print(f"[{segment.start:.2f} → {segment.end:.2f}] {segment.text}")

    with as2d.Transcriber(model="base", drafter="tiny.en") as t:   # models loaded once
        for path in paths:
            segments, info = t.transcribe(path)
            text = "".join(s.text for s in segments)

    result = as2d.ask("talk.wav", "Who does she thank?")   # transcribed once, then cached
    print(result.text, [(e.start, e.end, e.text) for e in result.evidence])

Shaped like faster-whisper's ``WhisperModel.transcribe``: options are keyword arguments, the
result is a lazy generator of :class:`Segment` plus a :class:`TranscriptionInfo` that fills in
as decoding goes (``language`` is set before the first segment is yielded; ``windows`` and
``interrupted`` grow until the generator ends). The audio is read at once (so ``duration`` is
known and a bad file fails early); nothing is decoded until you iterate. One
:class:`Transcriber` runs one transcription at a time. Every
decoder (``"as2d"``, ``"sd"``, ``"target"``) gives the same tokens; they differ only in speed.

Audio is a path (anything libsndfile reads: wav, flac, ogg, mp3) or a numpy array of samples
(16 kHz unless ``sample_rate`` says otherwise): float in ±1, or int8/int16/int32/uint8 PCM
scaled as soundfile reads it; mono ``(frames,)`` or ``(frames, channels)``, mixed down (a
channels-first ``(channels, frames)`` array is refused: pass ``samples.T``). Models are catalog
names (``"base"``, ``"tiny.en"``, ``"base-fp32"``) installed on first use into the user's
cache, or folders.

Options are checked where they are made, as for every face (:class:`TranscribeOptions`, the
same bounds as ``as2d transcribe`` and the server): a bad one raises ``OptionError`` (a
``ValueError``) naming it, before anything is decoded. A transcriber that is never closed is
closed when the interpreter exits, after its transcription in progress stops: no decoding
thread is left inside onnxruntime then (that aborts the process).
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from as2d.engine import AnswerError, AskResult, Engine, EngineSpec, ModelError
from as2d.runtime.audio import Audio, load_audio
from as2d.runtime.events import Listener
from as2d.runtime.transcribe.fallback import DEFAULT_TEMPERATURES
from as2d.runtime.transcribe.longform import Segment, TranscriptionInfo
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions, check_model
from as2d.runtime.transcribe.vad_filter import VadParameters
from as2d.runtime.whisper.alignment import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS

AudioInput = str | Path | np.ndarray

__all__ = ["Transcriber", "transcribe", "ask", "Segment", "TranscriptionInfo"]


def _audio(audio: AudioInput | Audio, sample_rate: int) -> Audio:
    if isinstance(audio, Audio):
        return audio
    if isinstance(audio, np.ndarray):
        return Audio.from_array(audio, sample_rate)
    if not isinstance(audio, (str, os.PathLike)):
        raise TypeError("audio must be a file path or a numpy array of samples, not "
                        f"{type(audio).__name__}")
    return load_audio(Path(audio))


def _shut(engine: Engine, runs: weakref.WeakSet) -> None:
    """Close ``engine`` after the transcriptions still open on it: run by
    :meth:`Transcriber.close`, when the transcriber is collected, or at the interpreter's exit
    (a script that never closed it, or stopped iterating after an error). A decoding thread
    still inside onnxruntime when the interpreter finalizes aborts the whole process
    ("terminate called without an active exception"), so every one is stopped and joined."""
    engine.stop()
    for gen in list(runs):
        try:
            gen.close()  # its worker stops after the current pass and is joined
        except ValueError:  # running in another thread right now: the engine's close waits
            pass
    engine.close()


class Transcriber:
    """A target model, optionally a drafter, and their sessions, loaded once for many files.

    ``decoder``: ``"as2d"`` (default: drafter and target concurrently), ``"sd"`` (classic
    serial speculative decoding) or ``"target"`` (the target alone; no drafter is loaded).
    ``threads``: CPU threads in all (0: every core). ``encoder``: the encoder back end
    (``"auto"``, ``"onnxruntime"``, ``"openvino"``; None: ``$AS2D_ENCODER`` or auto).
    ``progress`` receives one-line notes (a model being installed on first use);
    ``listener`` receives every engine event
    (:mod:`as2d.runtime.events`), for a live display or statistics. ``recording_seconds``: the
    length of the one recording a transcriber is made for, if that is all it is for (the
    one-shot :func:`transcribe` passes it): ``drafter="auto"`` then loads no drafter for one
    window, where it cannot pay for its load (:func:`as2d.engine.lone_window_note`).
    """

    def __init__(self, model: str = "base", *, drafter: str = "auto",
                 decoder: str = "as2d", precision: str | None = None, threads: int = 0,
                 drafter_threads: int = 0, budget: int | None = None,
                 encoder: str | None = None, models_dir: str | Path | None = None,
                 progress: Callable[[str], None] | None = None,
                 listener: Listener | None = None,
                 recording_seconds: float | None = None) -> None:
        self.engine = Engine(EngineSpec(model=model, precision=precision, drafter=drafter,
                                        decoder=decoder, budget=budget, threads=threads,
                                        drafter_threads=drafter_threads, encoder=encoder,
                                        models_dir=models_dir,
                                        recording_seconds=recording_seconds),
                             progress=progress, listener=listener)
        self.decoder = self.engine.decoder
        self.model = self.engine.target
        # Transcriptions not yet run to their end; closed with the transcriber, at the latest at
        # the interpreter's exit (weakref.finalize's own atexit hook).
        self._runs: weakref.WeakSet = weakref.WeakSet()
        self._closer = weakref.finalize(self, _shut, self.engine, self._runs)

    def transcribe(self, audio: AudioInput, *, sample_rate: int = 16000,
                   language: str | None = None, multilingual: bool = False,
                   task: str = "transcribe", timestamps: bool = True,
                   initial_prompt: str | None = None, condition_on_previous_text: bool = True,
                   no_speech_threshold: float | None = 0.6,
                   logprob_threshold: float | None = -1.0,
                   compression_ratio_threshold: float | None = 2.4,
                   temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
                   temperature_increment_on_fallback: float | None = None,
                   best_of: int = 5, seed: int = 0, hotwords: str | None = None,
                   prompt_reset_on_temperature: float = 0.5,
                   vad_filter: bool = False,
                   vad_parameters: VadParameters | dict | None = None,
                   beam_size: int | None = None, patience: float | None = None,
                   length_penalty: float | None = None,
                   word_timestamps: bool = False,
                   prepend_punctuations: str = PREPEND_PUNCTUATIONS,
                   append_punctuations: str = APPEND_PUNCTUATIONS,
                   diarize: bool = False, num_speakers: int | None = None,
                   min_speakers: int | None = None, max_speakers: int | None = None,
                   speakers: Sequence = (),
                   ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """Segments of ``audio`` (lazily) and the run's info.

        ``audio``: a file path, or samples (float, mono or ``[frames, channels]``) at
        ``sample_rate`` Hz. Raises ``as2d.runtime.audio.AudioError`` for a file that cannot be
        read.

        Closing the generator early stops decoding; :meth:`stop` (from another thread, or a
        signal handler) ends it after the current target pass, keeping what was committed.
        Raises ``ValueError`` for a language the model cannot transcribe.
        ``multilingual``: detect the language of every 30-s window (faster-whisper's), for
        audio that changes language; each segment's ``language`` says which.

        Raises ``OptionError`` (a ``ValueError``) for an option out of its bounds (``beam_size``
        and ``best_of`` at most 16, thresholds finite, ``task`` transcribe or translate; a
        translation needs a multilingual model), TypeError for audio that is not a path or an
        array of samples.

        ``temperature``: the fallback schedule (whisper's 0, 0.2, ... 1.0 by default; a single
        number with ``temperature_increment_on_fallback`` grows into one, alone it means no
        fallback, as in faster-whisper; text is a list of numbers, e.g. ``"0,0.5,1"``, with no
        increment unless one is given, where ``--temperature`` adds whisper's 0.2); sampled
        windows draw ``best_of`` samples seeded by ``seed``.
        ``vad_filter``: decode only the speech Silero VAD finds (``vad_parameters``: the
        names of faster-whisper's ``VadOptions``); times stay those of the recording.
        ``beam_size``: beam search at temperature 0 (whisper's; None or 1: greedy, which the
        speculative decoders speed up), ``patience`` and ``length_penalty`` as in whisper;
        raises ``ValueError`` for values whisper refuses.
        ``word_timestamps``: each segment's ``words`` (text, start, end, probability), found
        as whisper finds them, its start and end moved to its first and last word (unless
        that word runs too long, as in whisper); the tokens stay the same.
        ``prepend_punctuations`` / ``append_punctuations``: marks joined to the word after /
        before them (whisper's and faster-whisper's). A model without alignment heads raises
        :class:`~as2d.engine.ModelError` before decoding.
        ``diarize``: who speaks (``num_speakers``, or ``min_speakers``/``max_speakers``;
        ``speakers``: ``("Ann", "ann.wav")`` pairs or ``"Ann=ann.wav"`` naming people from
        short clips): words are timed, each segment and word gets ``speaker`` and segments
        split where it changes (the same tokens); ``info.diarization`` holds the turns. The
        segments then come once the whole recording is decoded and diarized.
        """
        from as2d.runtime.speakers.speaker_options import from_flags

        who = from_flags(diarize, num_speakers, min_speakers, max_speakers, tuple(speakers))
        options = TranscribeOptions.parse(
            language=language, multilingual=multilingual, task=task, timestamps=timestamps,
            initial_prompt=initial_prompt, condition_on_previous_text=condition_on_previous_text,
            no_speech_threshold=no_speech_threshold, logprob_threshold=logprob_threshold,
            compression_ratio_threshold=compression_ratio_threshold, temperature=temperature,
            temperature_increment_on_fallback=temperature_increment_on_fallback,
            best_of=best_of, seed=seed, hotwords=hotwords,
            prompt_reset_on_temperature=prompt_reset_on_temperature, vad_filter=vad_filter,
            vad_parameters=vad_parameters, beam_size=beam_size, patience=patience,
            length_penalty=length_penalty, word_timestamps=word_timestamps or who is not None,
            prepend_punctuations=prepend_punctuations, append_punctuations=append_punctuations)
        check_model(self.model, options)  # an English-only model cannot translate, ...
        if options.word_timestamps:
            self.engine.prepare_alignment()  # a ModelError now, not at the first window
        if vad_filter:
            self.engine.voice_detector()  # a ModelError now rather than at the first segment
        clip = _audio(audio, sample_rate)
        info = TranscriptionInfo(None, 0.0, clip.duration, source=clip.source)

        def segments() -> Iterator[Segment]:
            if who is None:
                yield from self.engine.transcribe(clip, options, info)
                return
            from as2d.runtime.speakers.assign import assign_speakers

            beside = self.engine.diarize_beside(clip.samples, who)
            try:
                done = list(self.engine.transcribe(clip, options, info))
            except BaseException:  # stopped or failed: the rest of the file is not diarized
                beside.stop()
                raise
            info.diarization = beside.result()
            yield from assign_speakers(done, info.diarization.turns)

        gen = segments()
        self._runs.add(gen)
        if clip is not audio:
            # The decoded file (a temporary memmap for long audio) goes with the generator,
            # whether it was run to the end, closed early or never started.
            weakref.finalize(gen, clip.close)
        return gen, info

    def stop(self) -> None:
        """Stop the transcription in progress after the current pass (thread-safe)."""
        self.engine.stop()

    def close(self) -> None:
        """Stop the transcriptions still open and end the worker threads (once; the models
        are freed with the object). Done at the interpreter's exit if never called."""
        self._closer()

    def __enter__(self) -> Transcriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# What :meth:`Transcriber.transcribe` takes: the one-shot call refuses anything else before it
# loads a model (``TranscribeOptions`` has more fields than the API lets a caller set).
_TRANSCRIBE_KEYWORDS = frozenset(inspect.signature(Transcriber.transcribe).parameters)


def transcribe(audio: AudioInput, *, model: str = "base", drafter: str = "auto",
               decoder: str = "as2d", precision: str | None = None, threads: int = 0,
               encoder: str | None = None, models_dir: str | Path | None = None,
               **options: Any) -> tuple[Iterator[Segment], TranscriptionInfo]:
    """Transcribe one recording: ``(segments, info)``, segments decoded as you iterate.

    Loads the models for this call (use :class:`Transcriber` to load them once for many
    files). ``options`` are those of :meth:`Transcriber.transcribe` (``language``, ``task``,
    ``timestamps``, ``initial_prompt``, ...). As ``as2d transcribe FILE`` does, a recording of
    one window is decoded by the target alone unless a drafter is named (the same text).
    """
    sample_rate = options.pop("sample_rate", 16000)
    from as2d.runtime.speakers.speaker_options import from_flags

    who = {k: options.pop(k) for k in ("diarize", "num_speakers", "min_speakers",
                                        "max_speakers", "speakers") if k in options}
    from_flags(who.get("diarize", False), who.get("num_speakers"), who.get("min_speakers"),
               who.get("max_speakers"), tuple(who.get("speakers", ())))  # checked first
    unknown = sorted(set(options) - _TRANSCRIBE_KEYWORDS)
    if unknown:  # as the call below would say, but before the audio and the models
        raise TypeError(f"transcribe() got an unexpected keyword argument {unknown[0]!r}")
    TranscribeOptions.parse(**options)  # a bad option: before the audio and the models
    clip = _audio(audio, sample_rate)  # a bad file or array: before the models
    try:
        transcriber = Transcriber(model, drafter=drafter, decoder=decoder, precision=precision,
                                  threads=threads, encoder=encoder, models_dir=models_dir,
                                  recording_seconds=clip.duration)
    except BaseException:
        if clip is not audio:
            clip.close()
        raise
    try:
        segments, info = transcriber.transcribe(clip, **options, **who)
    except BaseException:
        transcriber.close()
        if clip is not audio:
            clip.close()
        raise
    if clip is not audio:
        weakref.finalize(segments, clip.close)

    def owned() -> Iterator[Segment]:
        try:
            yield from segments
        finally:
            transcriber.close()

    return owned(), info


def ask(audio: AudioInput | None, question: str, *, model: str = "base",
        drafter: str = "auto", llm: str = "gemma-3-270m", decoder: str = "as2d",
        language: str | None = None, candidates: bool = True, max_tokens: int | None = None,
        threads: int = 0, models_dir: str | Path | None = None,
        transcript: str | Path | None = None, cache: bool = True, diarize: bool = False,
        num_speakers: int | None = None, min_speakers: int | None = None,
        max_speakers: int | None = None, speakers: Sequence = ()) -> AskResult:
    """Answer ``question`` about what ``audio`` says: an :class:`~as2d.engine.AskResult`
    (``text``; ``evidence``: the passages it rests on with their times, best first;
    ``abstained``; ``method``; ``to_dict()``: the document ``as2d ask --json`` prints and the
    server's ``/v1/audio/ask`` returns; ``answer``: the answer with its statistics).

    The recording is transcribed (AS²D by default) once: the transcript is kept in the
    models folder's transcript cache, keyed by the audio's content and the options that
    decide the text, so another question about the same audio loads no speech model
    (``cache=False``: transcribe, keep nothing). ``transcript``: a whisper JSON file to answer
    from instead (``audio`` is then None). The answering model (``llm``: the catalog's Gemma 3
    270M, or a Hugging Face ONNX folder) answers from the transcript, with lossless candidates
    from the transcript itself unless ``candidates=False``. ``diarize`` (with the speaker
    counts and ``speakers`` of :func:`transcribe`): the recording is diarized too, each
    evidence passage says who speaks (``speaker``), and "Who said ...?" is answered with the
    speaker of the passage that says it (a transcript file's own ``speaker`` keys serve
    without it). Raises ``ValueError`` for a
    question that cannot be asked (empty, wordless or too long: before any model loads), an
    option out of bounds (``max_tokens`` below 1: ``OptionError``), a transcript file that
    cannot be read, and when there is no speech to answer from; TypeError for a question that
    is not text.
    """
    from as2d.engine import Heard, transcript_key
    from as2d.models.bundle import models_dir as models_root
    from as2d.runtime.ask.answer import AskOptions
    from as2d.runtime.ask.question import question_error
    from as2d.runtime.ask.transcripts import (
        default_cache,
        read_whisper_json,
        samples_digest,
    )

    if not isinstance(question, str):
        raise TypeError(f"question must be text, not {type(question).__name__}")
    problem = question_error(question)
    if problem:
        raise ValueError(problem)
    # Every option checked before anything loads (an OptionError names it).
    opts = AskOptions(candidates=candidates) if max_tokens is None else \
        AskOptions(candidates=candidates, max_tokens=max_tokens)
    options = TranscribeOptions(language=language)
    from as2d.runtime.speakers.speaker_options import from_flags

    who = from_flags(diarize, num_speakers, min_speakers, max_speakers, tuple(speakers))
    if who is not None and transcript is not None:
        raise ValueError("diarize needs the audio; a transcript file says who speaks itself "
                         "(its segments' speaker keys)")
    # The answering model loads beside the speech models and the transcription, and the
    # answerer reads its stored prompt head meanwhile (as ``as2d ask`` does).
    spec = EngineSpec(model=model, drafter=drafter, decoder=decoder, threads=threads,
                      models_dir=models_dir, llm=llm,
                      speakers=who is not None)  # a bad option: before the audio
    store = default_cache(models_root(models_dir)) if cache else None
    if transcript is not None:
        heard = Heard.of(read_whisper_json(transcript), str(transcript))
        with Engine(replace(spec, speech=False)) as engine:
            return _answered_by(lambda: engine.answer(heard, question, opts, cache=store))
    if audio is None:
        raise TypeError("audio must be a file path or a numpy array of samples (or give "
                        "transcript=)")
    digest = clip = None
    if store is not None and isinstance(audio, (str, os.PathLike)) and Path(audio).is_file():
        digest = store.digest(audio)  # found in the cache: the audio is never decoded
        found = store.get(transcript_key(spec, digest, options))
        if found is not None and who is None:
            with Engine(replace(spec, speech=False)) as engine:
                return _answered_by(lambda: engine.answer(Heard.of(found, str(audio)),
                                                          question, opts, cache=store))
        if found is not None:  # its speakers: the audio is diarized (not transcribed)
            clip = _audio(audio, 16000)
            try:
                with Engine(replace(spec, speech=False)) as engine:
                    heard = Heard.of(found, str(audio)).with_speakers(
                        engine.diarizer().diarize(clip.samples, who))
                    return _answered_by(lambda: engine.answer(heard, question, opts, cache=store))
            finally:
                clip.close()
    clip = _audio(audio, 16000)  # a bad file costs nothing else
    try:
        if store is not None and digest is None:
            digest = samples_digest(clip.samples)
        with Engine(replace(spec, recording_seconds=clip.duration)) as engine:
            return _answered_by(lambda: engine.ask(clip, question, opts, options,
                                                   cache=store, digest=digest,
                                                   speakers=who))
    finally:
        if clip is not audio:
            clip.close()


def _answered_by(make: Callable[[], AskResult]) -> AskResult:
    """``make()``'s result, an AnswerError as the ValueError it carries; no answer is a
    ValueError."""
    try:
        result = make()
    except AnswerError as exc:
        raise exc.error from None
    if result.answer is None:
        raise ValueError("no speech found: there is nothing to answer from")
    return result


def diarize(audio: AudioInput, *, sample_rate: int = 16000, num_speakers: int | None = None,
            min_speakers: int | None = None, max_speakers: int | None = None,
            speakers: Sequence[tuple[str, Any]] | Sequence[str] = (), threads: int = 2,
            models_dir: str | Path | None = None,
            progress: Callable[[str], None] | None = None):
    """Who spoke when in ``audio`` (a path or samples): a
    :class:`~as2d.runtime.speakers.diarize.Diarization` (``turns`` of start, end, speaker;
    ``speakers``; ``speaking_time()``; ``to_dict()``). ``speakers``: ``("Ann", "ann.wav")``
    pairs or ``"Ann=ann.wav"`` strings naming people from short clean clips. Raises
    ``ValueError`` for bad counts, audio too short or a reference clip with no speech, and
    ``as2d.engine.ModelError`` for a missing or damaged model."""
    from as2d.models.bundle import BundleError
    from as2d.models.speakers import install_speaker_models
    from as2d.runtime.speakers.pipeline import Diarizer
    from as2d.runtime.speakers.speaker_options import from_flags

    options = from_flags(True, num_speakers, min_speakers, max_speakers, tuple(speakers))
    clip = _audio(audio, sample_rate)
    try:
        try:
            models = install_speaker_models(Path(models_dir) if models_dir else None,
                                            progress=progress)
        except BundleError as exc:
            raise ModelError(str(exc)) from None
        return Diarizer(models.segmentation, models.embedding, threads).diarize(
            clip.samples, options)
    finally:
        if clip is not audio:
            clip.close()
