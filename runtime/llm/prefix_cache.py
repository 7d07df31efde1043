"""The KV rows of a prompt's fixed head, kept on disk so each ``as2d ask`` prefills only the
transcript and the question.

Every qa prompt starts with the same few hundred tokens (the intro and the few-shot examples:
359 of a 394-token prompt for a 10-s clip), and prefilling them took 0.3 s of each answer. The
answering graph computes every token row independently of the other rows of its pass (what
lossless verification needs too), and a row depends only on the rows before it, so the head's
rows computed alone are bit for bit the rows a full prefill computes. They are stored once per
head, model (every file's sha256 and the converter), onnxruntime version, CPU, thread count and
session settings (the key), and loaded by later runs:
the answer, and the logits it comes from, do not change (``tests/test_ask_prefix_cache.py``).

A transcript read whole comes next in every prompt about it, so its rows are kept the same way,
in a file of their own after the head's (keyed by the head and the transcript's ids): a
follow-up question about a clip prefills only the question (a 25-s clip: 103 rows → 13).

A cache that cannot be read or written (a read-only model folder, a damaged file) is only a
slower prefill.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d.runtime.files import write_replacing

VERSION = 1
MIN_ROWS = 32  # a shorter head is one pass of the model: not worth a file
# Files kept per model folder, the least recently used go: heads (styles x timed/untimed), and
# transcripts (up to 768 tokens: at most 28 MB each for Gemma 3 270M).
KEEP = {"prefix": 6, "context": 4}


class PrefixCache:
    """Stored KV rows of prompt heads, for one model's states (``k``/``v`` lists of
    ``[capacity, width]`` arrays and a ``length``: :class:`as2d.runtime.llm.lm.LLMState`)."""

    def __init__(self, folder: Path, identity: str) -> None:
        self.folder = Path(folder)
        self.identity = identity
        self._ready: tuple[Path, np.ndarray] | None = None  # rows read ahead (:meth:`preload`)

    def path(self, head: Sequence[int], kind: str = "prefix") -> Path:
        h = hashlib.sha256(f"as2d-prefix v{VERSION}|{self.identity}|".encode())
        h.update(np.asarray(head, dtype=np.int64).tobytes())
        return self.folder / f".{kind}-{h.hexdigest()[:24]}.npz"

    def prefill(self, model, state, ids: Sequence[int], static: int,
                context: int = 0) -> tuple[np.ndarray, int]:
        """``model.prefill(state, ids)``, with the first ``static`` rows loaded when stored
        (and stored when not), then the rows up to ``context`` (a transcript after the head;
        0: none) the same way; returns the last prompt token's logits and the rows loaded."""
        ids = list(ids)
        if not MIN_ROWS <= static < len(ids) or state.length != 0:
            return model.prefill(state, ids), 0
        cuts = [(static, "prefix")]
        if context - static >= MIN_ROWS and context < len(ids):
            cuts.append((context, "context"))
        loaded = 0
        for end, kind in cuts:
            start = state.length
            path = self.path(ids[:end], kind)
            ready, self._ready = self._ready, None
            rows = ready[1] if ready is not None and ready[0] == path else self._load(
                path, (2, len(state.k), end - start, state.k[0].shape[1]))
            if rows is None:  # computed here (the rows after it too), and stored
                logits = model.prefill(state, ids[start:])
                for later, later_kind in cuts[cuts.index((end, kind)):]:
                    self._save(self.path(ids[:later], later_kind), state, start, later)
                    start = later
                return logits, loaded
            for k, v, rk, rv in zip(state.k, state.v, rows[0], rows[1]):
                k[start:end] = rk
                v[start:end] = rv
            state.length = end
            loaded = end
        return model.prefill(state, ids[loaded:]), loaded

    def preload(self, head: Sequence[int], layers: int, width: int) -> bool:
        """Read the stored rows of ``head`` now (beside other start-up work) for the next
        :meth:`prefill` of a prompt that starts with it; False when none are stored."""
        if len(head) < MIN_ROWS:
            return False
        path = self.path(list(head))
        rows = self._load(path, (2, layers, len(head), width))
        self._ready = (path, rows) if rows is not None else None
        return rows is not None

    def _load(self, path: Path, want: tuple[int, ...]) -> np.ndarray | None:
        """The stored rows, or None when absent, of another shape than ``want``, or damaged
        (their digest is checked: a flipped bit would change the answer silently)."""
        try:
            with np.load(path, allow_pickle=False) as f:
                rows, digest = f["rows"], f["digest"]
        except Exception:  # noqa: BLE001 - absent, truncated, a bad zip (BadZipFile): redone
            return None
        if rows.shape != want or rows.dtype != np.float32:
            return None
        if _digest(rows) != digest.tobytes():
            return None  # prefilled, then stored again
        try:
            os.utime(path)  # recently used: kept by _prune
        except OSError:
            pass
        return rows

    def _save(self, path: Path, state, start: int, end: int) -> None:
        rows = np.stack([np.stack([k[start:end] for k in state.k]),
                         np.stack([v[start:end] for v in state.v])])

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, rows=rows, digest=np.frombuffer(_digest(rows), np.uint8))

        if write_replacing(path, write):  # (a read-only or full folder: prefill every time)
            self._prune(path)

    def _prune(self, keep: Path) -> None:
        kind = keep.name[1:].split("-", 1)[0]
        try:
            found = sorted(self.folder.glob(f".{kind}-*.npz"), key=lambda p: p.stat().st_mtime)
        except OSError:
            return
        for old in found[:-KEEP[kind]]:
            if old != keep:
                old.unlink(missing_ok=True)


def clear_transcripts(models_dir: Path) -> tuple[int, int]:
    """Remove the stored rows of every transcript (``.context-*.npz``) beside every model of
    ``models_dir``: they are the transcripts' words in another form, so they go with the
    transcript cache (``as2d ask --clear-cache``). ``(files, bytes)`` removed."""
    n = size = 0
    for path in Path(models_dir).glob("*/.context-*.npz"):
        try:
            b = path.stat().st_size
            path.unlink()
            n, size = n + 1, size + b
        except OSError:
            pass
    return n, size


def _digest(rows: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(rows).data, digest_size=32).digest()


def for_model(model, threads: int | None = None) -> PrefixCache | None:
    """The head cache of an as2d LLM bundle (keyed by its graph's sha256), or None for models
    whose states do not keep plain KV rows (Hugging Face folders) or whose rows are not
    computed independently."""
    manifest = model.manifest
    if manifest is None or not model.lossless:
        return None
    digests = manifest.get("sha256")
    if not isinstance(digests, dict) or not digests.get(manifest.get("files", {}).get("decoder")):
        return None
    from as2d.runtime.sessions import SESSION_SETTINGS, runtime_identity

    # Every file of the bundle (the graph, its weights wherever they live) and the converter
    # that wrote them; then what computes the bits: onnxruntime, the CPU, threads, settings.
    model_key = hashlib.sha256(repr((sorted(digests.items()),
                                     manifest.get("converter_version"))).encode()).hexdigest()
    threads = model.threads if threads is None else threads
    return PrefixCache(Path(model.path),
                       f"{model_key}|{runtime_identity()}|threads {threads}|{SESSION_SETTINGS}")
