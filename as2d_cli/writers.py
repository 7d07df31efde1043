"""Transcript writers: txt, srt, vtt, tsv and json, byte for byte as openai-whisper writes them.

Each writer takes the segments (``as2d.runtime.transcribe.longform.Segment``, or anything
with the same attributes) and returns the whole document as a string; for the same segments it
is the file whisper's ``whisper/utils.py`` writers produce (release 20250625):

- txt: each segment's text, stripped, one per line.
- srt: numbered cues, ``HH:MM:SS,mmm`` (hours always); vtt: a ``WEBVTT`` header, ``MM:SS.mmm``
  under an hour and ``HH:MM:SS.mmm`` from the first hour on. A cue's text is the segment's,
  stripped, with ``-->`` shortened to ``->``; every segment is a cue.
- tsv: ``start``, ``end`` in integer milliseconds (Python's rounding), the stripped text with
  tabs as spaces.
- json: ``{"text", "segments", "language"}`` as ``json.dump`` writes it (one line, ASCII
  escapes, no final newline); each segment carries whisper's keys in whisper's order (``words``
  with word timestamps). as2d's own keys (``duration``, ``source``, ``model``, ``decoder``, ...)
  come after whisper's, at the top level, and ``"partial": true`` on a segment cut short by
  Ctrl-C: readers of whisper's JSON look keys up by name and ignore the others.

With word timestamps, srt and vtt follow whisper's word options (:class:`SubtitleOptions`):
``max_line_width`` characters per line, ``max_line_count`` lines per cue (cues then no longer
follow segments, and a pause over 3 s starts a new cue), ``max_words_per_line``, and
``highlight_words`` (one cue per word, the spoken word underlined).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FORMATS = ("txt", "srt", "vtt", "tsv", "json")  # whisper's ("all")
SPEAKER_FORMATS = ("rttm",)  # with speakers (--diarize): "all" includes them then
# Long pause (seconds) that starts a new cue when cues do not follow segments.
_LONG_PAUSE = 3.0


@dataclass(frozen=True)
class SubtitleOptions:
    """whisper's word options for srt/vtt (they need word timestamps)."""

    max_line_width: int | None = None
    max_line_count: int | None = None
    highlight_words: bool = False
    max_words_per_line: int | None = None

    def __bool__(self) -> bool:
        return bool(self.max_line_width or self.max_line_count or self.highlight_words
                    or self.max_words_per_line)


# -- timestamps -------------------------------------------------------------------------------
def format_timestamp(seconds: float, always_include_hours: bool = False,
                     decimal_marker: str = ".") -> str:
    """``[HH:]MM:SS.mmm``: hours when asked or when there are any (negative times are 0)."""
    ms = round(max(0.0, seconds) * 1000.0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    head = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def srt_time(seconds: float) -> str:
    return format_timestamp(seconds, True, ",")


def vtt_time(seconds: float) -> str:
    return format_timestamp(seconds, False, ".")


# -- segments as whisper's dicts --------------------------------------------------------------
def _words(seg) -> list[dict] | None:
    if seg.words is None:
        return None
    return [w if isinstance(w, dict) else w.to_dict() for w in seg.words]


def segment_dict(seg) -> dict:
    """One segment as whisper's result holds it (keys in whisper's order)."""
    d = {"id": seg.id, "seek": seg.seek, "start": seg.start, "end": seg.end, "text": seg.text,
         "tokens": list(seg.tokens), "temperature": seg.temperature,
         "avg_logprob": seg.avg_logprob, "compression_ratio": seg.compression_ratio,
         "no_speech_prob": seg.no_speech_prob}
    words = _words(seg)
    if words is not None:
        d["words"] = words
    if seg.speaker is not None:
        d["speaker"] = seg.speaker  # whisperX's key, with --diarize
    if seg.language is not None:
        d["language"] = seg.language  # with --multilingual: the segment's window's
    if seg.partial:
        d["partial"] = True  # as2d's: cut short by Ctrl-C
    return d


def result_dict(segments: list, info: dict) -> dict:
    """whisper's ``transcribe()`` result for ``segments``, then ``info``'s other keys."""
    doc = {"text": "".join(s.text for s in segments),
           "segments": [segment_dict(s) for s in segments],
           "language": info.get("language")}
    doc.update((k, v) for k, v in info.items() if k not in doc)
    return doc


# -- documents --------------------------------------------------------------------------------
def speaker_prefix(speaker: str | None) -> str:
    """``[SPEAKER_00]: `` before a line of a diarized transcript (whisperX's txt/srt)."""
    return f"[{speaker}]: " if speaker is not None else ""


def to_txt(segments: Iterable) -> str:
    return "".join(speaker_prefix(s.speaker) + s.text.strip() + "\n"
                   for s in segments)


def to_srt(segments: Iterable, options: SubtitleOptions | None = None) -> str:
    return "".join(f"{i}\n{a} --> {b}\n{speaker_prefix(who)}{text}\n\n"
                   for i, (a, b, text, who) in enumerate(_cues(list(segments), srt_time,
                                                                 options), 1))


def to_vtt(segments: Iterable, options: SubtitleOptions | None = None) -> str:
    # WebVTT's voice span names the speaker: <v SPEAKER_00>text
    return "WEBVTT\n\n" + "".join(
        f"{a} --> {b}\n{'' if who is None else f'<v {who}>'}{text}\n\n"
        for a, b, text, who in _cues(list(segments), vtt_time, options))


def to_rttm(info: dict) -> str:
    """NIST RTTM, one ``SPEAKER`` line per speaker turn (file id: the source's stem)."""
    turns = info.get("speaker_turns")
    if turns is None:
        raise ValueError("rttm needs speakers: add --diarize")
    def one_field(text: str) -> str:  # RTTM fields are separated by spaces
        return re.sub(r"\s+", "_", text) or "audio"

    uri = one_field(Path(str(info.get("source") or "audio")).stem)
    return "".join(f"SPEAKER {uri} 1 {t['start']:.3f} {t['end'] - t['start']:.3f} <NA> <NA> "
                   f"{one_field(t['speaker'])} <NA> <NA>\n" for t in turns)


def to_tsv(segments: Iterable) -> str:
    return "start\tend\ttext\n" + "".join(
        f"{round(1000 * s.start)}\t{round(1000 * s.end)}\t{s.text.strip().replace(chr(9), ' ')}\n"
        for s in segments)


def to_json(segments: list, info: dict) -> str:
    return dumps_json(result_dict(segments, info))


def dumps_json(doc) -> str:
    """Strict JSON (``NaN`` and ``Infinity`` are not JSON): a value that is not a finite number
    is a :class:`ValueError` with a clear message, never an invalid file."""
    try:
        return json.dumps(doc, allow_nan=False)
    except ValueError:
        raise ValueError("the result holds a number that is not finite (NaN or infinity), "
                         "which JSON cannot carry") from None


def render(fmt: str, segments: list, info: dict, options: SubtitleOptions | None = None
           ) -> str:
    if fmt == "txt":
        return to_txt(segments)
    if fmt == "srt":
        return to_srt(segments, options)
    if fmt == "vtt":
        return to_vtt(segments, options)
    if fmt == "tsv":
        return to_tsv(segments)
    if fmt == "json":
        return to_json(segments, info)
    if fmt == "rttm":
        return to_rttm(info)
    raise ValueError(f"unknown output format {fmt!r}")


# -- subtitle cues ----------------------------------------------------------------------------
def _cues(segments: list, fmt, options: SubtitleOptions | None
          ) -> Iterator[tuple[str, str, str, str | None]]:
    """(start, end, text, speaker) of each cue: one per segment, or built from the words (the
    speaker then is the cue's first word's)."""
    options = options or SubtitleOptions()
    if not segments or _words(segments[0]) is None:
        for s in segments:
            yield (fmt(s.start), fmt(s.end), s.text.strip().replace("-->", "->"),
                   s.speaker)
        return
    for cue in _word_cues(segments, options):
        text = "".join(w["word"] for w in cue)
        who = cue[0].get("speaker")
        if not options.highlight_words:
            yield fmt(cue[0]["start"]), fmt(cue[-1]["end"]), text, who
            continue
        # One cue per word with that word underlined; the gaps between words show the line
        # without underline.
        last = fmt(cue[0]["start"])
        for i, w in enumerate(cue):
            start, end = fmt(w["start"]), fmt(w["end"])
            if start != last:
                yield last, start, text, who
            yield start, end, "".join(_underline(x["word"]) if j == i else x["word"]
                                      for j, x in enumerate(cue)), who
            last = end


_LEADING_SPACE = re.compile(r"^(\s*)(.*)$")


def _underline(word: str) -> str:
    return _LEADING_SPACE.sub(r"\1<u>\2</u>", word)


def _word_cues(segments: list, options: SubtitleOptions) -> Iterator[list[dict]]:
    """The words of ``segments`` grouped into cues, each word's text with the line break or
    space that goes before it.

    A line takes words while it stays within ``max_line_width`` characters. Without both a
    width and a line count, each segment (each ``max_words_per_line`` chunk of one) is its own
    cue; with both, a cue ends when it has ``max_line_count`` lines or before a long pause.
    """
    follow_segments = options.max_line_count is None or options.max_line_width is None
    width = options.max_line_width or 1000
    per_line = options.max_words_per_line or 1000
    all_words = [w for s in segments for w in (_words(s) or [])]
    last = all_words[0]["start"] if all_words else (segments[0].start or 0.0)
    cue: list[dict] = []
    line_len, lines = 0, 1
    for seg in segments:
        words = _words(seg) or []
        for at in range(0, len(words), per_line):
            for i, original in enumerate(words[at:at + per_line]):
                w = dict(original)
                pause = not follow_segments and w["start"] - last > _LONG_PAUSE
                fits = line_len + len(w["word"]) <= width
                new_segment = ((i == 0 and bool(cue) and follow_segments)
                               or (bool(cue) and w.get("speaker") != cue[-1].get("speaker")))
                if line_len > 0 and fits and not pause and not new_segment:
                    line_len += len(w["word"])  # same line, with its space
                else:
                    w["word"] = w["word"].strip()
                    if new_segment or (cue and options.max_line_count is not None
                                       and (pause or lines >= options.max_line_count)):
                        yield cue
                        cue, lines = [], 1
                    elif line_len > 0:
                        lines += 1
                        w["word"] = "\n" + w["word"]
                    line_len = len(w["word"].strip())
                cue.append(w)
                last = w["start"]
    if cue:
        yield cue


# -- formats and files ------------------------------------------------------------------------
def parse_formats(values: list[str] | None, speakers: bool = False) -> list[str]:
    """``-f srt -f vtt`` or ``-f srt,vtt`` or ``-f all``; default txt. ``rttm`` is known
    always (a run without speakers refuses it); ``all`` includes it when ``speakers``."""
    if not values:
        return ["txt"]
    known = FORMATS + SPEAKER_FORMATS
    out: list[str] = []
    for v in values:
        for f in v.split(","):
            f = f.strip().lower()
            if not f:
                continue
            if f == "all":
                out.extend(x for x in FORMATS + (SPEAKER_FORMATS if speakers else ())
                           if x not in out)
            elif f not in known:
                raise ValueError(f"unknown output format {f!r} (choose from "
                                 f"{', '.join(known)}, all)")
            elif f not in out:
                out.append(f)
    return out or ["txt"]


@dataclass
class FileOutputs:
    """Writes ``<dir>/<stem>.<fmt>`` for each format, atomically (tmp file + rename).

    The naming rule, the same for ``transcribe`` and ``batch``: an output is named after its
    input's file name (``talk.wav`` → ``talk.txt``). Within one run, a second input with a
    name already taken (``a/x.wav b/x.wav``) gets ``<stem>-2``, never the first's file. An
    output that already exists when it is written — from an earlier run, or from another
    process writing into the same folder at the same time — is replaced, as whisper does, but
    never silently: :attr:`replaced` lists the files the last :meth:`write` replaced, and the
    commands say so. Each process writes its own temporary file (``<name>.<pid>.part``), so
    two processes writing the same name never mix their bytes: one whole transcript wins.
    """

    directory: Path
    formats: list[str]
    options: SubtitleOptions = field(default_factory=SubtitleOptions)

    def __post_init__(self) -> None:
        self._stems: dict[str, str] = {}  # stem → the source that took it in this run
        self.replaced: list[Path] = []  # what the last write() replaced

    def paths(self, source: str) -> dict[str, Path]:
        """The output files of ``source``: ``<stem>.<fmt>``; a second source with the same
        stem in one run (``a/x.wav b/x.wav``) gets ``<stem>-2.<fmt>``, never the first's."""
        stem = Path(source).stem or "audio"
        if self._stems.get(stem, source) != source:
            n = 2
            while self._stems.get(f"{stem}-{n}", source) != source:
                n += 1
            stem = f"{stem}-{n}"
        return {f: self.directory / f"{stem}.{f}" for f in self.formats}

    def prepare(self) -> None:
        """Create the folder (raises OSError when it cannot be a folder we can write to)."""
        if self.directory.exists() and not self.directory.is_dir():
            raise NotADirectoryError(20, "not a directory", str(self.directory))
        self.directory.mkdir(parents=True, exist_ok=True)
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise PermissionError(13, "permission denied", str(self.directory))

    def write(self, source: str, segments: list, info: dict) -> list[Path]:
        """Write every format of ``source`` (each atomically); an error leaves no ``.part`` file
        behind. Raises OSError (disk full, ...) or ValueError (a value JSON cannot carry)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = self.paths(source)
        texts = {f: render(f, segments, info, self.options) for f in paths}  # before writing
        written: list[Path] = []
        self.replaced = []
        for fmt, path in paths.items():
            tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
            try:
                # newline="": lines end with \n on every platform.
                with open(tmp, "w", encoding="utf-8", newline="") as fh:
                    fh.write(texts[fmt])
                if _publish(tmp, path):
                    self.replaced.append(path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            written.append(path)
        self._stems[next(iter(paths.values())).stem] = source
        return written


def _publish(tmp: Path, path: Path) -> bool:
    """Move ``tmp`` to ``path`` atomically; True when ``path`` existed and was replaced.

    A hard link creates ``path`` only if nothing is there, in one step, so a file another
    process wrote a moment ago is known to be replaced, not guessed from a check that races
    with it; where links are not supported, the check is made just before the rename."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        os.replace(tmp, path)
        return True
    except OSError:  # no hard links on this file system (FAT, some network shares)
        existed = os.path.lexists(path)
        os.replace(tmp, path)
        return existed
    tmp.unlink(missing_ok=True)
    return False
