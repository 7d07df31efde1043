"""The command line's side of model loading: notes on stderr, one-line errors.

The work itself (catalog names, folders, install on first use) is :mod:`as2d.loading`, shared
with the Python API; this module only gives it the terminal: ``progress`` notes as
``as2d: ...`` lines on stderr, and :class:`~as2d.loading.ModelError` as a :class:`UserError`.
"""

from __future__ import annotations

from collections.abc import Callable

from as2d import loading
from as2d.cli.errors import UserError, err
from as2d.loading import ModelError, Progress


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


def build_engine(spec, note: Progress, listener=None, llm=None):
    """:class:`as2d.engine.Engine` for ``spec``, failing as a :class:`UserError`: a model that
    cannot be found or loaded is one line (exit 1). ``llm``: its answering model, already
    loading (:func:`start_answering_model`)."""
    from as2d.engine import Engine

    return _as_user_error(Engine, spec, progress=note, listener=listener, llm=llm)


def start_answering_model(spec, note: Progress):
    """:func:`as2d.engine.start_answering_model`, failing as a :class:`UserError` (a missing
    model, one line)."""
    from as2d.engine import start_answering_model as start

    return _as_user_error(start, spec, note)
