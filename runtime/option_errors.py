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


def as_flags(exc: BaseException) -> str:
    """An exception's message for a terminal: an :class:`OptionError` names flags, anything
    else is its own text."""
    return exc.as_flags() if isinstance(exc, OptionError) else str(exc)
