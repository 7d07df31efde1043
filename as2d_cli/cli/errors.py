"""User errors: one ``as2d: error: ...`` line on stderr and a non-zero exit, never a traceback.

A command raises :class:`UserError` (or lets an engine error it knows to be the user's through)
and :func:`guarded` turns it into that line. Exit codes: 1 for something wrong with an input,
a model or the machine; 2 for a bad option value (as for click's own parsing errors); 130 for
Ctrl-C. Command modules import this module, never ``app.py``, so the command line has no cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer

T = TypeVar("T")


class UserError(Exception):
    """A mistake or missing piece the user can fix; printed as one line, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def err(msg: str) -> None:
    """One line on stderr, flushed (the commands' notes, warnings and errors)."""
    print(msg, file=sys.stderr, flush=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``as2d: error: message`` and leave the command with ``code``."""
    err(f"as2d: error: {message}")
    raise typer.Exit(code)


def guarded(fn: Callable[[], T]) -> T:
    """Run ``fn``; errors the user caused (and Ctrl-C) end the command with one line.

    Engine errors that are always the user's (an unreadable audio file, a damaged bundle, a
    model that cannot be found) are caught here too, so the engine needs no terminal code.
    """
    from as2d.loading import ModelError
    from as2d.models.bundle import BundleError
    from as2d.runtime.audio import AudioError

    try:
        return fn()
    except UserError as exc:
        fail(str(exc), exc.code)
    except (ModelError, AudioError, BundleError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        err("as2d: interrupted")
        raise typer.Exit(130) from None
