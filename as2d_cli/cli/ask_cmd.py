"""``as2d ask FILE QUESTION``: answer a question about a recording, accelerated twice.

Stage 1 transcribes the file as ``as2d transcribe`` does (AS²D: the drafter streams candidates,
the target verifies; a recording of one window by the target alone, where a drafter would not
pay). Stage 2 prompts the answering LLM with the transcript and the question and generates the
answer with candidates looked up in the transcript, the drafter's stream (when one ran) and the
question, verified losslessly by the answering model (:mod:`as2d.runtime.ask.answer`). The
answer goes to stdout (or a JSON document with ``--json``); progress, notes and ``--stats`` to
stderr.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
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

HELP = """Answer a question about a recording: transcribe it, then ask the answering model.

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

    file: Annotated[Path, typer.Argument(
        help="Audio file (wav, flac, ogg, mp3, ...).", show_default=False)]
    question: Annotated[str, typer.Argument(
        help="The question, in quotes.", show_default=False)]
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
        "--json", help="Print a JSON document: answer, the transcript spans it used (with "
                       "times), statistics.")] = False
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
    context: Annotated[int | None, typer.Option(
        "--context", help="Use at most this many tokens of the answering model's context "
                          "(longer transcripts are cut to the passages most related to the "
                          "question).")] = None

    def __post_init__(self) -> None:
        self.decoder = parse_decoder(self.decoder)


def register(app: typer.Typer) -> None:
    """Add ``as2d ask`` to ``app`` (once, however often it is called)."""
    add_command(app, "ask", AskRequest, run_ask, HELP, no_args_is_help=True)


def validate(req: AskRequest) -> None:
    from as2d.runtime.ask.prompt import STYLES
    from as2d.runtime.ask.question import question_error

    problem = question_error(req.question)
    if problem:
        raise UserError(problem, 2)
    from as2d.cli.decoding import check_decoder_options

    check_decoder_options(req.decoder, threads=req.threads, language=req.language)
    if req.precision not in (None, "int8", "fp32"):
        raise UserError(f"--precision must be int8 or fp32, not {req.precision!r}", 2)
    if req.max_tokens is not None and req.max_tokens < 1:
        raise UserError("--max-tokens must be at least 1", 2)
    if req.style is not None and req.style not in STYLES:
        raise UserError(f"--prompt-style must be one of {', '.join(STYLES)}, not {req.style!r}",
                        2)
    if req.context is not None and req.context < 128:
        raise UserError("--context must be at least 128 tokens", 2)


def run_ask(req: AskRequest) -> int:
    """Transcribe, then answer; the exit code (130 if the transcription was stopped)."""
    from as2d.cli.ask_display import make_ask_reporter, print_answer_stats
    from as2d.cli.resolve import build_engine
    from as2d.engine import EngineSpec
    from as2d.runtime.ask.answer import AskOptions
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    validate(req)
    # Read the audio first, then the models: a bad file should cost nothing.
    audio = load_audio(req.file)
    try:
        if audio.truncated:
            err(f"as2d: warning: {req.file}: the file is truncated; using the "
                f"{audio.duration:.1f} s that are there")
        stats = StatsCollector()
        reporter = make_ask_reporter(req.live, req.quiet, sys.stderr)
        listener = fanout(stats, reporter)
        # --json shows the model's own answer beside an extracted one (``generated``); a
        # plain answer does not generate what it would throw away. No --max-tokens: the
        # answer length every face has (AskOptions').
        length = {} if req.max_tokens is None else {"max_tokens": req.max_tokens}
        options = AskOptions(candidates=not req.no_candidates, style=req.style,
                             context_tokens=req.context, compare=req.json, **length)
        # The answering model loads on a thread beside the speech models and the
        # transcription (the engine finds or installs it first, so a missing package still
        # costs nothing); the answerer then reads its stored prompt head there too.
        spec = EngineSpec(model=req.model, precision=req.precision, drafter=req.drafter,
                          decoder=req.decoder, threads=req.threads, encoder=req.encoder,
                          models_dir=req.models_dir, llm=req.llm, llm_precision=req.precision,
                          recording_seconds=audio.duration)
        engine = build_engine(spec, make_note(req.quiet), listener)
        reporter.start(str(req.file), audio.duration, req.question)
        with engine:
            try:
                result = _ask(engine, audio, req, options,
                              TranscribeOptions(language=req.language), listener, stats,
                              lambda: reporter.note(INTERRUPTED))
                if result.answer is None and result.interrupted:
                    # Stopped before a window was committed: no answer, and the exit code
                    # says it was a signal (130, 143, 129), not that the audio had no speech.
                    err(f"as2d: {stopped_by()} before any speech was transcribed: no "
                        "answer")
                    return interrupt_code(130)
                if result.answer is None:
                    raise UserError(f"{req.file}: no speech found: there is nothing to "
                                    "answer from")
            finally:
                reporter.stop()
    finally:
        audio.close()

    answer = result.answer
    if req.json:
        try:  # NaN is not JSON: refused with one line, never written
            text = json.dumps(result.to_dict(), indent=2, ensure_ascii=False,
                              allow_nan=False) + "\n"
        except ValueError:
            raise UserError("the answer holds a number that is not finite (NaN or "
                            "infinity), which JSON cannot carry") from None
        sys.stdout.write(text)
    else:
        print(answer.text, flush=True)
    if req.stats:
        from as2d.cli.stats_report import print_stats

        print_stats(stats.runs, sys.stderr)
        print_answer_stats(answer.stats, sys.stderr)
    return interrupt_code(130) if result.interrupted else 0


INTERRUPTED = ("interrupted: finishing the current pass, then answering from what was "
               "transcribed (Ctrl-C again to quit)")


def _ask(engine, audio, req: AskRequest, options, transcribe_options, listener, stats,
         on_interrupt):
    """:meth:`Engine.ask`, its errors as the command line words them."""
    from as2d.engine import AnswerError
    from as2d.loading import ModelError

    try:
        return engine.ask(audio, req.question, options, transcribe_options,
                          source=str(req.file), listener=listener, stats=stats,
                          on_interrupt=on_interrupt)
    except AnswerError as exc:  # exit 2: options this model cannot honour
        raise UserError(as_flags(exc.error), 2 if exc.stage == "answerer" else 1) from None
    except ModelError as exc:  # the answering model cannot load
        raise UserError(str(exc)) from None
    except ValueError as exc:  # transcription options the model cannot honour
        raise UserError(as_flags(exc)) from None
