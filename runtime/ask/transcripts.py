"""A recording transcribed once: transcripts kept by the audio's content and the options.

Asking a second question about a recording must not transcribe it again (a 10-minute file is a
minute of decoding on two cores; the answer itself is about a second). So ``as2d ask``, the
Python API and the server keep each transcript they make in a small cache beside the models,
keyed by:

* the audio's **content**: the SHA-256 of the file's bytes (:func:`file_digest`; an array
  given to the API: of its 16-kHz float32 samples, :func:`samples_digest`), so the same file
  under another name or path is found, and a changed file is not. A follow-up question reads
  the digest back instead of the file (:meth:`TranscriptCache.digest`: remembered under the
  file's identity, its path, device, inode, size and change times, as git's index does; a file
  written since has another identity and is hashed again);
* what decides the **text**: the speech model (its bundle's manifest, so a re-converted model
  is another), the encoder back end asked for (back ends differ in the last bits, which can
  flip a word) with the runtime versions, and the transcription options. Not the decoder, the
  drafter or the thread count: AS²D and speculative decoding are lossless, so they give the
  target's own text token for token.

The cache is bounded (:data:`MAX_ENTRIES` transcripts and :data:`MAX_BYTES`; the least recently
used go first), written atomically (a reader never sees half a file; another process may write
the same entry), and removable (``as2d ask --clear-cache``, or delete the folder). A folder that
cannot be written only means working without it.

:class:`Transcript` is also what a whisper JSON file holds (:func:`read_whisper_json`:
``as2d transcribe -f json`` and openai-whisper's ``--output_format json`` write ``segments``
with ``start``, ``end`` and ``text``), so a question can be asked of a transcript with no audio.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from as2d.runtime.ask.spans import Span, spans_from_segments
from as2d.runtime.files import write_replacing

FORMAT = "as2d-transcript"
VERSION = 1
FOLDER = ".transcripts"  # inside the models folder (a dot folder: not a model)
IDENTITIES = "identities"  # inside the cache folder: a file's identity -> its digest
MAX_ENTRIES = 200
MAX_IDENTITIES = 4 * MAX_ENTRIES  # (about 200 bytes each)
SETTLED_NS = 2_000_000_000  # a file written this recently is hashed again next time
MAX_BYTES = 64 << 20  # an hour of speech is about 100 kB of JSON
MEMORY_ENTRIES = 16  # a server keeps its most recent transcripts in memory too


ENV_CACHE = "AS2D_TRANSCRIPT_CACHE"  # a folder, or "off" (nothing read or kept)


def default_cache(models_dir: str | os.PathLike) -> TranscriptCache | None:
    """The transcript cache of a models folder (``$AS2D_TRANSCRIPT_CACHE`` names another
    folder, or ``off``: None)."""
    env = os.environ.get(ENV_CACHE, "").strip()
    if env.lower() in ("off", "0", "no", "false"):
        return None
    return TranscriptCache(Path(env).expanduser() if env else Path(models_dir) / FOLDER)


class TranscriptError(ValueError):
    """A transcript file that cannot be read (the message names it and says why, one line)."""


@dataclass(frozen=True)
class Transcript:
    """What a question is answered from: the timed spans, the language, the length."""

    spans: tuple[Span, ...]
    language: str | None
    duration: float
    # The drafter's own text of the recording (a candidate source for the answer; speed only).
    drafted: str | None = None
    model: str | None = None  # the speech model that wrote it (None: not known)
    # Where it came from: "transcribed" (this run), "cache" (an earlier run), "file" (JSON).
    origin: str = "transcribed"
    key: str | None = field(default=None, compare=False)  # its cache key, when it has one

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "language": self.language,
                "duration": round(float(self.duration), 3), "model": self.model,
                "drafted": self.drafted,
                "segments": [s.to_dict() for s in self.spans]}

    @classmethod
    def from_dict(cls, doc: dict, origin: str, key: str | None = None) -> Transcript:
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise TranscriptError("not an as2d transcript of this version")
        return cls(tuple(_spans(doc.get("segments"), "segments")), doc.get("language"),
                   float(doc.get("duration") or 0.0), doc.get("drafted"), doc.get("model"),
                   origin, key)


def file_digest(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """SHA-256 of a file's bytes (a 10-minute 16-kHz wav: about 30 ms)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return "file:" + h.hexdigest()


def file_identity(path: str | os.PathLike, sample: int = 1 << 16) -> str:
    """What changes when a file is replaced or written: its resolved path, device, inode,
    size, modification and change times in nanoseconds, and a SHA-256 of its first and last
    64 KiB (OSError when it cannot be read).

    The sample is for the file systems whose times and inodes do not tell: a recorder without
    a clock stamps every file on its FAT card with one time, FAT's "change time" is the
    creation time and its inode numbers repeat after a replug, so a new REC001.WAV of the
    same length would otherwise pass for the old one. Opening the file (``fstat``, not
    ``stat``) also makes a network file system check its cached attributes."""
    real = os.path.realpath(path)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        h = hashlib.sha256(f.read(sample))
        if st.st_size > sample:
            f.seek(max(sample, st.st_size - sample))
            h.update(f.read(sample))
    return (f"{real}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
            f"{st.st_ctime_ns}|{h.hexdigest()[:32]}")


def samples_digest(samples) -> str:
    """SHA-256 of audio samples (16-kHz float32, as the API reads an array)."""
    import numpy as np

    data = np.ascontiguousarray(samples, dtype=np.float32)
    return "samples:" + hashlib.sha256(data.tobytes()).hexdigest()


def transcript_key(audio: str, model: dict, options: dict) -> str:
    """The cache key: the audio's digest, what identifies the speech model and its encoder
    (``model``), and the transcription options that can change the text (``options``)."""
    doc = json.dumps({"v": VERSION, "audio": audio, "model": model, "options": options},
                     sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()


class TranscriptCache:
    """Transcripts by key in ``folder`` (one JSON file each), least recently used dropped
    beyond ``max_entries`` or ``max_bytes``; the ``memory`` most recent also kept in memory
    (a server's follow-up questions read no file). Thread-safe; several processes may share
    the folder (atomic writes; a vanished or damaged entry is a miss)."""

    def __init__(self, folder: str | os.PathLike, max_entries: int = MAX_ENTRIES,
                 max_bytes: int = MAX_BYTES, memory: int = MEMORY_ENTRIES) -> None:
        self.folder = Path(folder)
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._memory: OrderedDict[str, Transcript] = OrderedDict()
        self._memory_size = memory
        self._lock = threading.Lock()

    @classmethod
    def in_models_dir(cls, models_dir: str | os.PathLike) -> TranscriptCache:
        return cls(Path(models_dir) / FOLDER)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> Transcript | None:
        with self._lock:
            found = self._memory.get(key)
            if found is not None:
                self._memory.move_to_end(key)
                return found
        path = self.path(key)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            transcript = Transcript.from_dict(doc, "cache", key)
        except (OSError, ValueError, TypeError, AttributeError):
            try:  # damaged (or a newer format): transcribed again, written over
                if path.is_file():
                    path.unlink()
            except OSError:
                pass
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        self._remember(key, transcript)
        return transcript

    def put(self, key: str, transcript: Transcript) -> bool:
        """Keep ``transcript`` under ``key``; False when the folder cannot be written."""
        self._remember(key, replace(transcript, origin="cache", key=key))  # as get() reads it
        text = json.dumps(transcript.to_dict(), ensure_ascii=False, allow_nan=False)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        ok = write_replacing(self.path(key), lambda p: p.write_text(text, encoding="utf-8"))
        if ok:
            self.prune()
        return ok

    def digest(self, path: str | os.PathLike) -> str:
        """:func:`file_digest` of ``path``, read back when this file (the same
        :func:`file_identity`) was hashed before: a follow-up question about a 10-minute
        recording reads a line, not 19 MB. OSError when the file cannot be read."""
        identity = file_identity(path)
        raw = identity.encode("utf-8", "surrogateescape")  # (any name a file system allows)
        where = self.folder / IDENTITIES / hashlib.sha256(raw).hexdigest()[:32]
        try:
            known = where.read_text(encoding="utf-8", errors="surrogateescape")
            if known.startswith(identity + "\n"):
                digest = known[len(identity) + 1:].strip()
                if digest.startswith("file:") and len(digest) == 69:
                    return digest
        except OSError:
            pass
        digest = file_digest(path)
        try:
            # Remembered only when the file kept its identity while it was read, and was last
            # written long enough ago that a later write cannot share its time stamp (file
            # systems keep times in ticks of a few ms: git's "racily clean" entries).
            st = os.stat(path)
            unchanged = file_identity(path) == identity and \
                time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLED_NS
            if unchanged:
                where.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return digest
        if unchanged and write_replacing(
                where, lambda p: p.write_text(f"{identity}\n{digest}\n", encoding="utf-8",
                                              errors="surrogateescape")):
            self._prune_identities()
        return digest

    def _prune_identities(self) -> None:
        try:
            found = [(p.stat().st_mtime, p) for p in (self.folder / IDENTITIES).iterdir()]
        except OSError:
            return
        if len(found) <= MAX_IDENTITIES:
            return
        for _, p in sorted(found, key=lambda e: e[0])[:len(found) - MAX_IDENTITIES]:
            try:
                p.unlink()
            except OSError:
                pass

    def _remember(self, key: str, transcript: Transcript) -> None:
        with self._lock:
            self._memory[key] = transcript
            self._memory.move_to_end(key)
            while len(self._memory) > self._memory_size:
                self._memory.popitem(last=False)

    def entries(self) -> list[tuple[Path, float, int]]:
        """``(path, last used, bytes)`` of every entry, most recently used first."""
        out = []
        try:
            files = list(self.folder.glob("*.json"))
        except OSError:
            return out
        for p in files:
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((p, st.st_mtime, st.st_size))
        out.sort(key=lambda e: -e[1])
        return out

    def prune(self) -> int:
        """Drop the least recently used entries beyond the bounds; how many were dropped."""
        dropped, total = 0, 0
        for i, (p, _, size) in enumerate(self.entries()):
            total += size
            if i >= self.max_entries or total > self.max_bytes:
                try:
                    p.unlink()
                    dropped += 1
                except OSError:
                    pass
        return dropped

    def clear(self) -> tuple[int, int]:
        """Remove every entry (and the memory's): ``(entries, bytes)`` removed."""
        with self._lock:
            self._memory.clear()
        n = size = 0
        for p, _, b in self.entries():
            try:
                p.unlink()
                n, size = n + 1, size + b
            except OSError:
                pass
        try:
            for p in (self.folder / IDENTITIES).iterdir():
                p.unlink(missing_ok=True)
        except OSError:
            pass
        return n, size


def read_whisper_json(path: str | os.PathLike) -> Transcript:
    """A transcript from a whisper JSON file (``as2d transcribe -f json``, openai-whisper's
    ``--output_format json``, faster-whisper segments dumped as JSON): an object with
    ``segments`` (each with ``start``, ``end``, ``text``, and ``speaker`` when it was
    diarized: ``as2d transcribe --diarize``, whisperX) and optionally ``language``, or a bare
    list of segments. :class:`TranscriptError` (one line) for anything else."""
    name = str(path)
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TranscriptError(f"{name}: no such transcript file") from None
    except IsADirectoryError:
        raise TranscriptError(f"{name}: a folder, not a transcript file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TranscriptError(f"{name}: cannot read it ({_why(exc)})") from None
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{name}: not JSON ({exc.msg} at line {exc.lineno}, column "
                              f"{exc.colno})") from None
    segments = doc.get("segments") if isinstance(doc, dict) else doc
    if not isinstance(segments, list):
        raise TranscriptError(f"{name}: not a whisper JSON transcript (no \"segments\" list)")
    try:
        spans = _spans(segments, "segments")
    except TranscriptError as exc:
        raise TranscriptError(f"{name}: {exc}") from None
    if not spans:
        raise TranscriptError(f"{name}: the transcript has no text to answer from")
    language = doc.get("language") if isinstance(doc, dict) else None
    duration = doc.get("duration") if isinstance(doc, dict) else None
    if not isinstance(duration, int | float) or not math.isfinite(duration):
        duration = max(s.end for s in spans)
    return Transcript(tuple(spans), _language(language), float(duration), origin="file")


def _spans(segments: Iterable | None, where: str) -> list[Span]:
    if not isinstance(segments, list):
        raise TranscriptError(f"{where} must be a list")
    for i, s in enumerate(segments):
        if not isinstance(s, dict):
            raise TranscriptError(f"{where}[{i}] is not an object with start, end and text")
        for k in ("start", "end"):
            v = s.get(k)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise TranscriptError(f"{where}[{i}].{k} must be a number of seconds")
        if not isinstance(s.get("text"), str):
            raise TranscriptError(f"{where}[{i}].text must be text")
        if s["end"] < s["start"] or s["start"] < 0:
            raise TranscriptError(f"{where}[{i}] ends before it starts")
    # Who speaks, where the file says it (as2d transcribe --diarize -f json, whisperX):
    # each span keeps its segment's speaker.
    who = [s["speaker"] if isinstance(s.get("speaker"), str) and s["speaker"].strip() else None
           for s in segments]
    if not any(who):
        return spans_from_segments(_Seg(s["start"], s["end"], s["text"]) for s in segments)
    return [replace(span, speaker=w) for s, w in zip(segments, who)
            for span in spans_from_segments([_Seg(s["start"], s["end"], s["text"])])]


@dataclass(frozen=True)
class _Seg:
    start: float
    end: float
    text: str


def _language(value) -> str | None:
    """A whisper code ("en"); openai-whisper writes the code, a name ("english") is mapped."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip().lower()
    if len(value) <= 3:
        return value
    try:
        from as2d.runtime.whisper.tokenizer import normalize_language

        return normalize_language(value)
    except (ImportError, ValueError):
        return None


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
