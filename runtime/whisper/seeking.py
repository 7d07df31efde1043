"""Whisper's long-form token arithmetic: where a window's tokens split into segments, where the
next window starts, and the two guards against a window that loops.

Pure functions of token ids, shared by the target's window loop and the drafter (which seeks the
same way so that its stream follows the target's windows); neither has to import the other.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from as2d.runtime.whisper.features import FRAMES_PER_SECOND
from as2d.runtime.whisper.tokenizer import TIME_PRECISION

INPUT_STRIDE = 2  # mel frames per encoder output position (and per 20-ms timestamp)


def seek_split(tokens: list[int], ts_begin: int) -> tuple[list[int], bool]:
    """Where a window's tokens split into segments, and whether it ended on one timestamp.

    Segments end at each pair of consecutive timestamps. A window that does not end on a
    single timestamp resumes at its last pair: the text after it is decoded again.
    """
    is_ts = [t >= ts_begin for t in tokens]
    cuts = [i + 1 for i in range(len(is_ts) - 1) if is_ts[i] and is_ts[i + 1]]
    single_ending = len(is_ts) >= 2 and is_ts[-2:] == [False, True]
    return cuts, single_ending


def kept_text_tokens(tokens: list[int], ts_begin: int) -> int:
    """How many text tokens of a window survive the timestamp seek (see :func:`seek_split`)."""
    cuts, single_ending = seek_split(tokens, ts_begin)
    end = cuts[-1] if cuts and not single_ending else len(tokens)
    return sum(1 for t in tokens[:end] if t < ts_begin)


@dataclass(frozen=True)
class Piece:
    """One segment's tokens, timed in seconds from the start of its window."""

    start: float
    end: float
    tokens: list[int]


def split_window(tokens: list[int], ts_begin: int, size: int, timestamps: bool,
                 final: bool = False) -> tuple[list[Piece], int]:
    """A window's tokens as timed segments, and how many mel frames to seek past it.

    ``size`` is the window's length in frames. ``final`` (a window cut short, nothing after
    it): its unclosed text becomes a segment of its own instead of being decoded again.
    """
    tb = ts_begin
    duration = size / FRAMES_PER_SECOND
    pieces: list[Piece] = []
    consecutive, single_ending = seek_split(tokens, tb)
    if not (timestamps and consecutive):
        end = duration
        stamps = [t for t in tokens if t >= tb]
        if timestamps and stamps and stamps[-1] != tb:
            end = (stamps[-1] - tb) * TIME_PRECISION
        start = (tokens[0] - tb) * TIME_PRECISION if tokens and tokens[0] >= tb else 0.0
        return [Piece(start, end, tokens)], size
    last = 0
    for cur in consecutive + ([len(tokens)] if single_ending else []):
        part = tokens[last:cur]
        pieces.append(Piece((part[0] - tb) * TIME_PRECISION, (part[-1] - tb) * TIME_PRECISION,
                            part))
        last = cur
    if not (single_ending or final):
        return pieces, (tokens[last - 1] - tb) * INPUT_STRIDE
    if final and last < len(tokens):
        rest = tokens[last:]
        pieces.append(Piece((rest[0] - tb) * TIME_PRECISION if rest[0] >= tb else 0,
                            duration, rest))
    return pieces, size


def compression_ratio(text: str) -> float:
    """How well ``text`` compresses: Whisper's sign of a window stuck in a loop."""
    raw = text.encode("utf-8")
    if not raw:
        return 0.0
    return len(raw) / len(zlib.compress(raw))


def cut_repetition(tokens: list[int], ts_begin: int, min_repeats: int = 4,
                   max_period: int = 24) -> list[int]:
    """Cut a trailing loop (the same ≤ ``max_period`` text tokens ``min_repeats``+ times)."""
    text = [t for t in tokens if t < ts_begin]
    for period in range(1, max_period + 1):
        if len(text) < period * min_repeats:
            break
        unit = text[-period:]
        reps = 1
        while (reps + 1) * period <= len(text) and \
                text[-(reps + 1) * period : -reps * period] == unit:
            reps += 1
        if reps >= min_repeats:
            keep_text = len(text) - (reps - 1) * period
            out, seen = [], 0
            for t in tokens:
                if t < ts_begin:
                    if seen >= keep_text:
                        break
                    seen += 1
                out.append(t)
            return out
    return tokens
