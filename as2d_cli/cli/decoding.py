"""The CLI side of a decode: option checks before anything slow, and Ctrl-C-safe collection
of segments. The engine itself is built by :mod:`as2d.engine`, the one front door every face
uses."""

from __future__ import annotations

from as2d.cli.errors import UserError
from as2d.engine import Decoder, parse_budget
from as2d.runtime.option_errors import as_flags


def parse_decoder(value: Decoder | str) -> Decoder:
    """``--decoder``'s value, or its one-line error (exit code 2).

    Parsed here rather than by click so that the message is ours in every path (click's own
    would print a usage panel when the app is not run through ``entry()``)."""
    try:
        return Decoder.parse(value)
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None


def max_threads() -> int:
    """The most threads an option may ask for: four per core (more only thrash, and a typo
    like ``-t 100000`` would start a hundred thousand threads)."""
    from as2d.runtime.sessions import cpu_count

    return 4 * max(1, cpu_count())


def check_decoder_options(budget: str = "auto", threads: int = 0, drafter_threads: int = 0,
                          language: str | None = None) -> None:
    """The options every decoding command shares, checked before anything slow happens (the
    decoder is parsed once, when the command's request is made: :func:`parse_decoder`)."""
    try:
        parse_budget(budget)
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    if threads < 0 or drafter_threads < 0:
        raise UserError("--threads and --drafter-threads cannot be negative", 2)
    most = max_threads()
    for name, value in (("--threads", threads), ("--drafter-threads", drafter_threads)):
        if value > most:
            raise UserError(f"{name} {value} is more than this machine can use (at most "
                            f"{most}: four per core)", 2)
    if language is not None:  # parsed as every face parses it: by the options it goes into
        from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

        try:
            TranscribeOptions(language=language)
        except ValueError as exc:
            raise UserError(as_flags(exc), 2) from None


def collect_segments(engine, audio, options, info, reporter, on_segment=None,
                     interrupt_note: str = "interrupted: finishing the current pass and "
                                           "keeping what was transcribed"):
    """Run a transcription to the end (:meth:`as2d.engine.Engine.collect`); a first Ctrl-C
    stops it after the current pass and keeps every segment decoded so far (a second one
    quits). Returns (segments, interrupted)."""
    try:
        return engine.collect(audio, options, info, on_segment=on_segment,
                              on_interrupt=lambda: reporter.note(interrupt_note))
    except ValueError as exc:  # options the model cannot honour (e.g. a language)
        raise UserError(as_flags(exc)) from None
