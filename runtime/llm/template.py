"""Chat templates from untrusted model folders, rendered as transformers does, within bounds.

A Hugging Face folder's ``tokenizer_config.json`` carries its chat template as Jinja source.
``as2d ask --llm FOLDER`` takes folders from anywhere, so the template is untrusted code. It is
rendered the way transformers' ``apply_chat_template`` does, so that the real templates of the
model families render (tested on the templates themselves, ``tests/data/chat_templates/``): an
:class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` (no attributes that start with ``_``,
no mutation of lists or dicts, ``range`` capped) with ``trim_blocks``/``lstrip_blocks``, the
loop controls (``{% break %}``, ``{% continue %}``), the ``{% generation %}`` tag, and
transformers' extra names: ``tojson`` (``ensure_ascii``, ``indent``, ``separators``,
``sort_keys``; no HTML escaping), ``raise_exception``, ``strftime_now``, ``dict`` and a
``namespace`` that refuses ``_`` names; ``tools`` and ``documents`` are ``None`` unless given.
Jinja's filters keep their calling conventions (``map(attribute=...) | join`` and the filters
that take the environment or the evaluation context work).

What a template may cost is bounded *as it runs*, never checked only afterwards, so that a
template bomb is refused before memory grows (measured: tests/test_templates.py keeps the
process under a few tens of MB above its start on every bomb there):

* **time**: a deadline (:data:`MAX_SECONDS`) checked on every line the compiled template and
  the Python it calls run (a trace function on this thread, removed afterwards);
* **size of each value**: no string longer than :data:`MAX_CHARS`, no list or dict of more
  than :data:`MAX_ITEMS` items. Each operation that can multiply its input (``*``, ``+``,
  ``%``, ``~``, ``str.replace``/``center``/``expandtabs``/``join``/``format``/``translate``,
  the ``indent``/``center``/``replace``/``wordwrap``/``join``/``format``/``tojson``/``sum``
  filters, ``lipsum``, ``strftime_now``) has its result size estimated from its inputs and is
  refused *before* it runs; the others (which grow their input by a small factor at most) are
  checked after. A value is printed (``{{ }}``, ``~``, ``string``, ``join``, ``tojson``...)
  only when its printed size is bounded: a deep weight, counted over nested lists and dicts,
  that stops counting at the bound (``[s] * 100000`` holds 100,000 references to one string
  but would print gigabytes);
* **all it builds, together**: every string and list the template makes is charged to a
  budget (:data:`BUDGET_CHARS`, :data:`BUDGET_ITEMS`), so values kept alive by recursion or
  loops cannot add up past it;
* **output**: at most :data:`MAX_CHARS` characters, counted as it is written, in the result and
  in every buffer (a macro's, a ``{% set %}`` block's, a filter block's).

Anything wrong, a syntax error, ``raise_exception`` from the template, a bound reached, an
unsafe attribute, is raised as :class:`TemplateError`, a :class:`ValueError` with a one-line
message.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

MAX_CHARS = 100_000  # a chat prompt frame is a few hundred characters
MAX_ITEMS = 100_000  # jinja's sandbox caps range() at 100,000 too
BUDGET_CHARS = 20 * MAX_CHARS  # all the characters a render builds, together
BUDGET_ITEMS = 5 * MAX_ITEMS  # all the list, tuple and dict items it builds
MAX_SECONDS = 2.0
MAX_INDENT = 32  # tojson's indent and separators (real templates use 2 or 4)
_REPR_FACTOR = 10  # repr() of one character is at most 10 ('\U000e0001')


class TemplateError(ValueError):
    """The chat template cannot be rendered safely (one-line message)."""


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:200] if text else type(exc).__name__)


def _raise_exception(message: Any = "") -> None:
    raise TemplateError(f"the chat template refuses the conversation: {_one_line(str(message))}")


_WIDE = re.compile(r"%[-+ #0]*(\*|\d{5,})|%[-+ #0]*\d*\.(\*|\d{5,})|\{[^{}]*:[^{}]*\d{5,}")
_DIGITS = re.compile(r"\d+")
_PERCENT_REPR = re.compile(r"%(\([^)]*\))?[-+ #0]*\d*(\.\d*)?[ra]")


def _wide(fmt: str) -> bool:
    """A format string that could ask for a huge width or precision (``%999999999d``,
    ``{:>999999999}``, ``%*d``)."""
    return bool(_WIDE.search(fmt))


def _widest(fmt: str) -> int:
    """The largest number written in ``fmt`` (an upper bound on any width it asks for; five
    digits and more are refused by :func:`_wide` first)."""
    return max((int(d) for d in _DIGITS.findall(fmt[:MAX_CHARS]) if len(d) < 6), default=0)


class _Bounds:
    """The bounds of one render: what it has built so far, and the checks on each value."""

    def __init__(self, security_error: type[Exception], namespace_type: type) -> None:
        self.chars = 0
        self.items = 0
        self._error = security_error
        self._namespace = namespace_type

    def refuse(self, what: str):
        raise self._error(f"too large: {what}")

    # -- sizes ----------------------------------------------------------------------------------
    def weight(self, value: Any, limit: int = MAX_CHARS) -> int:
        """The size of ``value`` as text, to within :data:`_REPR_FACTOR`: the characters of
        its strings plus one per number, item and key, over nested lists, tuples, sets, dicts
        and namespaces, each occurrence counted (a list that holds one string 100,000 times
        weighs 100,000 strings). Stops as soon as it passes ``limit``, so it costs at most
        ``limit`` steps, shared and cyclic structures included."""
        total = 0
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, (str, bytes)):
                total += len(v) + 1
            elif isinstance(v, Mapping):
                total += 1 + len(v)
                stack.extend(v.keys())
                stack.extend(v.values())
            elif isinstance(v, (list, tuple, set, frozenset)):
                total += 1 + len(v)
                stack.extend(v)
            elif isinstance(v, range):
                total += 8 * len(v)
            elif isinstance(v, self._namespace):
                attrs = getattr(v, "_Namespace__attrs", {})
                total += 1 + len(attrs)
                stack.extend(attrs.values())
            elif isinstance(v, int) and not isinstance(v, bool):
                total += v.bit_length() // 3 + 1
            else:
                total += 8
            if total > limit:
                return total
        return total

    def printed(self, value: Any, as_repr: bool = False) -> int:
        """An upper bound on ``len(str(value))`` (``repr`` with ``as_repr``)."""
        if isinstance(value, str) and not as_repr:
            return len(value)
        if isinstance(value, bool) or value is None:
            return 5
        if isinstance(value, int):
            return value.bit_length() * 3 // 10 + 2  # its digits and a sign
        if isinstance(value, float):
            return 24
        return _REPR_FACTOR * self.weight(value, MAX_CHARS) + 8

    def printable(self, value: Any, what: str = "a value to print") -> None:
        """Refuse to turn ``value`` into text when its text could pass :data:`MAX_CHARS`
        (strings are checked by length; containers by weight)."""
        if isinstance(value, str):
            if len(value) > MAX_CHARS:
                self.refuse(f"{what} of {len(value)} characters")
        elif self.weight(value, MAX_CHARS) > MAX_CHARS:
            self.refuse(f"{what} whose text would pass {MAX_CHARS} characters")

    def expect(self, estimate: int, what: str) -> None:
        if estimate > MAX_CHARS:
            self.refuse(f"{what} of up to {estimate} characters")

    def made(self, value: Any) -> Any:
        """Check and charge a value just built."""
        if isinstance(value, (str, bytes)):
            n = len(value)
            if n > MAX_CHARS:
                self.refuse(f"a string of {n} characters")
            self.chars += n
            if self.chars > BUDGET_CHARS:
                self.refuse(f"more than {BUDGET_CHARS} characters built in all")
        elif isinstance(value, (list, tuple, Mapping, set, frozenset)):
            n = len(value)
            if n > MAX_ITEMS:
                self.refuse(f"a list of {n} items")
            self.items += n
            if self.items > BUDGET_ITEMS:
                self.refuse(f"more than {BUDGET_ITEMS} items built in all")
        return value

    def items_of(self, iterable: Any, what: str) -> list:
        """The items of ``iterable`` (a generator too), at most :data:`MAX_ITEMS` of them."""
        out = []
        for x in iterable:
            out.append(x)
            if len(out) > MAX_ITEMS:
                self.refuse(f"{what} of more than {MAX_ITEMS} items")
        self.made(out)
        return out

    # -- estimates of the operations that multiply their input -----------------------------------
    def join_estimate(self, sep: str, parts: list, what: str = "a join") -> None:
        total = 0
        for p in parts:
            total += self.printed(p) + len(sep)
            if total > MAX_CHARS:
                self.refuse(f"{what} of more than {MAX_CHARS} characters")

    def percent_estimate(self, fmt: str, args: Any) -> None:
        """``fmt % args``: each conversion prints at most the largest argument, padded to at
        most the widest width written in ``fmt``."""
        if _wide(fmt):
            self.refuse("%-formatting with a large or variable width")
        values = (list(args.values()) if isinstance(args, Mapping) else
                  list(args) if isinstance(args, tuple) else [args])
        as_repr = bool(_PERCENT_REPR.search(fmt))
        widest = max((self.printed(v, as_repr) for v in values), default=0)
        self.expect(len(fmt) + fmt.count("%") * (widest + _widest(fmt) + 2), "%-formatting")

    def format_estimate(self, fmt: str, args: tuple, kwargs: dict) -> None:
        """``fmt.format(*args, **kwargs)``: each field prints at most the largest argument,
        padded to at most the widest number in ``fmt`` or among the arguments (nested widths:
        ``{0:{1}}``)."""
        if _wide(fmt):
            self.refuse("str.format with a large width")
        values = [*args, *kwargs.values()]
        as_repr = "!r" in fmt or "!a" in fmt
        widest = max((self.printed(v, as_repr) for v in values), default=0)
        width = max([_widest(fmt), *(v for v in values
                                    if isinstance(v, int) and not isinstance(v, bool))])
        self.expect(len(fmt) + fmt.count("{") * (widest + min(width, MAX_CHARS) + 2),
                    "str.format")

    def str_method(self, method: Any, args: tuple, kwargs: dict) -> tuple:
        """Refuse a call of a ``str``/``bytes`` method whose result would be too large; return
        the arguments to call it with (a generator given to ``join`` is read, within bounds)."""
        s, name = method.__self__, method.__name__
        n = len(s)
        if name == "replace":
            old, new = (list(args) + [None, None])[:2]
            old, new = kwargs.get("old", old), kwargs.get("new", new)
            if isinstance(old, type(s)) and isinstance(new, type(s)):
                count = s.count(old) if old else n + 1
                self.expect(n + count * max(0, len(new) - len(old)), "str.replace")
        elif name in ("center", "ljust", "rjust", "zfill"):
            width = args[0] if args else kwargs.get("width", 0)
            if isinstance(width, int):
                self.expect(max(n, width), f"str.{name}")
        elif name == "expandtabs":
            size = args[0] if args else kwargs.get("tabsize", 8)
            if isinstance(size, int):
                self.expect(n + s.count("\t" if isinstance(s, str) else b"\t") * max(size, 0),
                            "str.expandtabs")
        elif name == "join" and args:
            parts = self.items_of(args[0], "a join")
            self.join_estimate(s if isinstance(s, str) else "", parts)
            return (parts, *args[1:]), kwargs
        elif name == "translate" and args and isinstance(args[0], Mapping):
            longest = max((self.printed(v) for v in args[0].values()), default=1)
            self.expect(n * max(1, longest), "str.translate")
        return args, kwargs


def _generation_extension():
    """transformers' ``{% generation %}`` tag (it marks the assistant's tokens for training):
    here it renders its body unchanged."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    return Generation


# Filters that only select, count or reorder (they do not turn their value into text).
_NOT_PRINTING = frozenset([
    "abs", "attr", "batch", "bool", "count", "d", "default", "dictsort", "first", "float",
    "groupby", "int", "items", "last", "length", "list", "map", "max", "min", "random",
    "reject", "rejectattr", "reverse", "round", "select", "selectattr", "slice", "sort", "sum",
    "unique",
])


def _environment():
    from jinja2.compiler import CodeGenerator
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
    from jinja2.utils import Namespace, _PassArg

    bounds = _Bounds(SecurityError, Namespace)

    class BoundedBuffer(list):
        """A frame's output buffer (a macro's, a ``{% set %}`` block's...): at most
        :data:`MAX_CHARS` characters, counted as pieces are added."""

        __slots__ = ("size",)

        def __init__(self):
            super().__init__()
            self.size = 0

        def append(self, piece):
            self.size += len(piece) if isinstance(piece, str) else 1
            if self.size > MAX_CHARS:
                bounds.refuse(f"a block that writes more than {MAX_CHARS} characters")
            bounds.chars += len(piece) if isinstance(piece, str) else 0
            if bounds.chars > BUDGET_CHARS:
                bounds.refuse(f"more than {BUDGET_CHARS} characters built in all")
            super().append(piece)

        def extend(self, pieces):
            for piece in pieces:
                self.append(piece)

    def bounded_concat(pieces) -> str:
        """``environment.concat``: joins every buffer and block (``self.block()``)."""
        parts, size = [], 0
        for piece in pieces:
            size += len(piece)
            if size > MAX_CHARS:
                bounds.refuse(f"a block that writes more than {MAX_CHARS} characters")
            parts.append(piece)
        return "".join(parts)

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "%", "+"])

        def call_binop(self, context, operator, left, right):
            if operator == "**":
                if isinstance(right, (int, float)) and (abs(right) > 64 or (
                        isinstance(left, int) and left.bit_length() * abs(right) > MAX_CHARS)):
                    raise SecurityError("the power is too large")
            elif operator == "*":
                if isinstance(left, int) and isinstance(right, int):
                    if left.bit_length() + right.bit_length() > MAX_CHARS:
                        bounds.refuse("a product of huge numbers")
                for seq, n in ((left, right), (right, left)):
                    if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)):
                        if len(seq) * abs(n) > (MAX_CHARS if isinstance(seq, (str, bytes))
                                                else MAX_ITEMS):
                            bounds.refuse("a repetition")
            elif operator == "+":
                if isinstance(left, (str, bytes, list, tuple)) and isinstance(
                        right, (str, bytes, list, tuple)) and len(left) + len(right) > MAX_CHARS:
                    bounds.refuse("a concatenation")
            elif operator == "%" and isinstance(left, str):
                bounds.percent_estimate(left, right)
            return bounds.made(super().call_binop(context, operator, left, right))

        def wrap_str_format(self, value):
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            fmt, is_map = value.__self__, value.__name__ == "format_map"

            @functools.wraps(wrapped)
            def checked(*args, **kwargs):
                if is_map:
                    bounds.format_estimate(fmt, (), args[0] if args and isinstance(
                        args[0], Mapping) else {})
                else:
                    bounds.format_estimate(fmt, args, kwargs)
                return bounds.made(wrapped(*args, **kwargs))

            return checked

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805,B902 - jinja's names
            for a in (*args, *kwargs.values()):
                if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
                    raise SecurityError("an argument is too large")
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, (str, bytes)) and callable(__obj):
                args, kwargs = bounds.str_method(__obj, args, kwargs)
            return bounds.made(super().call(__context, __obj, *args, **kwargs))

        def getitem(self, obj, argument):
            value = super().getitem(obj, argument)
            return bounds.made(value) if isinstance(argument, slice) else value

    class BoundedCodeGenerator(CodeGenerator):
        """``a ~ b`` joins through ``bounded_join`` (it is not a binop Jinja intercepts), and
        every output buffer is a :class:`BoundedBuffer`."""

        def visit_Concat(self, node, frame):
            self.write("environment.bounded_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

        def buffer(self, frame):
            frame.buffer = self.temporary_identifier()
            self.writeline(f"{frame.buffer} = environment.bounded_buffer()")

    class TemplateNamespace(Namespace):
        """``namespace()`` as transformers has it (no ``_`` names), whose values are bounded."""

        def __init__(*args, **kwargs):  # noqa: N805 - Jinja's signature trick (self in args)
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name, value in attrs.items():
                check_attribute(name, value)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            check_attribute(name, value)
            super().__setitem__(name, value)

    def check_attribute(name, value):
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a namespace attribute named {name!r}")
        if isinstance(value, (str, bytes)) and len(value) > MAX_CHARS or isinstance(
                value, (list, tuple, Mapping)) and len(value) > MAX_ITEMS:
            bounds.refuse("a namespace value")

    class TemplateDict:
        """transformers' ``dict``: builds dicts, exposes nothing of the type."""

        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    def bounded_join(parts):
        for p in parts:
            bounds.printable(p, "a ~ operand")
        bounds.join_estimate("", list(parts), "a ~ concatenation")
        return bounds.made("".join(str(p) for p in parts))

    def finalize(value):
        """Every ``{{ ... }}``: printed only when its text is bounded."""
        if isinstance(value, str):
            return value
        bounds.printable(value, "a printed value")
        return bounds.made(str(value))

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        """transformers' ``tojson`` (JSON as is, no HTML escaping, its options), written
        piece by piece within the bound."""
        bounds.printable(x, "a value for tojson")
        if isinstance(indent, int) and not isinstance(indent, bool):
            if not 0 <= indent <= MAX_INDENT:
                bounds.refuse(f"a tojson indent of {indent}")
        elif isinstance(indent, str) and len(indent) > MAX_INDENT:
            bounds.refuse("a tojson indent string")
        if separators is not None and (not isinstance(separators, (list, tuple)) or any(
                not isinstance(s, str) or len(s) > MAX_INDENT for s in separators)):
            bounds.refuse("tojson separators")
        encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent,
                                   separators=tuple(separators) if separators else None,
                                   sort_keys=sort_keys)
        out, size = [], 0
        for chunk in encoder.iterencode(x):
            size += len(chunk)
            if size > MAX_CHARS:
                bounds.refuse(f"tojson output of more than {MAX_CHARS} characters")
            out.append(chunk)
        return bounds.made("".join(out))

    def strftime_now(fmt):
        fmt = str(fmt)
        bounds.expect(len(fmt) + fmt.count("%") * 64, "strftime_now")
        return bounds.made(datetime.now().strftime(fmt))

    def bounded_filter(name, fn):
        """Jinja's filter ``fn`` with its arguments checked (and its calling convention kept:
        the environment or context it takes still comes first)."""
        skip = 1 if _PassArg.from_obj(fn) is not None else 0
        prints = name not in _NOT_PRINTING

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for a in (*args[skip + 1:], *kwargs.values()):
                if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
                    raise SecurityError(f"an argument of the {name} filter is too large")
            if len(args) > skip:
                value, rest = args[skip], args[skip + 1:]
                if prints:
                    bounds.printable(value, f"the value of the {name} filter")
                args = _estimate_filter(name, args[:skip], value, rest, kwargs)
            return bounds.made(fn(*args, **kwargs))

        return call

    def _estimate_filter(name, head, value, rest, kwargs):
        """Refuse a filter call whose result would be too large; return its arguments."""
        n = bounds.printed(value)
        arg = functools.partial(_arg, rest, kwargs)
        if name == "center":
            w = arg(0, "width", 80)
            bounds.expect(max(n, w if isinstance(w, int) else 0), "the center filter")
        elif name == "indent":
            w = arg(0, "width", 4)
            pad = len(w) if isinstance(w, str) else w if isinstance(w, int) else 0
            lines = (value.count("\n") if isinstance(value, str) else n) + 1
            bounds.expect(n + lines * max(pad, 0), "the indent filter")
        elif name == "replace":
            old, new, count = str(arg(0, "old", "")), str(arg(1, "new", "")), arg(2, "count")
            s = value if isinstance(value, str) else str(value)
            times = s.count(old) if old else len(s) + 1
            if isinstance(count, int) and count >= 0:
                times = min(times, count)
            bounds.expect(len(s) + times * max(0, len(new) - len(old)), "the replace filter")
        elif name == "wordwrap":
            width, wrap = arg(0, "width", 79), arg(2, "wrapstring", None)
            s = value if isinstance(value, str) else str(value)
            breaks = (len(s) // max(width if isinstance(width, int) else 1, 1)
                      + sum(s.count(c) for c in " \t\n-") + 1)
            bounds.expect(len(s) + breaks * len(str(wrap) if wrap else "\n"), "the wordwrap filter")
        elif name == "join":
            parts = bounds.items_of(value, "a join")
            if arg(1, "attribute", None) is None:
                bounds.join_estimate(str(arg(0, "d", "")), parts)
            else:
                for p in parts:
                    bounds.printable(p, "an item of a join")
                bounds.join_estimate(str(arg(0, "d", "")), parts)
            value = parts
        elif name == "format" and isinstance(value, str):
            bounds.percent_estimate(value, kwargs if kwargs else tuple(rest))
        elif name == "sum":
            parts = bounds.items_of(value, "a sum")
            start = arg(1, "start", 0)
            work, size = 0, len(start) if isinstance(start, (list, tuple)) else 0
            for p in parts:
                if isinstance(p, (list, tuple, str)):
                    size += len(p)
                    work += size  # each + copies the whole sum so far
                    if size > MAX_ITEMS or work > 20 * MAX_ITEMS:
                        bounds.refuse("a sum of lists")
            value = parts
        elif name == "truncate":
            length = arg(0, "length", 255)
            length = min(n, max(length, 0)) if isinstance(length, int) else n
            bounds.expect(length + len(str(arg(2, "end", "..."))), "the truncate filter")
        return (*head, value, *rest)

    def lipsum(n=5, html=True, min=20, max=100):  # noqa: A002 - Jinja's argument names
        if not all(isinstance(v, int) for v in (n, min, max)):
            raise SecurityError("lipsum takes numbers")
        bounds.expect(abs(n) * abs(max) * 16, "lipsum")
        from jinja2.utils import generate_lorem_ipsum

        return bounds.made(generate_lorem_ipsum(n=n, html=html, min=min, max=max))

    BoundedSandbox.code_generator_class = BoundedCodeGenerator
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, finalize=finalize,
                         extensions=[loopcontrols, _generation_extension()])
    env.bounded_join = bounded_join
    env.bounded_buffer = BoundedBuffer
    env.concat = bounded_concat
    env.filters["tojson"] = tojson
    env.filters = {name: bounded_filter(name, fn) for name, fn in env.filters.items()}
    env.globals.update(raise_exception=_raise_exception, strftime_now=strftime_now,
                       dict=TemplateDict(), namespace=TemplateNamespace, lipsum=lipsum)
    return env, SecurityError


def _arg(rest: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """A filter's argument by position (after its value) or by name."""
    if name in kwargs:
        return kwargs[name]
    return rest[index] if len(rest) > index else default


def render_chat_template(source: str, **variables: Any) -> str:
    """``source`` rendered with ``variables`` (``messages``, ``add_generation_prompt``, ...)
    in the bounded sandbox, as transformers renders it (``tools`` and ``documents`` are
    ``None`` unless given); :class:`TemplateError` on any failure."""
    from jinja2 import TemplateError as JinjaError

    if not isinstance(source, str):
        raise TemplateError("the chat template is not a string")
    if len(source) > MAX_CHARS:
        raise TemplateError(f"the chat template is longer than {MAX_CHARS} characters")
    variables.setdefault("tools", None)
    variables.setdefault("documents", None)
    env, security = _environment()
    try:  # outside the deadline's tracer (it would triple the cost); constants are folded by
        template = env.from_string(source)  # the same bounded filters, on literals only
    except JinjaError as exc:
        raise TemplateError(f"the chat template has an error: {_one_line(exc)}") from None
    except security as exc:
        raise TemplateError(f"the chat template does something unsafe ({_one_line(exc)})") \
            from None
    except Exception as exc:  # noqa: BLE001 - the template is untrusted code
        raise TemplateError(f"the chat template fails: {type(exc).__name__}: "
                            f"{_one_line(exc)}") from None
    deadline = time.monotonic() + MAX_SECONDS

    class _Deadline(BaseException):  # not an Exception: no handler inside Jinja swallows it
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
        detail = _one_line(exc)
        if detail.startswith("too large: "):
            raise TemplateError(f"the chat template builds too much ({detail[11:]})") from None
        raise TemplateError(f"the chat template does something unsafe ({detail})") from None
    except RecursionError:
        raise TemplateError("the chat template recurses without end") from None
    except MemoryError:
        raise TemplateError("the chat template runs out of memory") from None
    except JinjaError as exc:
        raise TemplateError(f"the chat template fails: {type(exc).__name__}: "
                            f"{_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - the template is untrusted code
        raise TemplateError(f"the chat template fails: {type(exc).__name__}: "
                            f"{_one_line(exc)}") from None
    finally:
        sys.settrace(previous)
    return "".join(out)
