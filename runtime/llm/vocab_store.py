"""The tables of a BPE ``tokenizer.json`` as a few numpy arrays, quick to load and to search.

Loading Gemma's tokenizer with ``tokenizers`` (262,144 pieces, 513,511 merges) costs 0.86 s of
CPU, holding the GIL beside the transcription, while ``as2d ask`` only ever encodes a few
kilobytes. :mod:`as2d.runtime.llm.lean_tokenizer` therefore builds, per text, a small tokenizer
holding only the pieces and merges that text can use; this module keeps what that needs:

* the pieces (UTF-8 blob + offsets), and a hash table over them, so that the pieces occurring
  in a text are found with a few numpy operations (:meth:`VocabStore.pieces_in`);
* the merges grouped by the piece they make (CSR by result id: rank and split point), so that
  the merges of the found pieces are gathered without touching the others;
* the added tokens (ids and flags), the byte-fallback and unknown pieces, the line-break ids,
  and the settings of the model, normalizer and decoder (``meta``).

It is written once per tokenizer file (:meth:`VocabStore.save`), with a CRC-32 of its data so
that a damaged file fails to load instead of giving other ids.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import zlib
from pathlib import Path

import numpy as np

STORE_VERSION = 1
_MAGIC = b"as2d-tokenizer-store\n"
REPLACE_SPACE = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")
# Added-token flags, one bit each.
SPECIAL, LSTRIP, RSTRIP, SINGLE_WORD = 1, 2, 4, 8
_FLAGS = (("special", SPECIAL), ("lstrip", LSTRIP), ("rstrip", RSTRIP),
          ("single_word", SINGLE_WORD))

# Polynomial hash of a string's code points mod 2**64, with a splitmix64 finaliser so that the
# top bits (the hash table's buckets) are spread even for one-character pieces. "▁" hashes as a
# space: a text's pieces are then found in one pass whether they match the normalised text (BPE
# pieces hold "▁") or the raw text (added tokens may hold spaces). Extra matches only add pieces
# that cannot be used, never change ids (see lean_tokenizer).
_P = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_BUCKET_BITS = 18
_SHIFT = np.uint64(64 - _BUCKET_BITS)
_MAYBE_SHIFT = np.uint64(64 - 22)
_BLOCK = 1 << 16  # text positions hashed at a time (bounds the temporary arrays)


def _codes(text: str) -> np.ndarray:
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32).astype(np.uint64)
    cp[cp == 0x2581] = 0x20
    return cp + np.uint64(1)


def _mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * _M1
    h = h ^ (h >> np.uint64(27))
    h = h * _M2
    return h ^ (h >> np.uint64(31))


def distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` without its first-call import of ``numpy.ma`` (8 ms, per run)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def hash_pieces(pieces: list[str]) -> np.ndarray:
    """The hash of each piece (as :meth:`VocabStore.pieces_in` hashes a text's substrings)."""
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    out = np.zeros(len(pieces), np.uint64)
    with np.errstate(over="ignore"):
        for n in distinct(lengths):
            idx = np.flatnonzero(lengths == n)
            codes = _codes("".join(pieces[i] for i in idx)).reshape(len(idx), int(n))
            h = np.zeros(len(idx), np.uint64)
            for k in range(int(n)):
                h = h * _P + codes[:, k]
            out[idx] = _mix(h)
    return out


def unsupported(doc: dict) -> str | None:
    """Why a parsed ``tokenizer.json`` is not of the structure the lean path is exact for
    (None when it is): a BPE model over the whole text (no pre-tokenizer), normalised at most
    by spaces → ``▁``, merges over text pieces only, added tokens matched on the raw text that
    are pieces of the vocabulary with their own ids, and no truncation or padding."""
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        return "not a BPE model"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"BPE {key}"
    if model.get("ignore_merges"):
        return "BPE ignore_merges"
    if doc.get("normalizer") not in (None, REPLACE_SPACE):
        return "a normalizer other than ' ' -> '▁'"
    if doc.get("pre_tokenizer") is not None:
        return "a pre-tokenizer"
    if doc.get("truncation") is not None or doc.get("padding") is not None:
        return "truncation or padding"
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        return "vocabulary ids are not 0..n-1"
    for a in doc.get("added_tokens") or []:
        if a.get("normalized") or vocab.get(a.get("content")) != a.get("id"):
            return f"added token {a.get('content')!r} is normalised or not in the vocabulary"
    fallback = {t for t in vocab if _BYTE_PIECE.fullmatch(t)} | {model.get("unk_token")}
    for m in model.get("merges") or []:
        parts = m.split(" ") if isinstance(m, str) else m
        if len(parts) != 2 or parts[0] + parts[1] not in vocab or fallback & set(parts):
            return f"merge {m!r} is not of two text pieces into one"
    return None


def _index(a: np.ndarray) -> np.ndarray:
    """int32 indices (half the bytes to load); every count here is far below 2**31."""
    if len(a) and int(a.max()) >= 1 << 31:
        raise ValueError("tokenizer too large for int32 indices")
    return a.astype(np.int32)


@dataclasses.dataclass
class VocabStore:
    """The arrays (see the module docstring); ``meta`` holds the settings and counts."""

    blob: bytes  # the pieces' UTF-8, by id
    offsets: np.ndarray  # int32 [V + 1]
    hashes: np.ndarray  # uint64 [V], sorted
    hash_ids: np.ndarray  # int32 [V]: the piece of each sorted hash
    buckets: np.ndarray  # int32 [2**_BUCKET_BITS + 1]: start of each top-bits bucket in hashes
    merge_start: np.ndarray  # int32 [V + 1]: merges making piece i are merge_start[i]:[i + 1]
    merge_rank: np.ndarray  # int32 [M]
    merge_cut: np.ndarray  # uint8/16 [M]: the left part is the piece's first merge_cut chars
    added_ids: np.ndarray  # int32 [A]
    added_flags: np.ndarray  # uint8 [A]
    always: np.ndarray  # int32: byte-fallback and unknown pieces, in every small tokenizer
    newline_ids: np.ndarray  # int32
    meta: dict

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    @functools.cached_property
    def _maybe(self) -> np.ndarray:
        """Whether any piece's hash has these top bits: drops most of a text's substrings
        (6% false positives) in one gather, before the bucket search."""
        maybe = np.zeros(1 << (64 - int(_MAYBE_SHIFT)), bool)
        maybe[(self.hashes >> _MAYBE_SHIFT).astype(np.intp)] = True
        return maybe

    # -- lookups ----------------------------------------------------------------------------
    def piece(self, i: int) -> str:
        return self.blob[self.offsets[i]:self.offsets[i + 1]].decode("utf-8", "surrogatepass")

    def _lookup(self, q: np.ndarray) -> np.ndarray:
        """Ids of the pieces whose hash is one of ``q`` (repeated as often as found)."""
        b = (q >> _SHIFT).astype(np.intp)
        lo = self.buckets[b]
        count = self.buckets[b + 1] - lo
        found = []
        rows = np.flatnonzero(count)
        r = 0
        while rows.size:
            k = lo[rows] + r
            found.append(self.hash_ids[k[self.hashes[k] == q[rows]]])
            r += 1
            rows = rows[count[rows] > r]
        return np.concatenate(found) if found else np.zeros(0, np.int32)

    def id_of(self, piece: str) -> int | None:
        for i in self._lookup(hash_pieces([piece])).tolist():
            if self.piece(i) == piece:
                return int(i)
        return None

    def pieces_in(self, text: str) -> np.ndarray:
        """Sorted ids of every piece that occurs in ``text`` or in it with spaces as ``▁``
        (plus, rarely, a few that do not: hash collisions, harmless to the caller)."""
        codes = _codes(text)
        n = len(codes)
        short, longest = int(self.meta["short_len"]), int(self.meta["max_len"])
        first = np.asarray(self.meta["long_first"], np.uint64) + np.uint64(1)
        found = []
        with np.errstate(over="ignore"):
            for start in range(0, n, _BLOCK):
                seg = codes[start:start + _BLOCK + longest - 1]
                width = min(_BLOCK, n - start)
                starts_long = np.isin(seg[:width], first)
                h = np.zeros(len(seg), np.uint64)
                queries = []
                for length in range(1, min(longest, len(seg)) + 1):
                    h = h[:len(seg) - length + 1] * _P + seg[length - 1:]
                    q = h[:width]
                    # past the plain pieces' length only the few long ones (added runs of
                    # spaces, tabs, line breaks...), at the characters they start with
                    queries.append(q if length <= short else q[starts_long[:len(q)]])
                q = _mix(np.concatenate(queries))
                found.append(self._lookup(q[self._maybe[(q >> _MAYBE_SHIFT).astype(np.intp)]]))
        return distinct(np.concatenate(found)) if found else np.zeros(0, np.int32)

    def merges_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rank, result id, cut) of every merge making one of ``ids``, in rank order."""
        starts, ends = self.merge_start[ids], self.merge_start[ids + 1]
        counts = ends - starts
        total = int(counts.sum())
        idx = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)
        ranks = self.merge_rank[idx]
        order = np.argsort(ranks, kind="stable")
        return ranks[order], np.repeat(ids, counts)[order], self.merge_cut[idx][order]

    # -- building, saving, loading ----------------------------------------------------------
    @classmethod
    def build(cls, doc: dict, newline_ids: list[int], vocab_size: int) -> VocabStore:
        """From a parsed ``tokenizer.json`` that :func:`unsupported` accepts."""
        model = doc["model"]
        vocab: dict[str, int] = model["vocab"]
        pieces = [""] * len(vocab)
        for piece, i in vocab.items():
            pieces[i] = piece
        data = [p.encode("utf-8", "surrogatepass") for p in pieces]
        offsets = np.zeros(len(pieces) + 1, np.int64)
        offsets[1:] = np.cumsum([len(b) for b in data])
        hashes = hash_pieces(pieces)
        order = np.argsort(hashes, kind="stable")
        buckets = np.zeros((1 << _BUCKET_BITS) + 1, np.int64)
        buckets[1:] = np.cumsum(np.bincount((hashes >> _SHIFT).astype(np.intp),
                                            minlength=1 << _BUCKET_BITS))
        result, cut = [], []
        for m in model.get("merges") or []:
            a, b = m.split(" ") if isinstance(m, str) else m
            result.append(vocab[a + b])
            cut.append(len(a))
        result_arr = np.asarray(result, np.int64)
        by_result = np.argsort(result_arr, kind="stable")  # ranks stay in order within a piece
        merge_start = np.zeros(len(pieces) + 1, np.int64)
        merge_start[1:] = np.cumsum(np.bincount(result_arr, minlength=len(pieces)))
        added = sorted(doc.get("added_tokens") or [], key=lambda a: a["id"])
        flags = [sum(bit for key, bit in _FLAGS if a.get(key)) for a in added]
        always = [i for p, i in vocab.items() if _BYTE_PIECE.fullmatch(p)]
        if model.get("unk_token") in vocab:
            always.append(vocab[model["unk_token"]])
        added_ids = {a["id"] for a in added}
        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
        plain = [n for i, n in enumerate(lengths.tolist()) if i not in added_ids]
        short = max(plain, default=0)
        meta = {
            "version": STORE_VERSION, "vocab_size": vocab_size, "short_len": short,
            "max_len": int(lengths.max(initial=0)),
            "long_first": sorted({ord(pieces[i][0].replace("\u2581", " "))
                                  for i in np.flatnonzero(lengths > short).tolist()}),
            "unk_token": model.get("unk_token"), "byte_fallback": bool(model.get("byte_fallback")),
            "fuse_unk": bool(model.get("fuse_unk")), "normalizer": doc.get("normalizer"),
            "decoder": doc.get("decoder"),
        }
        cuts = np.asarray(cut, np.int64)[by_result]
        return cls(b"".join(data), _index(offsets), hashes[order], _index(order), _index(buckets),
                   _index(merge_start), _index(by_result),
                   cuts.astype(np.min_scalar_type(int(cuts.max(initial=0)))),
                   np.asarray([a["id"] for a in added], np.int32), np.asarray(flags, np.uint8),
                   np.asarray(sorted(always), np.int32), np.asarray(sorted(newline_ids), np.int32),
                   meta)

    def save(self, path: Path) -> None:
        """One file: a magic line, a CRC-32 of the rest, the length of a JSON header (meta,
        where each array lies), the header, then the arrays' bytes. Loading is one read, a CRC
        and views on the bytes (``np.load`` of the same arrays as .npz takes four times as
        long)."""
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("blob", "meta")}
        arrays["blob"] = np.frombuffer(self.blob, np.uint8)
        layout, chunks, at = {}, [], 0
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            layout[name] = [a.dtype.str, list(a.shape), at]
            chunks.append(a.tobytes())
            pad = -len(chunks[-1]) % 8
            chunks.append(b"\0" * pad)
            at += len(chunks[-2]) + pad
        data = b"".join(chunks)
        header = json.dumps({"meta": self.meta, "arrays": layout, "size": len(data)}).encode()
        header += b" " * (-(len(_MAGIC) + 12 + len(header)) % 8)
        body = len(header).to_bytes(8, "little") + header + data
        with open(path, "wb") as f:
            f.write(_MAGIC + zlib.crc32(body).to_bytes(4, "little") + body)

    @classmethod
    def load(cls, path: Path) -> VocabStore:
        """Raises on a damaged or inconsistent file (bad CRC, wrong size, bad shapes)."""
        raw = path.read_bytes()
        at = len(_MAGIC)
        if raw[:at] != _MAGIC:
            raise ValueError(f"{path}: not a tokenizer store")
        if zlib.crc32(memoryview(raw)[at + 4:]) != int.from_bytes(raw[at:at + 4], "little"):
            raise ValueError(f"{path}: damaged tokenizer store")
        base = at + 12 + int.from_bytes(raw[at + 4:at + 12], "little")
        header = json.loads(raw[at + 12:base])
        if len(raw) - base != header["size"]:
            raise ValueError(f"{path}: damaged tokenizer store")
        a = {}
        for name, (dtype, shape, offset) in header["arrays"].items():
            count = int(np.prod(shape))
            a[name] = np.frombuffer(raw, np.dtype(dtype), count, base + offset).reshape(shape)
        meta = header["meta"]
        store = cls(blob=a.pop("blob").tobytes(), meta=meta, **a)
        v, m = store.size, len(store.merge_rank)
        ok = (meta.get("version") == STORE_VERSION and v > 0 and len(store.hashes) == v
              and len(store.hash_ids) == v and len(store.merge_start) == v + 1
              and len(store.merge_cut) == m and store.merge_start[-1] == m
              and store.offsets[-1] == len(store.blob)
              and len(store.buckets) == (1 << _BUCKET_BITS) + 1 and store.buckets[-1] == v
              and len(store.added_ids) == len(store.added_flags))
        if not ok:
            raise ValueError(f"{path}: inconsistent tokenizer store")
        return store
