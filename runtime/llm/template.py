"""Chat templates from untrusted model folders, rendered in a sandbox with bounded cost.

A Hugging Face folder's ``tokenizer_config.json`` carries its chat template as Jinja source.
``as2d ask --llm FOLDER`` takes folders from anywhere, so the template is untrusted code: it is
rendered in Jinja's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` (no attributes that
start with ``_``, no ``__globals__``, no mutation of lists or dicts, ``range`` capped), and
within bounds on what it may cost:

* **time**: a deadline (:data:`MAX_SECONDS`) checked on every line the compiled template
  runs (a trace function on this thread, removed afterwards);
* **output**: at most :data:`MAX_CHARS` characters;
* **memory**: ``*``, ``**``, ``%`` and ``+`` refuse results larger than :data:`MAX_CHARS`
  items (``"x" * 10**9`` or a doubling loop), and filters refuse integer arguments above it
  (``center(10**9)``).

Anything wrong, a syntax error, ``raise_exception`` from the template, a bound reached, an
unsafe attribute, is raised as :class:`TemplateError`, a :class:`ValueError` with a one-line
message.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sized
from typing import Any

MAX_CHARS = 100_000  # a chat prompt frame is a few hundred characters
MAX_SECONDS = 2.0


class TemplateError(ValueError):
    """The chat template cannot be rendered safely (one-line message)."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:200] if text else type(exc).__name__)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, Sized) and not isinstance(value, dict) else 0


_WIDE = re.compile(r"%[-+ #0]*(\*|\d{5,})|%[-+ #0]*\d*\.(\*|\d{5,})|\{[^{}]*:[^{}]*\d{5,}")


def _wide(fmt: str) -> bool:
    """A format string that could ask for a huge width or precision (``%999999999d``,
    ``{:>999999999}``, ``%*d``)."""
    return bool(_WIDE.search(fmt))


def _raise_exception(message: Any = "") -> None:
    raise TemplateError(f"the chat template refuses the conversation: {_one_line(str(message))}")


def _environment():
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
    from jinja2.utils import Namespace

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "%", "+"])

        def call_binop(self, context, operator, left, right):
            if operator == "**":
                if isinstance(right, (int, float)) and (abs(right) > 64 or (
                        isinstance(left, int) and left.bit_length() * abs(right) > MAX_CHARS)):
                    raise SecurityError("the power is too large")
            elif operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(n, int) and _size(seq) * abs(n) > MAX_CHARS:
                        raise SecurityError("the repetition is too large")
            elif operator == "+":
                if _size(left) + _size(right) > MAX_CHARS:
                    raise SecurityError("the concatenation is too large")
            elif operator == "%" and isinstance(left, str) and _wide(left):
                raise SecurityError("%-formatting with a large or variable width")
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value):
            if (getattr(value, "__name__", "") in ("format", "format_map")
                    and isinstance(getattr(value, "__self__", None), str)
                    and _wide(value.__self__)):
                raise SecurityError("str.format with a large width")
            return super().wrap_str_format(value)

        def call(self, context, obj, *args, **kwargs):
            for a in (*args, *kwargs.values()):
                if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
                    raise SecurityError("an argument is too large")
            return super().call(context, obj, *args, **kwargs)

    class BoundedCodeGenerator(CodeGenerator):
        """``a ~ b`` joins through :func:`bounded_join` (it is not a binop Jinja intercepts)."""

        def visit_Concat(self, node, frame):
            self.write("environment.bounded_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class BoundedNamespace(Namespace):
        """``namespace()`` whose attributes cannot grow past the bound."""

        def __setitem__(self, name, value):
            if _size(value) > MAX_CHARS:
                raise SecurityError("a namespace value is too large")
            super().__setitem__(name, value)

    def bounded_join(parts):
        parts = [str(p) for p in parts]
        if sum(len(p) for p in parts) > MAX_CHARS:
            raise SecurityError("the joined string is too large")
        return "".join(parts)

    BoundedSandbox.code_generator_class = BoundedCodeGenerator
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True)  # as before the sandbox
    env.bounded_join = bounded_join
    env.globals["namespace"] = BoundedNamespace

    def bounded(fn):
        def call(*args, **kwargs):
            for a in (*args[1:], *kwargs.values()):
                if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
                    raise SecurityError("a filter argument is too large")
            if fn is format_filter and args and isinstance(args[0], str) and _wide(args[0]):
                raise SecurityError("the format filter with a large width")
            return fn(*args, **kwargs)
        return call

    format_filter = env.filters.get("format")
    env.filters = {name: bounded(fn) for name, fn in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    return env, SecurityError


def render_chat_template(source: str, **variables: Any) -> str:
    """``source`` rendered with ``variables`` (``messages``, ``add_generation_prompt``, ...)
    in the bounded sandbox; :class:`TemplateError` on any failure."""
    from jinja2 import TemplateError as JinjaError

    if not isinstance(source, str):
        raise TemplateError("the chat template is not a string")
    if len(source) > MAX_CHARS:
        raise TemplateError(f"the chat template is longer than {MAX_CHARS} characters")
    env, security = _environment()
    try:
        template = env.from_string(source)
    except JinjaError as exc:
        raise TemplateError(f"the chat template has an error: {_one_line(exc)}") from None
    deadline = time.monotonic() + MAX_SECONDS

    class _Deadline(Exception):
        pass

    def tracer(frame, event, arg):
        if time.monotonic() > deadline:
            raise _Deadline
        return tracer

    previous = sys.gettrace()
    out: list[str] = []
    total = 0
    sys.settrace(tracer)
    try:
        for piece in template.generate(**variables):
            total += len(piece)
            if total > MAX_CHARS:
                raise TemplateError(f"the chat template writes more than {MAX_CHARS} "
                                    "characters")
            out.append(piece)
    except TemplateError:
        raise
    except _Deadline:
        raise TemplateError(f"the chat template takes longer than {MAX_SECONDS:g} s to "
                            "render") from None
    except security as exc:
        raise TemplateError(f"the chat template does something unsafe ({_one_line(exc)})") \
            from None
    except RecursionError:
        raise TemplateError("the chat template recurses without end") from None
    except (JinjaError, Exception) as exc:  # noqa: BLE001 - the template is untrusted code
        raise TemplateError(f"the chat template fails: {type(exc).__name__}: "
                            f"{_one_line(exc)}") from None
    finally:
        sys.settrace(previous)
    return "".join(out)
