"""``as2d batch``: an archive transcribed on a Ray cluster, resumable, with a manifest.

The options are ``as2d transcribe``'s (the request below *is* a :class:`TranscribeRequest`,
less what makes no sense for an archive), plus where the cluster is and how it is laid out.
The work itself is :mod:`as2d.distributed`'s; this module checks the request, shows progress
and turns the outcome into an exit code.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from as2d import writers
from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.errors import UserError, interrupt_code
from as2d.cli.transcribe_cmd import (
    TranscribeRequest,
    engine_spec,
    subtitle_options,
    transcribe_options,
    validate,
)

HELP = """Transcribe an archive on a Ray cluster: many files, many workers, resumable.

Inputs are files, folders (searched recursively for audio and video) or list files (.txt,
.lst: one path a line). Each Ray actor loads the models once and takes the next file,
longest first. OUT/manifest.jsonl records every file; running the same command again skips
what is done and retries what failed. Ctrl-C lets the files in flight finish (a second one
drops them); nothing already written is lost.
"""


@dataclass
class BatchRequest(TranscribeRequest):
    """``as2d batch``: transcribe's options, a required -o, and the cluster's layout."""

    files: Annotated[list[Path], typer.Argument(
        help="Audio files, folders (recursive) or list files (.txt/.lst, a path a line).",
        show_default=False)] = field(default_factory=list)
    threads: Annotated[int, typer.Option(
        "--threads", "-t", help="Threads per actor (the drafter's included).")] = 1
    drafter: opt.Drafter = "auto"  # an actor's engine decodes many files: it always drafts
    live: opt.reworded(opt.Live, "Live progress table on stderr (default: when stderr is "
                                 "a terminal; else a plain line per file).") = None
    ray_address: Annotated[str, typer.Option(
        "--ray", metavar="ADDRESS",
        help="Ray cluster: empty for a local one on this machine, 'auto' or "
             "'ray://host:10001' to join one.")] = ""
    actors: Annotated[int, typer.Option(
        "--actors", "-j", help="Actors in all (0: the cluster's CPUs / --threads).")] = 0
    retries: Annotated[int, typer.Option(
        "--retries", help="Times a file is tried again after an error or a lost worker.")] = 2
    # transcribe's options an archive has no use for: not on this command.
    stats: bool = field(init=False, default=False)
    stats_json: Path | None = field(init=False, default=None)


def register(app: typer.Typer) -> None:
    """Add ``as2d batch`` to ``app``."""
    add_command(app, "batch", BatchRequest, run_batch_command, HELP, no_args_is_help=True)


def _spec(req: BatchRequest, formats: list[str]):
    from dataclasses import replace

    from as2d.distributed import WorkerSpec

    # Never spinning: several actors may share a node's cores.
    engine = engine_spec(req, shares_cores=True)
    if req.models_dir:  # the actors may start elsewhere: an absolute folder
        engine = replace(engine, models_dir=str(Path(req.models_dir).resolve()))
    return WorkerSpec(engine=engine, options=transcribe_options(req),
                      output_dir=str(Path(req.output_dir).resolve()), formats=formats,
                      subtitle=subtitle_options(req), speakers=req.speakers)


def _show(display, event) -> None:
    """An event to the display; a ``note`` (a worker that died before it was up, a cluster
    with no room for one) is also one line."""
    display.event(event)
    if event.kind == "note" and event.text:
        display.line(f"note: {event.text}", always=True)


def run_batch_command(req: BatchRequest) -> int:
    from as2d.cli.batch_display import make_display
    from as2d.distributed import BatchError, default_actors, discover, ray_init, run_batch

    if not req.files:
        raise UserError("no inputs: give files, folders or list files", 2)
    if req.output_dir is None or str(req.output_dir) == "-":
        raise UserError("as2d batch writes files: give the output folder with -o DIR", 2)
    if req.threads < 1:
        raise UserError(f"--threads must be 1 or more, not {req.threads}", 2)
    if req.actors < 0 or req.retries < 0:
        raise UserError("--actors and --retries must be 0 or more", 2)
    formats = validate(req)
    files_out = writers.FileOutputs(req.output_dir, formats)
    try:
        files_out.prepare()
    except OSError as exc:
        raise UserError(f"{req.output_dir}: cannot write output files there "
                        f"({exc.strerror or exc})", 2) from None
    try:
        jobs = discover(req.files)
    except (BatchError, OSError, UnicodeDecodeError) as exc:
        raise UserError(str(exc)) from None
    if not jobs:
        raise UserError("no audio files found in the inputs")
    spec = _spec(req, formats)
    try:
        import ray

        owned = ray_init(req.ray_address or None,
                         None if req.ray_address else req.actors * req.threads or None)
    except BatchError as exc:
        raise UserError(str(exc)) from None
    except Exception as exc:  # ray's ConnectionError and friends
        raise UserError(f"cannot reach the Ray cluster {req.ray_address or '(local)'}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                        ) from None
    display = make_display(req.live, req.quiet, sys.stderr, jobs)
    try:
        actors = req.actors or default_actors(req.threads)
        display.begin(actors)
        with display:
            result = run_batch(jobs, spec, actors=actors, retries=req.retries,
                               on_event=lambda e: _show(display, e))
    except BatchError as exc:
        raise UserError(str(exc)) from None
    finally:
        if owned:
            ray.shutdown()
    display.summary(result, Path(req.output_dir) / "manifest.jsonl")
    if result.interrupted:
        # 128 + the signal that stopped it (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), as
        # `as2d transcribe` exits.
        return 128 + result.signal if result.signal else interrupt_code(130)
    return 1 if result.failed else 0

