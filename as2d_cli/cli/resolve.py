"""The command line's side of model loading: notes on stderr, one-line errors.

The work itself (catalog names, folders, install on first use) is :mod:`as2d.loading`, shared
with the Python API; this module only gives it the terminal: ``progress`` notes as
``as2d: ...`` lines on stderr, and :class:`~as2d.loading.ModelError` as a :class:`UserError`.
"""

from __future__ import annotations

from collections.abc import Callable

from as2d import loading
from as2d.cli.errors import UserError, err
from as2d.loading import ModelError, PathLike, Progress


def make_note(quiet: bool) -> Progress:
    """The ``progress`` callback of model loading: ``as2d: …`` lines on stderr, none if quiet."""
    if quiet:
        return lambda m: None
    return lambda m: err(f"as2d: {m}")


def _as_user_error(fn: Callable, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ModelError as exc:
        raise UserError(str(exc)) from None


def catalog_entry(spec: str):
    """:func:`as2d.loading.catalog_entry`, failing as a :class:`UserError`."""
    return _as_user_error(loading.catalog_entry, spec)


def load_whisper(spec: str, precision: str | None = None, models_dir: PathLike | None = None,
                 threads: int = 1, progress: Progress | None = None, role: str = "target",
                 encoder: str | None = None, spin: bool = False):
    """:func:`as2d.loading.load_whisper`, failing as a :class:`UserError`."""
    return _as_user_error(loading.load_whisper, spec, precision, models_dir, threads,
                          progress=progress, role=role, encoder=encoder, spin=spin)


def load_llm(spec: str, precision: str | None = None, models_dir: PathLike | None = None,
             threads: int = 1, progress: Progress | None = None):
    """:func:`as2d.loading.load_llm`, failing as a :class:`UserError`."""
    return _as_user_error(loading.load_llm, spec, precision, models_dir, threads,
                          progress=progress)
