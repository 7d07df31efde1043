"""User errors: one ``as2d: error: ...`` line on stderr and a non-zero exit, never a traceback.

A command raises :class:`UserError` (or lets an engine error it knows to be the user's through)
and :func:`guarded` turns it into that line. Exit codes: 1 for something wrong with an input,
a model or the machine; 2 for a bad option value (as for click's own parsing errors); 130 for
Ctrl-C. Command modules import this module, never ``app.py``, so the command line has no cycle.

SIGTERM (a job scheduler, ``kill``) and SIGHUP (the terminal closed) get Ctrl-C's semantics:
:func:`install_signal_handlers` turns them into :class:`Terminated`, a ``KeyboardInterrupt``,
in the main thread, so every command stops the way it does on Ctrl-C (partial outputs written,
the cursor shown again, temporary files removed) and exits with ``128 + signal``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt would be."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_received: list[int] = []  # termination signals received by this process


def _on_signal(signum: int, frame) -> None:
    _received.append(signum)
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP behave as Ctrl-C (main thread only, where Python runs handlers).

    A signal that was ignored when the process started (``nohup`` ignores SIGHUP) stays
    ignored.
    """
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue
            signal.signal(sig, _on_signal)
        except (ValueError, OSError):  # not the main thread, or a platform without it
            pass


def interrupt_code(default: int = 130) -> int:
    """The exit code of a stopped command: ``128 + signal`` after SIGTERM/SIGHUP, else
    ``default`` (130 for Ctrl-C)."""
    return 128 + _received[-1] if _received else default


def stopped_by() -> str:
    """What stopped the command, as its last line says it: ``interrupted`` (Ctrl-C) or
    ``stopped by SIGTERM`` / ``SIGHUP``."""
    if not _received:
        return "interrupted"
    return f"stopped by {signal.Signals(_received[-1]).name}"


class UserError(Exception):
    """A mistake or missing piece the user can fix; printed as one line, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def err(msg: str) -> None:
    """One line on stderr, flushed (the commands' notes, warnings and errors). A stderr that
    is gone (a closed terminal after SIGHUP) is not an error of its own."""
    try:
        print(msg, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


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
    from as2d.runtime.option_errors import OptionError

    try:
        return fn()
    except UserError as exc:
        fail(str(exc), exc.code)
    except OptionError as exc:  # an option value, named as the command line spells it
        fail(exc.as_flags(), 2)
    except (ModelError, AudioError, BundleError) as exc:
        fail(str(exc))
    except KeyboardInterrupt as exc:
        err("as2d: interrupted" if not isinstance(exc, Terminated)
            else f"as2d: stopped by {signal.Signals(exc.signum).name}")
        raise typer.Exit(interrupt_code()) from None
