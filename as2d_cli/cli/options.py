"""The options the commands share, declared once.

Each alias is a type with its command-line spelling attached (``Annotated[str,
typer.Option(...)]``). A command's request dataclass annotates its fields with them, and
:mod:`as2d.cli.command` turns the dataclass into the typer command, so an option is written
in one place: ``model: options.Model = "base"`` is the flag, its help, its default and the
field the command reads. typer copies the ``Option`` of an alias for every use, so one alias
serves every command.

Where a command says something different about a shared option (``mic`` detects the
language on the first utterance, not per file), :func:`reworded` gives it its own help while
keeping the spelling.
"""

from __future__ import annotations

import copy
import typing
from pathlib import Path
from typing import Annotated

import typer

from as2d.engine import Decoder

MODELS_DIR_ENV = "AS2D_MODELS_DIR"

# -- models -----------------------------------------------------------------------------------
Model = Annotated[str, typer.Option(
    "--model", "-m", help="Target model: a catalog name (base, tiny.en) or a folder.")]
Precision = Annotated[str | None, typer.Option(
    "--precision", "-p", help="int8 (default, fastest) or fp32.")]
Drafter = Annotated[str, typer.Option(
    "--drafter", help="Drafter model for sd and as2d; auto: tiny.en, or base for a multilingual "
                      "target from small up on another language.")]
ModelsDir = Annotated[Path | None, typer.Option(
    "--models-dir", envvar=MODELS_DIR_ENV, help="Model cache folder.")]

# -- decoding ---------------------------------------------------------------------------------
Language = Annotated[str | None, typer.Option(
    "--language", "-l",
    help="Spoken language (code or name); default: detect (English for .en models).")]
DecoderName = Annotated[str, typer.Option(
    "--decoder", metavar="[" + "|".join(d.value for d in Decoder) + "]",
    help="as2d (concurrent drafter + target), sd (classic serial speculative decoding) or "
         "target (target alone). All give the same text.")]
Budget = Annotated[str, typer.Option(
    "--budget", help="Candidates verified per target pass: a number or auto.")]
Threads = Annotated[int, typer.Option(
    "--threads", "-t", help="CPU threads in all (0: all cores).")]
DrafterThreads = Annotated[int, typer.Option(
    "--drafter-threads", help="Threads for the drafter (0: automatic split).")]
Encoder = Annotated[str | None, typer.Option(
    "--encoder", metavar="[auto|onnxruntime|openvino]", envvar="AS2D_ENCODER",
    help="Encoder back end: auto (the fastest on this CPU, timed once per model and "
         "remembered), onnxruntime or openvino. Decoders always run in onnxruntime.")]

# -- speakers (diarization) -------------------------------------------------------------------
Diarize = Annotated[bool, typer.Option(
    "--diarize", help="Say who speaks: speaker labels on segments and words (implies word "
                      "timestamps), and -f rttm.")]
NumSpeakers = Annotated[int | None, typer.Option(
    "--num-speakers", help="With --diarize: the number of speakers, when known.")]
MinSpeakers = Annotated[int | None, typer.Option(
    "--min-speakers", help="With --diarize: at least this many speakers.")]
MaxSpeakers = Annotated[int | None, typer.Option(
    "--max-speakers", help="With --diarize: at most this many speakers.")]
SpeakerRefs = Annotated[list[str] | None, typer.Option(
    "--speaker", metavar="NAME=FILE", help="With --diarize: name the speaker who sounds like "
                                           "FILE (a short clean clip); repeat per person.")]

# -- what the user sees -----------------------------------------------------------------------
Live = Annotated[bool | None, typer.Option(
    "--live/--no-live", help="Live view on stderr (default: when stderr is a terminal).")]
Stats = Annotated[bool, typer.Option("--stats", help="Print a throughput report to stderr.")]
StatsJson = Annotated[Path | None, typer.Option(
    "--stats-json", help="Write the throughput report as JSON.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")]

# -- arguments --------------------------------------------------------------------------------
AudioFiles = Annotated[list[Path], typer.Argument(
    help="Audio files (wav, flac, ogg, mp3, ...).", show_default=False)]


def reworded(alias, help: str):
    """``alias`` with another help text: same flag, same type, said for one command."""
    base, info, *rest = typing.get_args(alias)
    info = copy.copy(info)
    info.help = help
    return Annotated[(base, info, *rest)]
