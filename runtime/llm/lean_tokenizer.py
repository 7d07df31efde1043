"""Gemma's tokenizer at a few milliseconds per run: small exact tokenizers built per text.

Why it is exact: with no pre-tokenizer, BPE splits each stretch of text between added tokens
into characters (or their byte pieces) and applies, lowest rank first, merges ``(a, b)`` of two
*adjacent* pieces, so every merge it applies makes a substring of the normalised text (merges
of byte or unknown pieces would not: such files are left to the full tokenizer). A
tokenizer with the same ids but only the pieces found in a text (plus the byte-fallback and
unknown pieces), only the merges making one of them (ranks in the same order), and only the
added tokens found in the raw text (same flags) therefore gives that text the same ids: the
merges and added tokens left out could never apply to it (a leftmost-longest match only ever
involves tokens that occur). Extra pieces, merges or added tokens do not change that, so one
small tokenizer is grown as texts arrive and serves every text it covers.
``tests/test_llm_tokenizer_fast.py`` checks all of this against the full tokenizer.

Decoding maps ids to pieces here and hands them to the tokenizer's own decoder, as
``Tokenizer.decode`` does. The tables come from a sidecar cache next to ``tokenizer.json``
(:func:`open_lean`), built once with the full tokenizer, which checks the result.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer, models

from as2d.runtime.files import write_replacing
from as2d.runtime.llm.vocab_store import (
    LSTRIP,
    RSTRIP,
    SINGLE_WORD,
    SPECIAL,
    STORE_VERSION,
    VocabStore,
    distinct,
    unsupported,
)

_PROBES = (
    "Transcript:\n[0:07] Mr. John Dashwood — 22 degrees, naïve café 東京 🙂\n\n\n  tabs\t\t"
    "and <eos> <start_of_turn>model\nQuestion: 'What?'\nAnswer: 3,14 ÷ ¼ \U00030000 ▁x▁ ",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n<table><tr><td>a</td>",
    "   lead and trail   \r\n\u200d\u0301e\u0301 👩\u200d👩\u200d👧 <unk><pad><bos>",
)

# Texts of at least _HELD_MIN characters that the shared small tokenizer holds are kept (the
# _HELD_TEXTS longest): a text found inside one needs no search of its pieces (the transcript's
# lines inside the transcript, most candidate answers).
_HELD_MIN, _HELD_TEXTS = 64, 16


def scan_newline_ids(tok: Tokenizer) -> frozenset[int]:
    """Every token whose text holds a line break (a one-line answer ends at any of them)."""
    ids = set()
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        piece = tok.id_to_token(i)
        if piece and ("\n" in piece or piece == "<0x0A>" or "Ċ" in piece):
            ids.add(i)
    return frozenset(ids)


class LeanTokenizer:
    """Encode, decode and look up pieces exactly as the full ``tokenizers`` tokenizer does,
    from a :class:`VocabStore`. Thread-safe: the small tokenizer is grown and used under a
    lock (its ``encode_special_tokens`` switch is set per call)."""

    def __init__(self, store: VocabStore) -> None:
        self.store = store
        meta = store.meta
        self.vocab_size = int(meta["vocab_size"])
        self.newline_ids = frozenset(store.newline_ids.tolist())
        frame = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                 "normalizer": meta["normalizer"], "pre_tokenizer": None,
                 "post_processor": None, "decoder": meta["decoder"],
                 "model": {"type": "BPE", "vocab": {}, "merges": []}}
        self._frame = Tokenizer.from_str(json.dumps(frame))  # its normalizer and decoder
        n = store.size
        self._special = np.zeros(n, bool)
        self._special[store.added_ids[(store.added_flags & SPECIAL) != 0]] = True
        self._added = np.full(n, -1, np.int64)  # id -> row in added_ids / added_flags
        self._added[store.added_ids] = np.arange(len(store.added_ids))
        self._pieces: dict[int, str] = {}
        self._seen = np.zeros(n, bool)  # every piece a text needed so far
        self._seen[store.always] = True
        self._covered = self._seen.copy()  # the pieces the shared small tokenizer holds
        self._covered_count = 0
        self._sub: Tokenizer | None = None
        self._held: list[str] = []  # longer texts whose pieces the shared tokenizer holds
        self._lock = threading.Lock()
        self.builds = 0  # small tokenizers built so far (for tests and measurements)

    # -- pieces -----------------------------------------------------------------------------
    def _piece(self, i: int) -> str:
        piece = self._pieces.get(i)
        if piece is None:
            piece = self._pieces[i] = self.store.piece(i)
        return piece

    def token(self, tid: int) -> str | None:
        i = _u32(tid)
        return self._piece(i) if i < self.store.size else None

    def id(self, token: str) -> int | None:
        return self.store.id_of(token)

    # -- encoding ---------------------------------------------------------------------------
    def encode(self, text: str, literal: bool = False) -> list[int]:
        """Ids of ``text`` (no post-processing); ``literal``: special tokens written in it are
        plain text (``encode_special_tokens``).

        The shared small tokenizer encodes every text whose pieces it holds (the transcript's
        lines, once the transcript was encoded); a text with other pieces grows it, unless it
        is short beside it (a candidate answer, the question): then a tokenizer of the text's
        own pieces costs less than rebuilding the shared one."""
        if not isinstance(text, str):
            raise TypeError("TextInputSequence must be str")
        if not text:
            return []
        with self._lock:  # a substring of a text the shared tokenizer holds: held too
            if self._sub is not None and any(text in held for held in self._held):
                return self._run(self._sub, text, literal)
        need = self.store.pieces_in(text)
        with self._lock:
            self._seen[need] = True
            if self._sub is None or not self._covered[need].all():
                if self._sub is not None and 4 * len(need) < self._covered_count:
                    own = self._build(distinct(np.concatenate((need, self.store.always))))
                    return self._run(own, text, literal)
                self._covered = self._seen.copy()
                held = np.flatnonzero(self._covered)
                self._covered_count = len(held)
                self._sub = self._build(held)
            if len(text) >= _HELD_MIN:
                self._held = sorted(self._held + [text], key=len)[-_HELD_TEXTS:]
            return self._run(self._sub, text, literal)

    @staticmethod
    def _run(tok: Tokenizer, text: str, literal: bool) -> list[int]:
        tok.encode_special_tokens = literal
        return tok.encode(text, add_special_tokens=False).ids

    def _build(self, ids: np.ndarray) -> Tokenizer:
        """A tokenizer over the pieces ``ids`` (and the merges and added tokens among them)."""
        self.builds += 1
        store, meta = self.store, self.store.meta
        vocab = {self._piece(i): i for i in ids.tolist()}
        merges = []
        _, made, cuts = store.merges_of(ids)
        for i, cut in zip(made.tolist(), cuts.tolist()):
            piece = self._piece(i)
            a, b = piece[:cut], piece[cut:]
            if a in vocab and b in vocab:  # else a hash collision found ``piece``: unusable
                merges.append((a, b))
        tok = Tokenizer(models.BPE(vocab, merges, unk_token=meta["unk_token"],
                                   byte_fallback=meta["byte_fallback"],
                                   fuse_unk=meta["fuse_unk"]))
        if meta["normalizer"] is not None:
            tok.normalizer = self._frame.normalizer
        rows = self._added[ids]
        plain, special = [], []
        for row in rows[rows >= 0].tolist():
            f = int(store.added_flags[row])
            token = AddedToken(self._piece(int(store.added_ids[row])), normalized=False,
                               special=bool(f & SPECIAL), lstrip=bool(f & LSTRIP),
                               rstrip=bool(f & RSTRIP), single_word=bool(f & SINGLE_WORD))
            (special if f & SPECIAL else plain).append(token)
        tok.add_tokens(plain)
        tok.add_special_tokens(special)
        return tok

    # -- decoding ---------------------------------------------------------------------------
    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """As ``Tokenizer.decode``: unknown ids are dropped, special ones too when asked."""
        pieces = []
        n = self.store.size
        for t in ids:
            i = _u32(t)
            if i < n and not (skip_special and self._special[i]):
                pieces.append(self._piece(i))
        decoder = self._frame.decoder
        return " ".join(pieces) if decoder is None else decoder.decode(pieces)


def _u32(value) -> int:
    i = operator.index(value)
    if not 0 <= i < 1 << 32:
        raise OverflowError(f"token id {i} out of range")
    return i


# ---------------------------------------------------------------------------------------------
# the sidecar cache
# ---------------------------------------------------------------------------------------------

def lean_store_path(path: Path) -> Path:
    """``.tokenizer.lean1-<size>-<mtime_ns>-tk<version>.bin`` next to ``tokenizer.json``: a
    changed source, or another ``tokenizers`` release (whose decoding the lean path mirrors and
    whose ids the build checked), gets a new store, never a stale one."""
    import tokenizers

    st = path.stat()
    tk = "".join(c if c.isalnum() or c == "." else "_" for c in tokenizers.__version__)
    return path.with_name(f".{path.stem}.lean{STORE_VERSION}-{st.st_size}-{st.st_mtime_ns}"
                          f"-tk{tk}.bin")


def open_lean(path: Path, load_full: Callable[[Path], Tokenizer]) -> LeanTokenizer | None:
    """The lean tokenizer of ``path`` from its store (built now and written next to it when
    there is none), or None when the caller should use the full tokenizer: the file is not of
    the structure the lean path is exact for (remembered in a ``.unsupported`` note), or there
    is no store and the folder is read-only (building one costs more than the full load)."""
    try:
        cache = lean_store_path(path)
    except OSError:
        return None
    note = cache.with_suffix(".unsupported")
    if note.exists():
        return None
    if cache.exists():
        try:
            return LeanTokenizer(VocabStore.load(cache))
        except Exception:  # damaged: rebuilt below
            try:
                cache.unlink()
            except OSError:
                return None
    if not os.access(path.parent, os.W_OK):
        return None
    try:
        store, reason = build_store(path, load_full)
    except Exception:  # unreadable, or not a tokenizer: the full load says why
        return None
    if store is None:
        write_replacing(note, lambda tmp: tmp.write_text(reason + "\n", encoding="utf-8"))
        return None
    # Not written (a full folder): built again next time, still used now.
    if write_replacing(cache, store.save):
        # Older stores, and the "fast" JSON form of the full tokenizer that as2d wrote here
        # before the store existed (13 MB no longer read).
        with contextlib.suppress(OSError):
            for pattern in (f".{path.stem}.lean*", f".{path.stem}.v*.fast.json"):
                for old in path.parent.glob(pattern):
                    if old not in (cache, note) and not old.name.endswith(".tmp"):
                        old.unlink(missing_ok=True)
    return LeanTokenizer(store)


def build_store(path: Path, load_full: Callable[[Path], Tokenizer]
                ) -> tuple[VocabStore | None, str]:
    """The store of ``path`` checked against the full tokenizer, or None and why not."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    reason = unsupported(doc)
    if reason is not None:
        return None, reason
    full = load_full(path)
    size = full.get_vocab_size(with_added_tokens=True)
    if size != len(doc["model"]["vocab"]):
        return None, "added tokens outside the vocabulary"
    store = VocabStore.build(doc, sorted(scan_newline_ids(full)), size)
    del doc
    lean = LeanTokenizer(store)
    before = full.encode_special_tokens
    try:
        for text in _PROBES:
            for literal in (False, True):
                full.encode_special_tokens = literal
                want = full.encode(text, add_special_tokens=False).ids
                if lean.encode(text, literal) != want:
                    return None, "the lean tokenizer gave other ids on a probe text"
                for skip in (False, True):
                    if lean.decode(want, skip) != full.decode(want, skip_special_tokens=skip):
                        return None, "the lean tokenizer decoded a probe text otherwise"
    finally:
        full.encode_special_tokens = before
    return store, ""
