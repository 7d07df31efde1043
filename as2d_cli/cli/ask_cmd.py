"""``as2d ask FILE QUESTION``: answer a question about a recording, accelerated twice.

Stage 1 transcribes the file as ``as2d transcribe`` does (AS²D: the drafter streams candidates,
the target verifies). Stage 2 prompts the answering LLM with the transcript and the question and
generates the answer with candidates looked up in the transcript, the drafter's stream and the
question, verified losslessly by the answering model (:mod:`as2d.runtime.ask.answer`). The answer goes to
stdout (or a JSON document with ``--json``); progress, notes and ``--stats`` to stderr.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from as2d.cli.resolve import UserError, err, make_note


@dataclass
class AskRequest:
    file: Path
    question: str
    model: str = "base"
    drafter: str = "tiny.en"
    decoder: str = "as2d"
    llm: str = "gemma-3-270m"
    precision: str | None = None
    max_tokens: int = 48
    threads: int = 0
    json: bool = False
    stats: bool = False
    live: bool | None = None
    language: str | None = None
    models_dir: Path | None = None
    quiet: bool = False
    no_candidates: bool = False
    style: str | None = None
    context: int | None = None


def validate(req: AskRequest) -> None:
    from as2d.runtime.ask.answer import STYLES

    if not req.question.strip():
        raise UserError("the question is empty", 2)
    from as2d.cli.engine import check_decoder_options

    check_decoder_options(req.decoder, threads=req.threads, language=req.language)
    if req.precision not in (None, "int8", "fp32"):
        raise UserError(f"--precision must be int8 or fp32, not {req.precision!r}", 2)
    if req.max_tokens < 1:
        raise UserError("--max-tokens must be at least 1", 2)
    if req.style is not None and req.style not in STYLES:
        raise UserError(f"--prompt-style must be one of {', '.join(STYLES)}, not {req.style!r}",
                        2)
    if req.context is not None and req.context < 128:
        raise UserError("--context must be at least 128 tokens", 2)


def run_ask(req: AskRequest) -> int:
    from as2d.runtime.ask.answer import Answerer, AskOptions, drafter_text, spans_from_segments
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.sessions import cpu_count
    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.transcriber import TranscribeOptions, TranscriptionInfo, Transcriber

    from as2d.cli.ask_display import make_ask_reporter, print_answer_stats
    from as2d.cli.engine import build_strategy, plan_threads
    from as2d.cli.resolve import load_llm, load_whisper

    validate(req)
    note = make_note(req.quiet)
    # Read the audio first, then the answering model: a bad file or a missing model package
    # should cost nothing, and must not surface only after a whole transcription.
    audio = load_audio(req.file)
    try:
        if audio.truncated:
            err(f"as2d: warning: {req.file}: the file is truncated; using the "
                 f"{audio.duration:.1f} s that are there")
        total = req.threads or cpu_count()
        lm = load_llm(req.llm, req.precision, req.models_dir, total, progress=note)
        options = AskOptions(max_tokens=req.max_tokens, candidates=not req.no_candidates,
                             style=req.style, context_tokens=req.context)
        plan = plan_threads(total, req.decoder)
        target = load_whisper(req.model, req.precision, req.models_dir, plan.target,
                              progress=note)
        stats = StatsCollector()
        reporter = make_ask_reporter(req.live, req.quiet, sys.stderr)
        listener = fanout(stats, reporter)
        try:
            answerer = Answerer(lm, listener, options)
        except ValueError as exc:
            raise UserError(str(exc), 2) from None
        strategy = build_strategy(req.decoder, target, req.drafter, "auto", plan,
                                  req.models_dir, listener, note)
        info = TranscriptionInfo(None, 0.0, audio.duration)
        reporter.start(str(req.file), audio.duration, req.question)
        try:
            segments, interrupted = _transcribe(Transcriber(target, strategy, listener), audio,
                                                TranscribeOptions(language=req.language), info,
                                                reporter)
            draft = drafter_text(strategy, target)
            spans = spans_from_segments(segments)
            if not spans:
                reporter.stop()
                raise UserError(f"{req.file}: no speech found: there is nothing to answer from")
            if interrupted:
                reporter.note("transcription interrupted: answering from the "
                              f"{spans[-1].end:.0f} s transcribed so far")
            try:
                answer = answerer.ask(spans, req.question, draft)
            except ValueError as exc:
                raise UserError(str(exc)) from None
        finally:
            reporter.stop()
            strategy.close()
    finally:
        audio.close()

    if req.json:
        run = stats.runs[-1] if stats.runs else None
        doc = answer.to_dict()
        doc.update(
            source=str(req.file), duration=round(audio.duration, 3), language=info.language,
            interrupted=interrupted,  # collect_segments folds info.interrupted in
            models={"target": target.name, "drafter": strategy.drafter_name,
                    "decoder": req.decoder, "llm": lm.name},
            candidates=_candidates_word(answerer, req),
            stats={"transcription": run.summary() if run else None,
                   "answer": answer.stats.to_dict()})
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        print(answer.text, flush=True)
    if req.stats:
        from as2d.cli.stats_report import print_stats

        print_stats(stats.runs, sys.stderr)
        print_answer_stats(answer.stats, sys.stderr)
    return 130 if interrupted else 0


def _candidates_word(answerer, req: AskRequest) -> str:
    if req.no_candidates:
        return "off"
    if not answerer.lossless:
        return "unavailable: the model's passes are not row-exact"
    return "verified"


def _transcribe(transcriber, audio, options, info, reporter) -> tuple[list, bool]:
    """All segments; a first Ctrl-C stops transcribing and keeps what was decoded."""
    from as2d.cli.engine import collect_segments

    return collect_segments(transcriber, audio, options, info, reporter,
                            interrupt_note="interrupted: finishing the current pass, then "
                                           "answering from what was transcribed (Ctrl-C again "
                                           "to quit)")


def register(app: typer.Typer) -> None:
    """Add ``as2d ask`` to ``app`` (once, however often it is called)."""
    if any(getattr(c, "name", None) == "ask" for c in app.registered_commands):
        return

    @app.command("ask", no_args_is_help=True)
    def ask(
        file: Path = typer.Argument(..., help="Audio file (wav, flac, ogg, mp3, ...).",
                                    show_default=False),
        question: str = typer.Argument(..., help="The question, in quotes.",
                                       show_default=False),
        model: str = typer.Option("base", "--model", "-m",
                                  help="Speech (target) model: base, tiny.en or a folder."),
        drafter: str = typer.Option("tiny.en", "--drafter",
                                    help="Drafter model for the transcription."),
        decoder: str = typer.Option("as2d", "--decoder",
                                    help="Transcription decoder: as2d, sd or target (same "
                                         "text)."),
        llm: str = typer.Option("gemma-3-270m", "--llm",
                                help="Answering model: a catalog name or a folder (as2d "
                                     "bundle, or a Hugging Face ONNX export with model.onnx + "
                                     "tokenizer.json)."),
        precision: Optional[str] = typer.Option(None, "--precision", "-p",
                                                help="int8 (default, fastest) or fp32, for the "
                                                     "speech and answering models (a name like "
                                                     "base-fp32 sets one alone)."),
        max_tokens: int = typer.Option(48, "--max-tokens", "-n",
                                       help="Longest answer, in tokens."),
        threads: int = typer.Option(0, "--threads", "-t",
                                    help="CPU threads in all (0: all cores)."),
        json_out: bool = typer.Option(False, "--json",
                                      help="Print a JSON document: answer, the transcript "
                                           "spans it used (with times), statistics."),
        stats: bool = typer.Option(False, "--stats",
                                   help="Print both stages' throughput to stderr (answer "
                                        "tokens/s, acceptance by source)."),
        live: Optional[bool] = typer.Option(None, "--live/--no-live",
                                            help="Live view on stderr (default: when stderr "
                                                 "is a terminal)."),
        language: Optional[str] = typer.Option(None, "--language", "-l",
                                               help="Spoken language; default: detect."),
        models_dir: Optional[Path] = typer.Option(None, "--models-dir",
                                                  envvar="AS2D_MODELS_DIR",
                                                  help="Model cache folder."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
        no_candidates: bool = typer.Option(False, "--no-candidates",
                                           help="Generate the answer without speculative "
                                                "candidates (target-only, for comparison; "
                                                "same answer)."),
        prompt_style: Optional[str] = typer.Option(None, "--prompt-style",
                                                   help="Prompt format (qa, qa-timed, "
                                                        "qa-plain, qa-single, chat, instruct); "
                                                        "default: qa, or instruct for models "
                                                        "with a chat template."),
        context: Optional[int] = typer.Option(None, "--context",
                                              help="Use at most this many tokens of the "
                                                   "answering model's context (longer "
                                                   "transcripts are cut to the passages "
                                                   "most related to the question)."),
    ) -> None:
        """Answer a question about a recording: transcribe it, then ask the answering model.

        Both stages are accelerated losslessly: AS²D for the transcript, and candidates from
        the transcript, the drafter's stream and the question for the answer.
        """
        from as2d.cli.app import run_guarded

        req = AskRequest(file=file, question=question, model=model, drafter=drafter,
                         decoder=decoder, llm=llm, precision=precision, max_tokens=max_tokens,
                         threads=threads, json=json_out, stats=stats, live=live,
                         language=language, models_dir=models_dir, quiet=quiet,
                         no_candidates=no_candidates, style=prompt_style, context=context)
        code = run_guarded(lambda: run_ask(req))
        raise typer.Exit(code or 0)
