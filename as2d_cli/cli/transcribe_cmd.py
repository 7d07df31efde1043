"""``as2d transcribe``: files in, text on stdout, subtitle/JSON files out, stats on request."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from as2d import writers
from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.engine import check_decoder_options, collect_segments, parse_decoder
from as2d.cli.errors import UserError, err
from as2d.cli.paths import write_json
from as2d.cli.resolve import load_whisper, make_note
from as2d.decoding import Decoder

HELP = """Transcribe audio files of any length (30-s windows, timestamp seeking).

Text goes to stdout as it is decoded; with -o, files are written too. Several files are
processed in turn; a bad file is reported and skipped, and the exit code is 1.
"""

LivePipeline = opt.reworded(opt.Live, "Live pipeline view on stderr (default: when stderr is "
                                      "a terminal).")


@dataclass
class TranscribeRequest:
    """Everything ``as2d transcribe`` was asked; each field is also its command-line option."""

    files: opt.AudioFiles
    model: opt.Model = "base"
    precision: opt.Precision = None
    language: opt.Language = None
    task: Annotated[str, typer.Option(
        "--task", help="transcribe or translate (to English).")] = "transcribe"
    output_dir: Annotated[Path | None, typer.Option(
        "--output-dir", "-o",
        help="Write <name>.<format> files here ('-' for stdout only).")] = None
    output_format: Annotated[list[str] | None, typer.Option(
        "--output-format", "-f",
        help="txt, srt, vtt, tsv, json or all; repeat or comma-separate. Default txt.")] = None
    decoder: opt.DecoderName = Decoder.AS2D
    drafter: opt.Drafter = "tiny.en"
    budget: opt.Budget = "auto"
    threads: opt.Threads = 0
    drafter_threads: opt.DrafterThreads = 0
    encoder: opt.Encoder = None
    timestamps: Annotated[bool, typer.Option(
        "--timestamps/--no-timestamps", help="Segment timestamps (needed for srt/vtt).")] = True
    condition_on_previous_text: Annotated[bool, typer.Option(
        "--condition-on-previous-text/--no-condition-on-previous-text",
        help="Prompt each window with the previous window's text.")] = True
    initial_prompt: Annotated[str | None, typer.Option(
        "--initial-prompt", help="Text to prompt the first window with.")] = None
    no_speech_threshold: Annotated[float, typer.Option(
        "--no-speech-threshold", help="Skip windows this likely to be silence.")] = 0.6
    compression_ratio_threshold: Annotated[float, typer.Option(
        "--compression-ratio-threshold",
        help="Text compressing better than this is treated as a repetition loop.")] = 2.4
    stats: opt.Stats = False
    stats_json: opt.StatsJson = None
    live: LivePipeline = None
    models_dir: opt.ModelsDir = None
    quiet: opt.Quiet = False

    def __post_init__(self) -> None:
        self.decoder = parse_decoder(self.decoder)


def register(app: typer.Typer) -> None:
    """Add ``as2d transcribe`` to ``app``."""
    add_command(app, "transcribe", TranscribeRequest, run_transcribe, HELP,
                no_args_is_help=True)


def validate(req: TranscribeRequest) -> list[str]:
    try:
        formats = writers.parse_formats(req.output_format)
    except ValueError as exc:
        raise UserError(str(exc), 2) from None
    if req.task not in ("transcribe", "translate"):
        raise UserError(f"--task must be transcribe or translate, not {req.task!r}", 2)
    check_decoder_options(req.decoder, req.budget, req.threads, req.drafter_threads,
                          req.language)
    if not req.timestamps and any(f in ("srt", "vtt") for f in formats):
        raise UserError("srt and vtt need timestamps: drop --no-timestamps", 2)
    return formats


def run_transcribe(req: TranscribeRequest) -> int:
    """Transcribe ``req.files`` in turn; the exit code (1 if a file failed, 130 if stopped)."""
    from as2d.cli.progress import make_reporter
    from as2d.decoding import build_decoder, plan_threads
    from as2d.runtime.events import fanout
    from as2d.runtime.sessions import cpu_count
    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.transcriber import TranscribeOptions, Transcriber

    formats = validate(req)
    to_stdout = req.output_dir is None or str(req.output_dir) == "-"
    if to_stdout and len(formats) > 1:
        raise UserError("several formats need files: add -o DIR", 2)
    files_out = None if to_stdout else writers.FileOutputs(req.output_dir, formats)
    if files_out is not None:
        # Before any decoding: a bad output folder should not cost a whole transcription.
        try:
            files_out.prepare()
        except OSError as exc:
            raise UserError(f"{req.output_dir}: cannot write output files there "
                            f"({exc.strerror or exc})", 2) from None

    plan = plan_threads(req.threads or cpu_count(), req.decoder, req.drafter_threads)
    note = make_note(req.quiet)
    target = load_whisper(req.model, req.precision, req.models_dir, plan.target,
                          progress=note, encoder=req.encoder)
    stats = StatsCollector()
    reporter = make_reporter(req.live, req.quiet, sys.stderr)
    listener = fanout(stats, reporter)
    strategy = build_decoder(req.decoder, target, req.drafter, req.budget, plan,
                              req.models_dir, listener, note, encoder=req.encoder)
    transcriber = Transcriber(target, strategy, listener)
    options = TranscribeOptions(
        language=req.language, task=req.task, timestamps=req.timestamps,
        condition_on_previous_text=req.condition_on_previous_text,
        initial_prompt=req.initial_prompt, no_speech_threshold=req.no_speech_threshold,
        compression_ratio_threshold=req.compression_ratio_threshold)

    try:
        return _run_files(req, formats, to_stdout, files_out, target, stats, reporter,
                          transcriber, options)
    finally:
        strategy.close()  # also on errors: a strategy's worker threads must not linger


def _run_files(req, formats, to_stdout, files_out, target, stats, reporter, transcriber,
               options) -> int:
    from as2d.runtime.audio import AudioError, load_audio
    from as2d.runtime.transcribe.transcriber import TranscriptionInfo

    failures = 0
    interrupted = False
    # Plain text streams to stdout as it is decoded, unless stdout carries another format.
    stream_txt = not to_stdout or formats == ["txt"]
    for path in req.files:
        try:
            audio = load_audio(path)
        except AudioError as exc:
            err(f"as2d: error: {exc}")
            failures += 1
            continue
        if audio.truncated:
            err(f"as2d: warning: {path}: the file is truncated; transcribing the "
                 f"{audio.duration:.1f} s that are there")
            failures += 1
        info = TranscriptionInfo(None, 0.0, audio.duration)
        reporter.start_file(str(path), audio.duration)
        try:
            segments, stopped = collect_segments(
                transcriber, audio, options, info, reporter,
                on_segment=(lambda seg: reporter.print_text(seg.text.strip()))
                if stream_txt else None)
        finally:
            reporter.end_file()
            audio.close()
        interrupted = interrupted or stopped  # stopped already counts info.interrupted
        doc_info = {"language": info.language, "duration": round(info.duration, 3),
                    "source": str(path), "model": target.name, "decoder": req.decoder}
        if interrupted:
            doc_info["interrupted"] = True
        if to_stdout and not stream_txt:
            sys.stdout.write(writers.render(formats[0], segments, doc_info))
            sys.stdout.flush()
        if files_out is not None:
            try:
                written = files_out.write(str(path), segments, doc_info)
            except OSError as exc:
                raise UserError(f"cannot write the transcript of {path} to {req.output_dir} "
                                f"({exc.strerror or exc})") from None
            if not req.quiet:
                err("as2d: wrote " + ", ".join(str(p) for p in written))
        if not segments and not interrupted:
            err(f"as2d: {path}: no speech found")
        if interrupted:
            break
    if req.stats or req.stats_json:
        from as2d.cli.stats_report import print_stats

        if req.stats:
            print_stats(stats.runs, sys.stderr)
        if req.stats_json:
            write_json(req.stats_json, [r.to_dict() for r in stats.runs], "the statistics")
    if interrupted:
        return 130
    return 1 if failures else 0
