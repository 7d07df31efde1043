"""``as2d config``: where the config file is and what it sets (see :mod:`as2d.cli.config`)."""

from __future__ import annotations

from typing import Annotated

import typer

from as2d.cli import config
from as2d.cli.errors import fail


def _path() -> None:
    """Print the config file's path (``$AS2D_CONFIG`` or the user's config folder)."""
    path = config.config_path()
    typer.echo(f"{path}{'' if path.is_file() else '  (no such file yet)'}")


def _show(ctx: typer.Context, command: Annotated[str, typer.Argument(
        help="The command whose settings to list (e.g. transcribe, serve, models list).")]
        = "transcribe") -> None:
    """List each option that is not its built-in default, its value and where it came from
    (the environment, the file and line). The command line wins over both."""
    root = ctx.find_root().command
    try:
        rows = config.explain(root, " ".join(command.split()))
    except KeyError:
        fail(f"as2d has no command {command!r}", 2)
    except config.ConfigError as exc:
        fail(str(exc), 2)
    path = config.config_path()
    typer.echo(f"# {command}: config file {path}{'' if path.is_file() else ' (none)'}")
    if not rows:
        typer.echo("# every option at its built-in default")
    for name, value, source in rows:
        typer.echo(f"{name.replace('_', '-')} = {value!r}  # {source}")


def register(app: typer.Typer) -> None:
    """Add the ``as2d config`` group to ``app``."""
    group = typer.Typer(help="Show the config file of defaults and what it sets.",
                        no_args_is_help=True, rich_markup_mode=None)
    group.command("show")(_show)
    group.command("path")(_path)
    app.add_typer(group, name="config")
