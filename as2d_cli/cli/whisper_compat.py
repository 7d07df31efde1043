"""openai-whisper's option spellings for ``as2d transcribe``, so existing scripts run unchanged.

whisper's command line (argparse) spells options with underscores (``--output_format``,
``--initial_prompt``) and gives booleans as values (``--condition_on_previous_text False``,
``--word_timestamps True``). :class:`WhisperCompatCommand` rewrites those spellings into
as2d's own before click parses the arguments, so the aliases cost nothing in ``--help`` and
the options keep one declaration each (in the request dataclass).

The rules, checked against ``whisper/transcribe.py``'s ``cli()``:

- ``--some_option VALUE`` (or ``--some_option=VALUE``) becomes ``--some-option VALUE`` when the
  command has ``--some-option``; a boolean becomes ``--some-option`` / ``--no-some-option`` from
  whisper's ``True`` / ``False`` (exactly those words, as whisper's ``str2bool``).
- ``None`` (whisper's ``optional_float`` / ``optional_int``) means "unset": the option is
  dropped, except for the three thresholds, where None disables the check (``inf``), and
  ``--temperature_increment_on_fallback None`` (no fallback: ``0``).
- renamed: ``--model_dir`` → ``--models-dir``; ``--language None`` → detection. Without an
  own ``--temperature-increment-on-fallback``, ``--temperature T
  --temperature_increment_on_fallback I`` becomes the list ``--temperature T,T+I,...≤1``.
- no effect here: ``--device cpu``, ``--fp16``, ``--verbose`` (as2d always streams text to
  stdout and progress to stderr), ``--threads`` is the same spelling. Beam search options
  (``--beam_size``, ``--patience``, ``--length_penalty``) become as2d's own
  (``--beam-size``...); a command without them accepts them with a note on stderr (it decodes
  greedily).
- an option whisper has and as2d cannot honour (``--clip_timestamps 10,20``,
  ``--suppress_tokens 50,51``) is an error naming it, unless its value is whisper's default.
"""

from __future__ import annotations

import sys

import typer.core

try:  # newer typer vendors click: its parser raises (and catches) its own exceptions
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.exceptions import UsageError

# whisper's defaults for options with no as2d counterpart: the value is harmless there.
_HARMLESS_DEFAULTS = {
    "--suppress_tokens": {"-1"},
    "--carry_initial_prompt": {"False"},
    "--clip_timestamps": {"0", "0.0"},
    "--hallucination_silence_threshold": {"None"},
    "--prepend_punctuations": {"\"'“¿([{-"},
    "--append_punctuations": {"\"'.。,，!！?？:：”)]}、"},
    "--word_timestamps": {"False"},
    "--highlight_words": {"False"},
    "--max_line_width": {"None"},
    "--max_line_count": {"None"},
    "--max_words_per_line": {"None"},
    "--temperature": {"0", "0.0"},
    "--temperature_increment_on_fallback": {"None"},
    "--logprob_threshold": {"-1", "-1.0"},
}
# Accepted, and without effect on a CPU (whisper itself ignores --fp16 on a CPU).
_IGNORED = {"--fp16", "--verbose"}
# Beam search, for a command that has no beam options (it decodes greedily).
_BEAM = {"--beam_size": {"1", "None"}, "--best_of": {"1", "None"},
         "--patience": {"None", "1", "1.0"}, "--length_penalty": {"None"}}
_RENAMED = {"--model_dir": "--models-dir"}
# whisper's None for these disables the check (no fallback, for the increment).
_NONE_DISABLES = {"--compression_ratio_threshold": "inf", "--logprob_threshold": "-inf",
                  "--no_speech_threshold": "inf", "--temperature_increment_on_fallback": "0"}
_BOOLS = {"True": True, "False": False}


def _note(message: str) -> None:
    print(f"as2d: note: {message}", file=sys.stderr, flush=True)


def _options(command) -> dict:
    known: dict = {}
    for param in command.params:
        for opt in (*param.opts, *param.secondary_opts):
            known[opt] = param
    return known


def _frange(start: float, step: float) -> list[str]:
    """whisper's ``np.arange(start, 1.0 + 1e-6, step)``, written back as text."""
    if step <= 0:
        raise UsageError("--temperature_increment_on_fallback must be positive")
    out, i = [], 0
    while start + i * step <= 1.0 + 1e-6:
        out.append(f"{round(start + i * step, 6):g}")
        i += 1
    return out


# whisper's options spelled without an underscore that as2d has no option for (or, for
# --language, whose value None needs a rewrite).
_PLAIN = {"--device", "--verbose", "--fp16", "--patience", "--language"}


def _whisperish(flag: str) -> bool:
    return flag.startswith("--") and ("_" in flag or flag in _PLAIN)


def translate(command, args: list[str]) -> list[str]:
    """``args`` with whisper's spellings rewritten to the command's own."""
    if not any(_whisperish(a.partition("=")[0]) for a in args):
        return list(args)
    known = _options(command)
    out: list[str] = []
    increment: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, value = arg.partition("=")
        if arg == "--":
            out.extend(args[i:])
            break
        if not _whisperish(flag) or (flag in known and flag != "--language"):
            out.append(arg)
            i += 1
            continue
        if not eq:  # every whisper option takes a value
            if i + 1 >= len(args):
                raise UsageError(f"{flag} needs a value")
            value = args[i + 1]
            i += 2
        else:
            i += 1
        own = _RENAMED.get(flag, "--" + flag[2:].replace("_", "-"))
        param = known.get(own)
        if value == "None":
            if flag in _NONE_DISABLES and param is not None:
                out.append(f"{own}={_NONE_DISABLES[flag]}")
            continue  # unset (--language None: detect)
        if param is not None:
            if getattr(param, "is_flag", False):
                if value not in _BOOLS:
                    raise UsageError(f"{flag} expects True or False (as whisper), "
                                           f"not {value!r}")
                if _BOOLS[value]:
                    out.append(param.opts[0])
                elif param.secondary_opts:
                    out.append(param.secondary_opts[0])
                continue
            out.append(f"{own}={value}")  # one token: a value like -inf is not an option
            continue
        if flag == "--temperature_increment_on_fallback":
            increment = value
        elif flag == "--device":
            if value != "cpu":
                _note(f"--device {value} ignored: as2d runs on the CPU")
        elif flag in _BEAM:
            if value not in _BEAM[flag]:
                _note(f"{flag} {value} ignored: as2d decodes greedily")
        elif flag not in _IGNORED and value not in _HARMLESS_DEFAULTS.get(flag, ()):
            raise UsageError(f"{flag} {value}: whisper's option is not supported by "
                                   "as2d transcribe")
    return _temperatures(known, out, increment)


def _temperatures(known, out: list[str], increment) -> list[str]:
    """whisper's ``--temperature T`` with ``--temperature_increment_on_fallback I`` is the
    schedule ``T, T+I, ... ≤ 1``."""
    if increment is None or increment == "None":
        return out
    try:
        step = float(increment)
    except ValueError:
        raise UsageError(f"--temperature_increment_on_fallback: not a number: "
                               f"{increment!r}") from None
    start = "0"
    rest: list[str] = []
    j = 0
    while j < len(out):
        if out[j] == "--temperature" and j + 1 < len(out):
            start = out[j + 1]
            j += 2
            continue
        if out[j].startswith("--temperature="):
            start = out[j].partition("=")[2]
            j += 1
            continue
        rest.append(out[j])
        j += 1
    try:
        schedule = _frange(float(start), step)
    except ValueError:
        raise UsageError(f"--temperature: not a number: {start!r}") from None
    if "--temperature" not in known:
        if schedule[:1] == ["0"] and len(schedule) == 1:
            return rest
        raise UsageError("--temperature_increment_on_fallback: temperature fallback is "
                               "not supported by this as2d")
    return [*rest, "--temperature", ",".join(schedule)]


class WhisperCompatCommand(typer.core.TyperCommand):
    """A typer command that also understands openai-whisper's option spellings."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, translate(self, args))
