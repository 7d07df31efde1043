"""Option values the engine refuses, named the way the caller spelled them.

The same check serves three faces that name an option three ways: the Python API and the
engine's fields (``beam_size``), the server's form fields (``beam_size``, the same) and the
command line (``--beam-size``). A message that said ``--beam-size`` to a server client, or
``beam_size`` to someone at a terminal, would point at something they never typed. So the
check raises :class:`OptionError` with the option's field name and the problem, and each face
words it: ``str(exc)`` (API, server) uses field names, :meth:`OptionError.as_flags` (CLI)
flags. It is a ``ValueError``, so code that catches those keeps working.
"""

from __future__ import annotations

import math
import numbers
import re

_OTHER = re.compile(r"\{(\d)\}")  # another option named in a problem: {0}, {1}, ...


class OptionError(ValueError):
    """``option`` (a field name) cannot take the value given.

    ``problem`` may refer to other options as ``{0}``, ``{1}``… listed in ``others`` (field
    names); ``flags`` maps a field name to its command-line flag where that is not simply
    ``--`` and the name with dashes (``min_silence`` is ``--silence``)."""

    def __init__(self, option: str, problem: str, others: tuple[str, ...] = (),
                 flags: dict[str, str] | None = None) -> None:
        self.option = option
        self.problem = problem
        self.others = tuple(others)
        self.flags = dict(flags or {})
        super().__init__(self._words(lambda name: name))

    def _words(self, spell) -> str:
        # Only ``{0}``, ``{1}``… are replaced, not str.format: the problem often quotes the
        # user's own value, which may hold braces of its own (``--decoder '{x}'``).
        problem = _OTHER.sub(lambda m: spell(self.others[int(m.group(1))])
                             if int(m.group(1)) < len(self.others) else m.group(0), self.problem)
        return f"{spell(self.option)} {problem}"

    def flag(self, name: str) -> str:
        """``name``'s command-line flag."""
        return self.flags.get(name) or "--" + name.replace("_", "-")

    def as_flags(self) -> str:
        """The message with every option named by its command-line flag."""
        return self._words(self.flag)


def is_number(value) -> bool:
    """A real number (Python's or numpy's), not a bool, a string or None."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and type(value).__name__ != "bool_"


def shown(value) -> str:
    """``value`` as a message quotes it: a number as typed (``1e+06``, ``nan``, ``5``),
    anything else as its repr (``'five'``), so that the user sees what they gave."""
    if not is_number(value):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, numbers.Integral):
        text = str(value)
        return text if len(text) <= 20 else f"a number of {len(text)} digits"
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{float(value):g}"


def check_finite(name: str, value, low: float | None = None, high: float | None = None,
                 what: str = "", above: bool = False) -> None:
    """Raise :class:`OptionError` unless ``value`` is a finite number from ``low`` (``above``:
    more than ``low``) to ``high`` (None: no bound on that side); ``what`` says what the
    number is. NaN and infinity are never in range."""
    ok = is_number(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if above else value >= low
    if ok and high is not None:
        ok = value <= high
    if ok:
        return
    if low is not None and high is not None:
        bounds = (f" more than {low:g} and at most {high:g}" if above
                  else f" from {low:g} to {high:g}")
    elif low is not None:
        bounds = f" more than {low:g}" if above else f" of {low:g} or more"
    elif high is not None:
        bounds = f" of {high:g} or less"
    else:
        bounds = ""
    raise OptionError(name, f"must be a finite number{bounds}{what}, not {shown(value)}")


def check_whole(name: str, value, low: int, high: int | None = None, why: str = "") -> None:
    """Raise :class:`OptionError` unless ``value`` is a whole number from ``low`` to ``high``
    (None: no upper bound); ``why`` explains the upper bound."""
    whole = is_number(value) and (isinstance(value, numbers.Integral)
                                  or (math.isfinite(value) and float(value).is_integer()))
    if not (whole and value >= low):
        raise OptionError(name, f"must be a whole number of {low} or more, not {shown(value)}")
    if high is not None and value > high:
        raise OptionError(name, f"must be at most {high}, not {shown(value)}{why}")


# A model name is looked up as a path (a folder, a catalog bundle, an Ollama manifest): what no
# file system can hold is refused as a name, not reported as an unwritable output.
MAX_NAME_BYTES = 255  # one file or folder name (NAME_MAX)
MAX_PATH_BYTES = 4095  # a whole path (PATH_MAX, less its terminator)


def check_name(name: str, value) -> None:
    """Raise :class:`OptionError` unless ``value`` can name a model: text, not empty, without
    NUL, each ``/``-separated part at most :data:`MAX_NAME_BYTES` bytes and the whole at most
    :data:`MAX_PATH_BYTES`."""
    if not isinstance(value, str) or not value.strip():
        raise OptionError(name, f"must be a model name or folder, not {shown(value)}")
    if "\x00" in value:
        raise OptionError(name, "cannot hold a NUL character")
    size = len(value.encode("utf-8", "surrogateescape"))
    longest = max(len(part.encode("utf-8", "surrogateescape")) for part in value.split("/"))
    if size > MAX_PATH_BYTES or longest > MAX_NAME_BYTES:
        raise OptionError(name, f"is too long to be a model name or path ({size} bytes; a name "
                          f"has at most {MAX_NAME_BYTES}, a path {MAX_PATH_BYTES}): "
                          f"{shown(value)}")


def as_flags(exc: BaseException) -> str:
    """An exception's message for a terminal: an :class:`OptionError` names flags, anything
    else is its own text."""
    return exc.as_flags() if isinstance(exc, OptionError) else str(exc)
