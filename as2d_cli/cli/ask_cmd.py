"""``as2d ask FILE QUESTION...``: answer questions about a recording, accelerated twice.

Stage 1 transcribes the file as ``as2d transcribe`` does (AS²D: the drafter streams candidates,
the target verifies; a recording of one window by the target alone, where a drafter would not
pay), once: the transcript is kept in the transcript cache beside the models
(:mod:`as2d.runtime.ask.transcripts`), so a follow-up question about the same audio loads no
speech model at all. ``--transcript FILE.json`` answers from a whisper JSON transcript instead.
Stage 2 prompts the answering LLM with the transcript and each question and generates the
answer with candidates looked up in the transcript, the drafter's stream (when one ran) and the
question, verified losslessly by the answering model (:mod:`as2d.runtime.ask.answer`).

Every question goes through one pipeline (:meth:`as2d.engine.Engine.answer`) and yields one
document (:class:`as2d.engine.AskResult`); the output format only renders it: the answer and
its evidence (``[0:03–0:08] "…"``) on stdout, or the document with ``--json``. Progress, notes
and ``--stats`` go to stderr. No question on the command line: questions are read from stdin,
one a line, until an empty line or the end (a ``?`` prompt on a terminal).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.decoding import parse_decoder
from as2d.cli.errors import UserError, err, interrupt_code, stopped_by
from as2d.cli.resolve import make_note
from as2d.engine import Decoder
from as2d.runtime.option_errors import as_flags

HELP = """Answer questions about a recording: transcribe it once, then ask the answering model.

Each answer is printed with the passages of the transcript it rests on, with their times.
Several questions may follow the file; with none, they are read from stdin, one a line. The
transcript is kept in the models folder's transcript cache, so a later question about the
same audio is answered without transcribing it again (--no-cache: transcribe anyway;
--clear-cache: empty it). --transcript FILE.json asks about a whisper JSON transcript instead.

Both stages are accelerated losslessly: AS²D for the transcript (a recording of one
window, 30 s, is transcribed by the target alone: a drafter costs more than it saves there),
and candidates from the transcript, the drafter's stream and the question for the answer.
"""

AskModel = opt.reworded(opt.Model, "Speech (target) model: base, tiny.en or a folder.")
AskDrafter = opt.reworded(opt.Drafter, "Drafter model for the transcription; auto: none for "
                                       "a recording of one window (30 s).")
AskDecoder = opt.reworded(opt.DecoderName, "Transcription decoder: as2d, sd or target (same "
                                           "text).")
AskPrecision = opt.reworded(opt.Precision, "int8 (default, fastest) or fp32, for the speech "
                                           "and answering models (a name like base-fp32 sets "
                                           "one alone).")
AskStats = opt.reworded(opt.Stats, "Print both stages' throughput to stderr (answer "
                                   "tokens/s, acceptance by source).")
AskLanguage = opt.reworded(opt.Language, "Spoken language; default: detect.")


@dataclass
class AskRequest:
    """Everything ``as2d ask`` was asked; each field is also its command-line option."""

    file: Annotated[str | None, typer.Argument(
        metavar="FILE", help="Audio file (wav, flac, ogg, mp3, ...); left out with "
                             "--transcript.", show_default=False)] = None
    questions: Annotated[list[str] | None, typer.Argument(
        metavar="[QUESTION]...", help="Questions, each in quotes; none: read from stdin, one "
                                      "a line, until an empty line.", show_default=False)] = None
    model: AskModel = "base"
    drafter: AskDrafter = "auto"
    decoder: AskDecoder = Decoder.AS2D
    llm: Annotated[str, typer.Option(
        "--llm", help="Answering model: a catalog name, a GGUF file (llama.cpp's: Llama, "
                      "Qwen2/3, Phi-3, Gemma 2/3), ollama:NAME[:TAG] from Ollama's store, or a "
                      "folder (as2d bundle, or a Hugging Face ONNX export with model.onnx + "
                      "tokenizer.json).")] = "gemma-3-270m"
    precision: AskPrecision = None
    # None: AskOptions' answer length, every face's (shown here for --help; a test holds
    # the two together, without loading the answerer's code for every command).
    max_tokens: Annotated[int | None, typer.Option(
        "--max-tokens", "-n", help="Longest answer, in tokens.  [default: 48]",
        show_default=False)] = None
    threads: opt.Threads = 0
    encoder: opt.Encoder = None
    json: Annotated[bool, typer.Option(
        "--json", help="Print the answer's JSON document: answer, evidence (the passages "
                       "with their times, best first), abstained, method, statistics (a list "
                       "of them for several questions; one a line when read from stdin).")] = False
    transcript: Annotated[Path | None, typer.Option(
        "--transcript", help="Answer from this whisper JSON transcript (as2d transcribe -f "
                             "json, or openai-whisper's) instead of an audio file.",
        show_default=False)] = None
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Transcribe the audio even if its transcript is cached (and do "
                           "not keep it).")] = False
    clear_cache: Annotated[bool, typer.Option(
        "--clear-cache", help="Remove every cached transcript first (alone: just that).")] = False
    stats: AskStats = False
    live: opt.Live = None
    language: AskLanguage = None
    models_dir: opt.ModelsDir = None
    quiet: opt.Quiet = False
    no_candidates: Annotated[bool, typer.Option(
        "--no-candidates", help="Generate the answer without speculative candidates "
                                "(target-only, for comparison; same answer).")] = False
    style: Annotated[str | None, typer.Option(
        "--prompt-style", help="Prompt format (qa, qa-timed, qa-plain, qa-single, chat, "
                               "instruct); default: qa, or instruct for models with a chat "
                               "template.")] = None
    diarize: Annotated[bool, typer.Option(
        "--diarize", help="Tell the speakers apart (beside the transcription): each passage "
                          "of the evidence says who speaks, and \"Who said ...?\" is answered "
                          "with the speaker of the passage that says it.")] = False
    num_speakers: opt.NumSpeakers = None
    min_speakers: opt.MinSpeakers = None
    max_speakers: opt.MaxSpeakers = None
    speaker: opt.SpeakerRefs = None
    context: Annotated[int | None, typer.Option(
        "--context", help="Use at most this many tokens of the answering model's context "
                          "(longer transcripts are cut to the passages most related to the "
                          "question).")] = None

    speakers: object = field(init=False, default=None)  # SpeakerOptions, or None

    def __post_init__(self) -> None:
        self.decoder = parse_decoder(self.decoder)
        self.questions = list(self.questions or [])
        if self.transcript is not None and self.file is not None:
            # No audio file with --transcript: what click took for FILE is the first question.
            self.questions.insert(0, self.file)
            self.file = None

    @property
    def source(self) -> str:
        return str(self.transcript if self.transcript is not None else self.file)


def register(app: typer.Typer) -> None:
    """Add ``as2d ask`` to ``app`` (once, however often it is called)."""
    add_command(app, "ask", AskRequest, run_ask, HELP, no_args_is_help=True)


def check_question(question: str) -> None:
    from as2d.runtime.ask.question import question_error

    problem = question_error(question)
    if problem:
        raise UserError(problem, 2)


def validate(req: AskRequest) -> None:
    from as2d.runtime.ask.prompt import STYLES

    if req.file is None and req.transcript is None and not req.clear_cache:
        raise UserError("give an audio FILE (or --transcript FILE.json)", 2)
    if req.file == "-" and not req.questions:
        raise UserError("the audio comes from stdin (-): give the questions on the command "
                        "line", 2)
    for question in req.questions:
        check_question(question)
    from as2d.cli.decoding import check_decoder_options

    check_decoder_options(threads=req.threads, language=req.language)
    if req.precision not in (None, "int8", "fp32"):
        raise UserError(f"--precision must be int8 or fp32, not {req.precision!r}", 2)
    if req.max_tokens is not None and req.max_tokens < 1:
        raise UserError("--max-tokens must be at least 1", 2)
    if req.style is not None and req.style not in STYLES:
        raise UserError(f"--prompt-style must be one of {', '.join(STYLES)}, not {req.style!r}",
                        2)
    if req.context is not None and req.context < 128:
        raise UserError("--context must be at least 128 tokens", 2)
    from as2d.runtime.speakers.speaker_options import from_flags

    try:  # the one rule for speaker options, every face's
        req.speakers = from_flags(req.diarize, req.num_speakers, req.min_speakers,
                                  req.max_speakers, req.speaker or ())
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    if req.speakers is not None:
        if req.transcript is not None:
            raise UserError("--diarize needs the audio FILE; a --transcript file says who "
                            "speaks itself (as2d transcribe --diarize -f json)", 2)
        for _, ref in req.speakers.references:
            if not Path(ref).is_file():
                raise UserError(f"--speaker: {ref}: no such file", 2)


def run_ask(req: AskRequest) -> int:
    """Transcribe (or find the transcript), then answer each question; the exit code (130 if
    the transcription or the questions were stopped by Ctrl-C)."""
    from as2d.cli.resolve import start_answering_model
    from as2d.engine import EngineSpec
    from as2d.models.bundle import models_dir
    from as2d.runtime.ask.transcripts import default_cache

    validate(req)
    note = make_note(req.quiet)
    cache = None if req.no_cache else default_cache(models_dir(req.models_dir))
    if req.clear_cache:
        from as2d.runtime.llm.prefix_cache import clear_transcripts

        removed, size = cache.clear() if cache is not None else (0, 0)
        rows, rows_size = clear_transcripts(models_dir(req.models_dir))
        note(f"removed {removed} cached transcript{'s' * (removed != 1)} and {rows} file"
             f"{'s' * (rows != 1)} of transcript rows ({(size + rows_size) / 1e6:.1f} MB)")
        if req.file is None and req.transcript is None:
            return 0
    spec = EngineSpec(model=req.model, precision=req.precision, drafter=req.drafter,
                      decoder=req.decoder, threads=req.threads, encoder=req.encoder,
                      models_dir=req.models_dir, llm=req.llm, llm_precision=req.precision,
                      speakers=req.speakers is not None)
    # The answering model is needed whether the transcript is cached, read from a file or
    # made now: its session (0.4 s to make) loads from here on, beside the look-up and the
    # rest of the start-up, which a follow-up question otherwise waited for. (Not for an
    # audio or transcript file that is not there: that is said at once, as before.)
    missing = any(f not in (None, "-") and not Path(f).is_file()
                  for f in (req.file, req.transcript))
    llm = None if missing else start_answering_model(spec, note)
    try:
        return _run_ask(req, spec, cache, llm, note)
    finally:
        from as2d.engine import settle

        settle(llm)  # (taken by the engine, or not: no loader left inside onnxruntime)


def _run_ask(req: AskRequest, spec, cache, llm, note) -> int:
    """:func:`run_ask` once the answering model is loading (``llm``; None: the engine starts
    it)."""
    from as2d.cli.ask_display import make_ask_reporter
    from as2d.cli.resolve import build_engine
    from as2d.engine import Heard
    from as2d.runtime.ask.answer import AskOptions
    from as2d.runtime.ask.transcripts import TranscriptError, read_whisper_json
    from as2d.runtime.events import fanout
    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    # No audio to decode when the transcript is a file or cached: a follow-up question loads
    # the answering model alone. A bad input costs nothing else.
    length = {} if req.max_tokens is None else {"max_tokens": req.max_tokens}
    # The same options whatever the output format: the answer never depends on it.
    options = AskOptions(candidates=not req.no_candidates, style=req.style,
                         context_tokens=req.context, **length)
    transcribe_options = TranscribeOptions(language=req.language)
    heard = digest = audio = None
    if req.transcript is not None:
        try:
            heard = Heard.of(read_whisper_json(req.transcript), str(req.transcript))
        except TranscriptError as exc:
            raise UserError(str(exc)) from None
    else:
        heard, digest = _cached(req, spec, cache, transcribe_options)
        if heard is not None:
            note("transcript from the cache (--no-cache transcribes again)")
    stats = StatsCollector()
    interactive = not req.questions
    # The live panel would fight a prompt on the same terminal: plain lines then.
    reporter = make_ask_reporter(False if interactive else req.live, req.quiet, sys.stderr)
    listener = fanout(stats, reporter)
    from dataclasses import replace

    if heard is None or req.speakers is not None:  # (speakers: diarized from the audio)
        from as2d.runtime.audio import load_audio

        audio = load_audio(req.file)
    if heard is None:
        spec = replace(spec, recording_seconds=audio.duration)
    else:
        spec = replace(spec, speech=False)
    try:
        if audio is not None and audio.truncated:
            err(f"as2d: warning: {req.file}: the file is truncated; using the "
                f"{audio.duration:.1f} s that are there")
        engine = build_engine(spec, note, listener, llm=llm)
        with engine:
            first = req.questions[0] if req.questions else None
            pending = engine.prepare_answerer(options, listener, first)
            reporter.start(req.source, audio.duration if audio is not None
                           else heard.transcript.duration, first or "")
            try:
                if heard is not None and req.speakers is not None:  # a cached transcript
                    heard = _with_speakers(heard, engine, audio.samples, req.speakers)
                if heard is None:
                    heard = _hear(engine, audio, req, transcribe_options, stats, pending,
                                  cache, digest, lambda: reporter.note(INTERRUPTED))
                    if not heard.transcript.spans and heard.interrupted:
                        # Stopped before a window was committed: no answer, and the exit
                        # code says it was a signal (130, 143, 129), not that there was no
                        # speech.
                        err(f"as2d: {stopped_by()} before any speech was transcribed: no "
                            "answer")
                        return interrupt_code(130)
                if not heard.transcript.spans:
                    raise UserError(f"{req.source}: no speech found: there is nothing to "
                                    "answer from")
                answerer = _answerer(pending)
                for question in req.questions:
                    _hint_speakers(heard, question, note)
                if interactive:
                    reporter.stop()
                    return _interactive(engine, heard, options, answerer, listener, req, stats,
                                        cache)
                results = [_answer(engine, heard, q, options, answerer, listener, cache)
                           for q in req.questions]
            finally:
                reporter.stop()
    finally:
        if audio is not None:
            audio.close()
    from as2d.cli.ask_display import render_answer

    if req.json:
        docs = [_document(r) for r in results]
        sys.stdout.write(_dumps(docs[0] if len(docs) == 1 else docs, indent=2) + "\n")
    else:
        many = len(results) > 1
        sys.stdout.write("\n".join(render_answer(r, question=many) for r in results))
        sys.stdout.flush()
    if req.stats:
        _print_stats(stats, [r.answer for r in results])
    return interrupt_code(130) if heard.interrupted else 0


INTERRUPTED = ("interrupted: finishing the current pass, then answering from what was "
               "transcribed (Ctrl-C again to quit)")
PROMPT = "? "


def _cached(req: AskRequest, spec, cache, transcribe_options):
    """``(heard, digest)``: the cached transcript of ``req.file`` (None when there is none),
    and the audio's content digest to keep a new one under (None: no cache, or not a regular
    file, which load_audio then reads or refuses in its own words)."""
    from as2d.engine import Heard, transcript_key
    from as2d.loading import ModelError

    path = Path(req.file)
    if cache is None or req.file == "-" or not path.is_file():
        return None, None
    try:
        digest = cache.digest(path)  # (read back for a file hashed before)
    except OSError:
        return None, None  # load_audio says why, in its words
    try:
        key = transcript_key(spec, digest, transcribe_options)
    except ModelError as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:  # an encoder name that does not exist: load says so
        raise UserError(as_flags(exc)) from None
    found = cache.get(key)
    return (Heard.of(found, req.source) if found is not None else None), digest


def _hear(engine, audio, req: AskRequest, transcribe_options, stats, pending, cache, digest,
          on_interrupt):
    """:meth:`Engine.hear`, its errors as the command line words them."""
    try:
        return engine.hear(audio, transcribe_options, source=req.source, stats=stats,
                           on_interrupt=on_interrupt, cache=cache, digest=digest,
                           pending=pending, speakers=req.speakers)
    except ValueError as exc:  # transcription options the model cannot honour; audio too
        raise UserError(_words(exc)) from None  # short to diarize, a reference without speech


def _with_speakers(heard, engine, samples, options):
    """A cached transcript's speakers (the audio diarized, not transcribed again), the errors
    as the command line words them."""
    try:
        return heard.with_speakers(engine.diarizer().diarize(samples, options))
    except ValueError as exc:  # audio too short to diarize, a reference without speech
        raise UserError(_words(exc)) from None


def _hint_speakers(heard, question: str, note) -> None:
    """A "who said ..." question about a transcript that does not know its speakers: say how
    to have them (the answer is then the model's, as for any question)."""
    from as2d.runtime.ask.attribution import has_speakers
    from as2d.runtime.ask.policies import policy_for

    spans = heard.transcript.spans
    if not has_speakers(spans) and policy_for(heard.transcript.language).who_said(question):
        note("a question about who said something: --diarize tells the speakers apart and "
             "answers with the one who said it")


def _answerer(pending):
    from as2d.engine import AnswerError, answerer_from
    from as2d.loading import ModelError

    try:
        return answerer_from(pending)
    except AnswerError as exc:  # exit 2: options this model cannot honour
        raise UserError(as_flags(exc.error), 2) from None
    except ModelError as exc:  # the answering model cannot load
        raise UserError(str(exc)) from None


def _answer(engine, heard, question: str, options, answerer, listener, cache):
    """:meth:`Engine.answer`, its errors as the command line words them."""
    from as2d.engine import AnswerError

    try:
        return engine.answer(heard, question, options, answerer=answerer, listener=listener,
                             cache=cache)
    except AnswerError as exc:
        raise UserError(as_flags(exc.error), 1) from None


def _words(exc: ValueError) -> str:
    from as2d.engine import AnswerError
    from as2d.loading import ModelError

    if isinstance(exc, AnswerError):
        return as_flags(exc.error)
    if isinstance(exc, ModelError):
        return str(exc)
    return as_flags(exc)


def _interactive(engine, heard, options, answerer, listener, req: AskRequest, stats,
                 cache) -> int:
    """Questions from stdin, one a line, until an empty line or the end; each answered as it
    comes (``--json``: one document a line). Ctrl-C ends it with 130, without a traceback."""
    from as2d.cli.ask_display import render_answer
    from as2d.engine import ModelError

    tty = sys.stdin.isatty()
    if tty and not req.quiet:
        err(f"as2d: ask about {req.source}; an empty line or Ctrl-D ends")
    answers = []
    try:
        while True:
            if tty:
                sys.stderr.write(PROMPT)
                sys.stderr.flush()
            line = sys.stdin.readline()
            question = line.strip()
            if not question:
                break
            try:
                check_question(question)
                if not req.quiet:
                    _hint_speakers(heard, question, lambda m: err(f"as2d: {m}"))
                result = _answer(engine, heard, question, options, answerer, listener, cache)
            except UserError as exc:  # this question: said, and the next one is read
                err(f"as2d: error: {exc}")
                continue
            except ModelError as exc:
                raise UserError(str(exc)) from None
            answers.append(result.answer)
            if req.json:
                sys.stdout.write(_dumps(_document(result)) + "\n")
            else:
                sys.stdout.write(render_answer(result) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        if tty:
            sys.stderr.write("\n")
        err(f"as2d: {stopped_by()}")
        return interrupt_code(130)
    finally:
        if req.stats:
            _print_stats(stats, answers)
    return interrupt_code(130) if heard.interrupted else 0


def _document(result) -> dict:
    return result.to_dict()


def _dumps(doc, indent: int | None = None) -> str:
    try:  # NaN is not JSON: refused with one line, never written
        return json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise UserError("the answer holds a number that is not finite (NaN or infinity), "
                        "which JSON cannot carry") from None


def _print_stats(stats, answers) -> None:
    from as2d.cli.ask_display import print_answer_stats
    from as2d.cli.stats_report import print_stats

    if stats.runs:
        print_stats(stats.runs, sys.stderr)
    for answer in answers:
        print_answer_stats(answer.stats, sys.stderr)
