"""Transcript spans and the times written about them.

An answer about audio is only useful with *where* in the recording it comes from, so the
transcript reaches the answering stage as timed :class:`Span` objects rather than as one text,
and times are written the way people say them (``m:ss``) both in the prompt and in answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from as2d.runtime.ask.evidence import Evidence


@dataclass(frozen=True)
class Span(Evidence):
    """One transcript segment: audio times in seconds and its text (the evidence an answer
    cites is its spans, as they are)."""


def spans_from_segments(segments: Iterable) -> list[Span]:
    """Spans from :class:`as2d.runtime.transcribe.longform.Segment` objects (or anything
    with start, end, text), blank ones dropped."""
    out = []
    for s in segments:
        text = " ".join(str(s.text).split())
        if text:
            out.append(Span(float(s.start), float(s.end), text))
    return out


def format_time(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour): short, and the way people say times in audio."""
    s = max(0, int(seconds + 0.5))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


_TIME = re.compile(r"\b(?:(\d+):)?(\d{1,2}):(\d{2})\b")


def parse_times(text: str) -> list[float]:
    """Times written ``m:ss`` or ``h:mm:ss`` in ``text``, in seconds."""
    out = []
    for h, m, s in _TIME.findall(text):
        out.append(int(h or 0) * 3600 + int(m) * 60 + int(s))
    return out


def transcript_lines(spans: Sequence[Span], timed: bool, gaps: Sequence[bool] = ()) -> str:
    """The transcript as the prompt writes it, one line per span (``[m:ss] `` first when
    ``timed``); ``gaps[i]`` puts a ``[...]`` line before span ``i`` (left-out text).

    The n-gram look-up indexes the same text, so a copied line end proposes the line break
    that ends a one-line answer."""
    out = []
    for i, s in enumerate(spans):
        if i < len(gaps) and gaps[i]:
            out.append("[...]")
        out.append(f"[{format_time(s.start)}] {s.text.strip()}" if timed else s.text.strip())
    return "\n".join(out)


def time_ranges(spans: Sequence[Span], limit: int = 6) -> str:
    """``0:12–1:40, 23:05–24:10`` for runs of consecutive spans (what a note tells the user)."""
    runs: list[list[float]] = []
    for s in spans:
        if runs and s.start - runs[-1][1] < 0.5:
            runs[-1][1] = s.end
        else:
            runs.append([s.start, s.end])
    text = ", ".join(f"{format_time(a)}–{format_time(b)}" for a, b in runs[:limit])
    return text + (f", … ({len(runs) - limit} more)" if len(runs) > limit else "")
