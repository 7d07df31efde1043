"""Transcript writers in the formats whisper users know: txt, srt, vtt, tsv, json.

Each writer takes the segments and returns the whole document as a string.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("txt", "srt", "vtt", "tsv", "json")


def _ts(seconds: float, sep: str = ".") -> str:
    ms = int(round(max(0.0, seconds) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt_time(seconds: float) -> str:
    return _ts(seconds, ",")


def vtt_time(seconds: float) -> str:
    return _ts(seconds, ".")


def _clean(text: str) -> str:
    # Subtitle cues must not contain the "-->" separator or blank lines (a blank line ends a
    # cue), so arrows are shortened and runs of line breaks collapse to one.
    return _BLANK_LINES.sub("\n", text.strip().replace("-->", "->"))


_BLANK_LINES = re.compile(r"\s*\n\s*")


def _cues(segments: Iterable):
    """(start, end, text) of the segments that have text to show."""
    for s in segments:
        text = _clean(s.text)
        if text:
            yield s.start, max(s.start, s.end), text


def to_txt(segments: Iterable) -> str:
    return "".join(s.text.strip() + "\n" for s in segments)


def to_srt(segments: Iterable) -> str:
    # As whisper writes it: numbered cues, each followed by a blank line.
    return "".join(f"{i}\n{srt_time(a)} --> {srt_time(b)}\n{text}\n\n"
                   for i, (a, b, text) in enumerate(_cues(segments), 1))


def to_vtt(segments: Iterable) -> str:
    return "WEBVTT\n\n" + "".join(f"{vtt_time(a)} --> {vtt_time(b)}\n{text}\n\n"
                                  for a, b, text in _cues(segments))


def to_tsv(segments: Iterable) -> str:
    # whisper's convention: integer milliseconds, tab separated; tabs and line breaks in the
    # text become spaces so that every segment stays one row.
    lines = ["start\tend\ttext"]
    for s in segments:
        lines.append(f"{int(round(s.start * 1000))}\t{int(round(s.end * 1000))}\t"
                     f"{' '.join(s.text.split())}")
    return "\n".join(lines) + "\n"


def to_json(segments: list, info: dict) -> str:
    doc = dict(info)
    doc["text"] = "".join(s.text for s in segments)
    doc["segments"] = [s.to_dict() for s in segments]
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def render(fmt: str, segments: list, info: dict) -> str:
    if fmt == "txt":
        return to_txt(segments)
    if fmt == "srt":
        return to_srt(segments)
    if fmt == "vtt":
        return to_vtt(segments)
    if fmt == "tsv":
        return to_tsv(segments)
    if fmt == "json":
        return to_json(segments, info)
    raise ValueError(f"unknown output format {fmt!r}")


def parse_formats(values: list[str] | None) -> list[str]:
    """``-f srt -f vtt`` or ``-f srt,vtt`` or ``-f all``; default txt."""
    if not values:
        return ["txt"]
    out: list[str] = []
    for v in values:
        for f in v.split(","):
            f = f.strip().lower()
            if not f:
                continue
            if f == "all":
                out.extend(x for x in FORMATS if x not in out)
            elif f not in FORMATS:
                raise ValueError(f"unknown output format {f!r} (choose from "
                                 f"{', '.join(FORMATS)}, all)")
            elif f not in out:
                out.append(f)
    return out or ["txt"]


@dataclass
class FileOutputs:
    """Writes ``<dir>/<stem>.<fmt>`` for each format, atomically (tmp file + rename)."""

    directory: Path
    formats: list[str]

    def paths(self, source: str) -> dict[str, Path]:
        stem = Path(source).stem or "audio"
        return {f: self.directory / f"{stem}.{f}" for f in self.formats}

    def prepare(self) -> None:
        """Create the folder (raises OSError when it cannot be a folder we can write to)."""
        if self.directory.exists() and not self.directory.is_dir():
            raise NotADirectoryError(20, "not a directory", str(self.directory))
        self.directory.mkdir(parents=True, exist_ok=True)
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise PermissionError(13, "permission denied", str(self.directory))

    def write(self, source: str, segments: list, info: dict) -> list[Path]:
        self.directory.mkdir(parents=True, exist_ok=True)
        written = []
        for fmt, path in self.paths(source).items():
            tmp = path.with_name(path.name + ".part")
            tmp.write_text(render(fmt, segments, info), encoding="utf-8")
            tmp.replace(path)
            written.append(path)
        return written
