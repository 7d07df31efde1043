"""Defaults from a config file: ``~/.config/as2d/config.toml`` (or ``$AS2D_CONFIG``).

A user who always transcribes Dutch with ``-m small`` and a glossary writes it once::

    model = "small"            # every command that has --model
    language = "nl"
    hotwords = ["Kubernetes", "as2d"]   # a glossary: joined into --hotwords

    [transcribe]               # one command's own defaults (over the top-level ones)
    output_format = ["txt", "srt"]

    [serve]
    host = "0.0.0.0"
    port = 8000
    api_key = "…"

A key is an option's long name (``output-format`` or ``output_format``). The file only
supplies defaults, through click's ``default_map`` (typer's vendored click), so click's own
precedence holds: **command line > environment variable > file > built-in default**. Every
value is checked against the option's type when the file is read, and a bad one is one line
naming the file and its line (``as2d: error: config.toml line 3: threads: a whole number
expected, not 'two'``) before any command runs. ``as2d config show`` lists each value and where
it came from.

The Python API and the server's requests do not read this file: a library's behaviour must
not change with the user's dotfiles.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from typer._click.core import BadParameter, Command, Context
from typer._click.types import BoolParamType, FloatParamType, IntParamType
from typer.core import TyperGroup, TyperOption

ENV_CONFIG = "AS2D_CONFIG"
# Keys whose list form means one option value (a glossary is the --hotwords text).
_JOINED = {"hotwords": ", "}


class ConfigError(ValueError):
    """A config file that cannot be read or holds a bad value (one line, with the file)."""


def config_path() -> Path:
    """``$AS2D_CONFIG``, else ``config.toml`` in the user's config folder."""
    env = os.environ.get(ENV_CONFIG, "").strip()
    if env:
        return Path(env).expanduser()
    from platformdirs import user_config_dir

    return Path(user_config_dir("as2d", appauthor=False)) / "config.toml"


@dataclass(frozen=True)
class Setting:
    """One value of the file: for ``command`` (None: every command with the option)."""

    command: str | None
    key: str  # the option's parameter name
    value: object
    line: int


def _line_of(text: str, table: str | None, key: str) -> int:
    """The line of ``key`` in ``table`` (1-based; 0 when it cannot be found)."""
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        head = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
        if head:
            current = head.group(1).strip().strip('"')
            continue
        m = re.match(r"\s*\"?([A-Za-z0-9_-]+)\"?\s*=", line)
        if m and current == table and m.group(1).replace("-", "_") == key:
            return n
    return 0


def _table_line(path: Path, table: str) -> int:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"\s*\[\s*\"?([^\]\"]+?)\"?\s*\]", line)
        if m and m.group(1).strip() == table:
            return n
    return 0


def read(path: Path) -> list[Setting]:
    """The settings of ``path`` (none when it does not exist); raises :class:`ConfigError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})"
                          ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    settings = []
    for name, value in data.items():
        if isinstance(value, dict):
            for key, inner in value.items():
                if isinstance(inner, dict):
                    raise ConfigError(f"{path} line {_line_of(text, name, key)}: [{name}] "
                                      f"{key}: tables go one level deep")
                k = key.replace("-", "_")
                settings.append(Setting(name, k, inner, _line_of(text, name, k)))
        else:
            k = name.replace("-", "_")
            settings.append(Setting(None, k, value, _line_of(text, None, k)))
    return settings


def _commands(group: TyperGroup, prefix: tuple[str, ...] = ()
              ) -> Iterator[tuple[tuple[str, ...], Command]]:
    """Every leaf command of ``group`` with its path of names."""
    for name, cmd in group.commands.items():
        if isinstance(cmd, TyperGroup):
            yield from _commands(cmd, (*prefix, name))
        else:
            yield (*prefix, name), cmd


def _options(cmd: Command) -> dict[str, TyperOption]:
    return {p.name: p for p in cmd.params if isinstance(p, TyperOption) and p.name}


def _checked(setting: Setting, option: TyperOption, cmd: Command, path: Path) -> object:
    """``setting``'s value as the option takes it (a list for a multiple option), checked
    against the option's type."""
    value = setting.value
    if setting.key in _JOINED and isinstance(value, list):
        value = _JOINED[setting.key].join(str(v) for v in value)
    if option.multiple and not isinstance(value, list):
        value = [value]
    if isinstance(value, dict | list) and not option.multiple:
        raise ConfigError(f"{path} line {setting.line}: {setting.key}: one value expected")
    where = f"{path} line {setting.line}: {setting.key}"
    for item in value if option.multiple else [value]:
        want = _toml_kind(option)
        if not isinstance(item, want) or (bool not in want and isinstance(item, bool)):
            raise ConfigError(f"{where}: {_KIND_NAMES[want]} expected, not {item!r}")
    try:
        option.type_cast_value(Context(cmd), value)
    except BadParameter as exc:
        raise ConfigError(f"{where}: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - a converter's own failure is still a bad value
        raise ConfigError(f"{where}: not a valid value ({exc})") from None
    return value


_KIND_NAMES = {(bool,): "true or false", (int,): "a whole number",
               (int, float): "a number", (str, int, float): "a string"}


def _toml_kind(option: TyperOption) -> tuple[type, ...]:
    """The TOML value types an option takes: no float becomes an int and no 1 a flag (click
    would truncate 2.9 threads to 2 and read ``beam_size = true`` as 1)."""
    if option.is_flag or isinstance(option.type, BoolParamType):
        return (bool,)
    if isinstance(option.type, IntParamType):
        return (int,)
    if isinstance(option.type, FloatParamType):
        return (int, float)
    return (str, int, float)  # a text option reads a number as its text (temperature = 0.2)


def default_map(root: TyperGroup, path: Path | None = None) -> dict:
    """click's ``default_map`` for ``root`` from the config file (empty without one)."""
    path = path or config_path()
    settings = read(path)
    if not settings:
        return {}
    leaves = dict(_commands(root))
    out: dict = {}
    for setting in settings:
        if setting.command is not None and not any(
                names[0] == setting.command for names in leaves):
            raise ConfigError(f"{path} line {_table_line(path, setting.command)}: "
                              f"[{setting.command}]: as2d has no such command")
        used = False
        for names, cmd in leaves.items():
            if setting.command is not None and names[0] != setting.command:
                continue
            option = _options(cmd).get(setting.key)
            if option is None:
                continue
            value = _checked(setting, option, cmd, path)
            used = True
            node = out
            for name in names:
                node = node.setdefault(name, {})
            # A command's own table wins over the top level, whatever the order in the file.
            if setting.command is not None or setting.key not in node:
                node[setting.key] = value
        if not used:
            where = f"[{setting.command}] " if setting.command else ""
            raise ConfigError(f"{path} line {setting.line}: {where}{setting.key}: no such "
                              "option" + ("" if setting.command else " in any command"))
    return out


def explain(root: TyperGroup, command: str, path: Path | None = None
            ) -> list[tuple[str, object, str]]:
    """``(option, value, source)`` for every option of ``command`` that is not its built-in
    default, in click's precedence (the environment over the file)."""
    path = path or config_path()
    leaves = {" ".join(names): cmd for names, cmd in _commands(root)}
    cmd = leaves[command]
    defaults = default_map(root, path)
    node = defaults
    for name in command.split():
        node = node.get(name, {})
    lines = {(s.command, s.key): s.line for s in read(path)}
    rows = []
    for name, option in _options(cmd).items():
        env = option.envvar if isinstance(option.envvar, str) else None
        if env and os.environ.get(env):
            value = "****" if "key" in name else os.environ[env]
            rows.append((name, value, f"environment (${env})"))
        elif name in node:
            line = lines.get((command.split()[0], name)) or lines.get((None, name), 0)
            value = "****" if "key" in name else node[name]
            rows.append((name, value, f"{path} line {line}"))
    return rows
