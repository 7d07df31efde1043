"""``as2d ... --help`` as a user reads it in an 80-column terminal (no models needed).

Every option a command declares must appear whole (not cut to ``--condition-on-pr…``), no
line may run past the 80 columns, and the help must not carry the type-name metavars
(``<bool>``, ``<str>``, ``{files}...``) that some typer releases print: pyproject pins a typer
range whose help reads cleanly, and this test is what says so.
"""

from __future__ import annotations

import re

import pytest
from helpers import cli

WIDTH = 80
# Metavars that name a Python type instead of saying what to type.
TYPE_METAVAR = re.compile(r"<(?:bool|str|int|float|path|list\[[^\]]*\])>|\{\w+\}", re.I)


def _commands():
    """(argv, click command) for every command and sub-command of ``as2d``."""
    import typer

    from as2d.cli.app import app

    root = typer.main.get_command(app)
    out = [([], root)]
    stack = [([], root)]
    while stack:
        path, group = stack.pop()
        for name, sub in sorted(getattr(group, "commands", {}).items()):
            out.append(([*path, name], sub))
            stack.append(([*path, name], sub))
    return out


COMMANDS = _commands()


def _help(argv: list[str], monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", str(WIDTH))  # click's help formatter reads it
    r = cli(*argv, "--help")
    assert r.exit_code == 0, r.output
    return r.stdout


def test_every_command_is_covered():
    names = {" ".join(argv) for argv, _ in COMMANDS}
    assert {"", "transcribe", "mic", "ask", "bench", "models", "models list",
            "models install", "models verify", "models path", "models export",
            "models remove"} <= names


@pytest.mark.parametrize("argv,command", COMMANDS,
                         ids=[" ".join(argv) or "as2d" for argv, _ in COMMANDS])
def test_help_at_80_columns_shows_every_option_whole(argv, command, monkeypatch):
    text = _help(argv, monkeypatch)
    long_lines = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not long_lines, f"lines past {WIDTH} columns: {long_lines}"
    assert "…" not in text, "something was cut short"
    declared = [name for p in command.params if getattr(p, "opts", None)
                for name in (*p.opts, *p.secondary_opts) if name.startswith("-")]
    declared += ["-h", "--help"]  # click adds the help option outside ``params``
    for name in declared:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), \
            f"{name} is not shown whole in `as2d {' '.join(argv)} --help`:\n{text}"
    noise = TYPE_METAVAR.findall(text)
    assert not noise, f"type-name metavars {noise} in:\n{text}"
    usage = text.strip().splitlines()[0]
    assert usage.startswith(f"Usage: as2d {' '.join(argv)}".rstrip()), usage


def test_decoding_commands_share_their_option_spelling():
    """The options transcribe, mic and ask share are the same flags with the same defaults."""
    by_name = {" ".join(argv): {p.name: p for p in cmd.params} for argv, cmd in COMMANDS}
    shared = ("model", "precision", "language", "decoder", "drafter", "threads", "live",
              "stats", "models_dir", "quiet")
    for name in shared:
        first = by_name["transcribe"][name]
        for command in ("mic", "ask"):
            other = by_name[command][name]
            assert (other.opts, other.secondary_opts, other.default) == \
                   (first.opts, first.secondary_opts, first.default), (command, name)


def test_version_and_bare_app():
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    import as2d

    # One place holds the version (pyproject.toml); the package metadata, as2d.__version__
    # and --version say it (an editable install older than pyproject's version fails here).
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert version("as2d") == as2d.__version__ == declared
    v = cli("--version")
    assert v.exit_code == 0 and v.stdout == f"as2d {declared}\n"
    bare = cli()
    assert "Usage: as2d" in bare.output and "transcribe" in bare.output
