"""A typer command made from a request dataclass: the dataclass *is* the command's signature.

Writing the options of a command as a typer signature, again as a request dataclass, and a
third time as the call that copies one into the other, let the three drift apart. Here the
request dataclass is the only declaration: its fields, annotated with the aliases of
:mod:`as2d.cli.options` (or an ``Annotated[..., typer.Option(...)]`` of their own), become the
command's parameters in field order, and the command builds the request from what click parsed
and runs it under :func:`as2d.cli.errors.guarded`.

The request is built inside the guard, so a check in its ``__post_init__`` (``--decoder
fast``) ends in the same one ``as2d: error:`` line as any other user mistake.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import TypeVar

import typer

from as2d.cli.errors import guarded

R = TypeVar("R")


def _parameters(request_type: type) -> list[inspect.Parameter]:
    """One keyword parameter per dataclass field, its annotation resolved (the command
    modules use ``from __future__ import annotations``, so the raw ones are strings)."""
    hints = typing.get_type_hints(request_type, include_extras=True)
    params = []
    for field in dataclasses.fields(request_type):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = inspect.Parameter.empty
        params.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                                        default=default, annotation=hints[field.name]))
    return params


def callback_for(request_type: type[R], run: Callable[[R], int | None]) -> Callable[..., None]:
    """The function typer registers: takes the parsed options, runs ``run(request)``, and
    leaves with its exit code (None counts as 0)."""

    def command(**values) -> None:
        code = guarded(lambda: run(request_type(**values)))
        raise typer.Exit(code or 0)

    params = _parameters(request_type)
    command.__signature__ = inspect.Signature(params)  # what typer reads for the options
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = command.__qualname__ = run.__name__
    return command


def add_command(app: typer.Typer, name: str, request_type: type[R],
                run: Callable[[R], int | None], help: str, **settings) -> None:
    """Register ``as2d NAME`` on ``app`` once, however often it is called (a test may register
    a command on an app that already has it)."""
    if any(info.name == name for info in app.registered_commands):
        return
    text = inspect.cleandoc(help)
    app.command(name, help=text, short_help=summary(text), **settings)(
        callback_for(request_type, run))


def summary(help: str) -> str:
    """The first paragraph of ``help``, on one line: what ``as2d --help`` lists for a command.
    Given explicitly, since click would cut its own guess at 45-odd characters with "..."."""
    return " ".join(help.split("\n\n", 1)[0].split())
