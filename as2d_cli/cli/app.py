"""The ``as2d`` command line: the app, its ``--version``, and the console-script entry point.

The commands (transcribe, batch, bench, mic, ask, serve, models, config) are declared in
their own modules and registered here; none of them imports this module.

Conventions follow whisper / faster-whisper / whisper.cpp: transcript text on stdout, progress
and diagnostics on stderr, ``-o/--output-dir`` and ``-f/--output-format`` for files, a user cache
for models, plain output when stdout or stderr is not a terminal. A user mistake prints one
line and exits non-zero; it never prints a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from as2d.cli import (
    ask_cmd,
    batch_cmd,
    bench_cmd,
    config_cmd,
    mic_cmd,
    models_cmd,
    serve_cmd,
    transcribe_cmd,
)

app = typer.Typer(
    name="as2d",
    help="Fast offline speech tools on the CPU: transcription, dictation and audio question "
         "answering, accelerated by AS²D (a small drafter and a larger target decoding "
         "concurrently, output identical to the target alone).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (typer's own)
    pretty_exceptions_enable=False,
    # click's own help layout: long option names get a line of their own instead of being cut
    # to "--condition-on-pr…" by a table squeezed into 80 columns.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from as2d import __version__

        typer.echo(f"as2d {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False) -> None:
    """as2d: audio speculative speculative decoding on your CPU."""


# The commands live in their modules; this is the one place that puts them together (in the
# order `as2d --help` lists them). No command module imports this one.
for _module in (transcribe_cmd, batch_cmd, bench_cmd, mic_cmd, ask_cmd, serve_cmd, models_cmd,
                config_cmd):
    _module.register(app)


def _usage_error_line(exc) -> str:
    """One line for a command-line parsing error (unknown option, bad value, ...)."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} -h`)" if ctx is not None else ""
    return f"as2d: error: {message}{hint}"


def _quiet_stdout() -> None:
    """After stdout failed, make sure the flush at exit does not print its own traceback."""
    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass


def _run():
    """The command line, with the config file's values as click's defaults (command line >
    environment > file > built-in; see :mod:`as2d.cli.config`). A bad file is one line naming
    it; ``as2d config path`` still answers, so the user can find it."""
    import typer.main

    from as2d.cli import config

    command = typer.main.get_command(app)
    try:
        defaults = config.default_map(command)
    except config.ConfigError as exc:
        if sys.argv[1:3] != ["config", "path"]:
            print(f"as2d: error: {exc}", file=sys.stderr)
            sys.exit(2)
        defaults = {}
    return command.main(prog_name="as2d", standalone_mode=False, default_map=defaults)


def entry() -> None:
    """Console-script entry point (it ends the process: call :data:`app` to embed the CLI).

    Parsing errors (unknown option, a value of the wrong type) are printed as one
    ``as2d: error:`` line like every other user mistake, not as click's usage panel.
    """
    import errno

    from as2d.cli.errors import install_signal_handlers, interrupt_code

    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    install_signal_handlers()  # SIGTERM / SIGHUP: Ctrl-C's semantics
    if sys.stdout is None:  # started with stdout closed (`as2d ... >&-`)
        if not {"-o", "--output-dir"} & {a.split("=")[0] for a in sys.argv[1:]}:
            print("as2d: error: standard output is closed, so the results could not be "
                  "shown; redirect it to a file or write files with -o DIR", file=sys.stderr)
            sys.exit(1)
        sys.stdout = open(os.devnull, "w")  # the results go to the -o files
    try:
        code = _run()
    except KeyboardInterrupt:  # pragma: no cover - outside any command
        try:
            print("as2d: interrupted", file=sys.stderr)
        except OSError:
            pass
        sys.exit(interrupt_code())
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
            sys.exit(interrupt_code())
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            sys.exit(1)
        if isinstance(exc, OSError):  # stdout on a full disk (/dev/full), an I/O error
            _quiet_stdout()
            print(f"as2d: error: cannot write the output ({exc.strerror or exc})",
                  file=sys.stderr)
            sys.exit(1)
        raise
    _leave(code if isinstance(code, int) else 0)


def _leave(code: int) -> None:
    """Exit without tearing the process down object by object.

    Everything the command writes is written by now (output files are closed by their
    writers); what is left is freeing the model sessions and their hundreds of MB of weights,
    which at interpreter shutdown cost ``as2d ask`` 0.12-0.19 s of its wall time (0.04-0.07 s
    this way). Standard output is flushed first, with the errors the normal exit would have
    reported. A process that started Ray or opened an audio device exits normally: their
    exit handlers let go of a cluster connection and of PortAudio."""
    import errno

    if {"ray", "sounddevice"} & sys.modules.keys():
        sys.exit(code)
    try:
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            _quiet_stdout()
            print(f"as2d: error: cannot write the output ({exc.strerror or exc})",
                  file=sys.stderr)
        code = code or 1
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except OSError:
        pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
