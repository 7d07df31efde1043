"""Reader for CTranslate2's ``model.bin``.

The Whisper weights we can get offline ship in CTranslate2's binary format. Reading it directly
keeps the converter free of torch and of CTranslate2 itself (which is only a test-time peer).
Layout (little-endian): u32 binary version, string spec name, u32 spec revision, u32 tensor
count, then per tensor: string name, u8 rank, u32 dims, u8 dtype, u32 byte count, raw bytes;
then u32 alias count and (alias, target) string pairs. Strings carry a u16 length that counts a
trailing NUL.

Tensors are read lazily: the file stays mapped and a tensor is decoded when asked for, so a
converter that builds its graphs one tensor at a time holds one tensor of the model at a time
(a large-v3 ``model.bin`` is 3 GB in float16), not a copy of the whole model. Quantized models
(int8, int8_float16, int8_float32, int16) store a ``<name>_scale`` beside each quantized weight:
:meth:`CT2Model.f32` returns the dequantized float32 weight (``q / scale``, one scale per output
row for int8, one for the tensor for int16), which is what the graphs are built from.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_DTYPES = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    # 5 is bfloat16: numpy has no such dtype; widened by hand in _read_tensor.
}
_BF16 = 5


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model we can read."""


@dataclass
class CT2Model:
    spec: str
    revision: int
    binary_version: int
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> np.ndarray:
        name = self.aliases.get(name, name)
        try:
            return self.tensors[name]
        except KeyError:
            raise CT2FormatError(f"tensor {name!r} is missing from the model") from None

    def f32(self, name: str) -> np.ndarray:
        """The tensor as float32, dequantized if the model stores it quantized."""
        target = self.aliases.get(name, name)
        value = self.get(name)
        scale_name = self.aliases.get(f"{target}_scale", f"{target}_scale")
        if value.dtype in (np.int8, np.int16) and scale_name in self.tensors:
            scale = np.asarray(self.tensors[scale_name], dtype=np.float32)
            if scale.size not in (1, value.shape[0]) or not np.all(np.isfinite(scale)) \
                    or np.any(scale == 0):
                raise CT2FormatError(f"{scale_name} does not fit {target} "
                                     f"(shape {list(value.shape)}, scale {list(scale.shape)})")
            scale = scale.reshape((-1,) + (1,) * (value.ndim - 1)) if scale.size > 1 \
                else scale.reshape(())
            return _finite(target, value.astype(np.float32) / scale)
        return _finite(target, np.asarray(value, dtype=np.float32))

    def scalar(self, name: str) -> int:
        return int(np.asarray(self.get(name)).reshape(-1)[0])

    def layer_count(self, prefix: str) -> int:
        names = {k.split("/", 2)[1] for k in self.tensors if k.startswith(f"{prefix}/layer_")}
        names |= {k.split("/", 2)[1] for k in self.aliases if k.startswith(f"{prefix}/layer_")}
        n = 0
        while f"layer_{n}" in names:
            n += 1
        return n


def _finite(name: str, value: np.ndarray) -> np.ndarray:
    """``value``, refused if any weight is NaN or infinite: such a model converts and then
    decodes nothing ("no speech found", exit 0), so it is stopped at conversion, by name."""
    if value.size and not np.isfinite(value).all():
        bad = int(value.size - np.count_nonzero(np.isfinite(value)))
        raise CT2FormatError(f"tensor {name!r} holds {bad} NaN or infinite weights (damaged)")
    return value


class _LazyTensors(Mapping):
    """Name → tensor, each decoded from the mapped file when it is looked up (see the module
    docstring); :meth:`nbytes` is the size of one tensor without decoding it."""

    def __init__(self, buf: memoryview, mm: mmap.mmap | None = None) -> None:
        self._buf = buf
        self._mm = mm
        self._where: dict[str, tuple[int, int, list[int], int]] = {}

    def add(self, name: str, offset: int, nbytes: int, dims: list[int], dtype_id: int) -> None:
        self._where[name] = (offset, nbytes, dims, dtype_id)

    def nbytes(self, name: str) -> int:
        return self._where[name][1]

    def __getitem__(self, name: str) -> np.ndarray:
        offset, nbytes, dims, dtype_id = self._where[name]
        array = _read_tensor(self._buf[offset : offset + nbytes], dims, dtype_id)  # a copy
        if self._mm is not None and nbytes >= 1 << 20 and hasattr(mmap, "MADV_DONTNEED"):
            # The file's pages just read are dropped from this process (they stay in the page
            # cache): converting a 3 GB model.bin then never shows 3 GB more resident.
            start = offset - offset % mmap.PAGESIZE
            try:
                self._mm.madvise(mmap.MADV_DONTNEED, start, offset + nbytes - start)
            except (OSError, ValueError):
                pass
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise CT2FormatError("file ends early (truncated model.bin?)")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("<H")
        raw = bytes(self.buf[self.pos : self.pos + n])
        if len(raw) != n:
            raise CT2FormatError("file ends early (truncated model.bin?)")
        self.pos += n
        return raw.rstrip(b"\0").decode("utf-8")

    def raw(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise CT2FormatError("file ends early (truncated model.bin?)")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out


def _read_tensor(raw: memoryview, dims: list[int], dtype_id: int) -> np.ndarray:
    itemsize = 2 if dtype_id == _BF16 else (
        _DTYPES[dtype_id].itemsize if dtype_id in _DTYPES else None)
    if itemsize is not None and math.prod(dims) * itemsize != len(raw):
        raise CT2FormatError(f"tensor of shape {dims} does not match its {len(raw)} bytes "
                             "(not a CTranslate2 model, or damaged)")
    if dtype_id == _BF16:
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(dims)
    try:
        dtype = _DTYPES[dtype_id]
    except KeyError:
        raise CT2FormatError(f"unknown tensor dtype id {dtype_id}") from None
    # Copy: the source buffer is a temporary mmap.
    return np.frombuffer(raw, dtype=dtype).reshape(dims).copy()


def load_ct2(path: str | Path) -> CT2Model:
    """Open a CTranslate2 ``model.bin``: its header and tensor index are read and checked now
    (names, shapes against byte counts, dtypes), each tensor's bytes when it is used."""
    path = Path(path)
    if path.stat().st_size < 12:
        raise CT2FormatError(f"{path}: too short to be a CTranslate2 model")
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    cur = _Cursor(memoryview(mm))
    try:
        version = cur.take("<I")
        if version > 6 or version < 5:
            raise CT2FormatError(f"unsupported CTranslate2 binary version {version}")
        spec = cur.string()
        revision = cur.take("<I")
        count = cur.take("<I")
        # Each tensor takes at least 9 bytes of index (name length, rank, dtype, byte count):
        # a count the file cannot hold is refused before anything is sized by it.
        if count > 1 << 20 or count * 9 > len(cur.buf) - cur.pos:
            raise CT2FormatError(f"tensor count {count} does not fit in a file of "
                                 f"{len(cur.buf)} bytes (not a Whisper model, or damaged)")
        tensors = _LazyTensors(cur.buf, mm)
        model = CT2Model(spec=spec, revision=revision, binary_version=version)
        for _ in range(count):
            name = cur.string()
            rank = cur.take("<B")
            if rank > 4:
                raise CT2FormatError(f"tensor {name!r} has rank {rank} (at most 4)")
            dims = [cur.take("<I") for _ in range(rank)]
            dtype_id = cur.take("<B")
            nbytes = cur.take("<I")
            if dtype_id != _BF16 and dtype_id not in _DTYPES:
                raise CT2FormatError(f"tensor {name!r} has unknown dtype id {dtype_id}")
            item = 2 if dtype_id == _BF16 else _DTYPES[dtype_id].itemsize
            # Exact integers (numpy's int64 product wraps: 65536**4 is 0 there).
            need = math.prod(dims) * item
            if need != nbytes:
                raise CT2FormatError(f"tensor {name!r} dims {dims} make {need} bytes "
                                     f"but its byte count is {nbytes} (damaged)")
            if nbytes > len(cur.buf) - cur.pos:
                raise CT2FormatError(f"tensor {name!r} byte count {nbytes} runs past "
                                     f"the end of the file (truncated or damaged)")
            start = cur.pos
            cur.raw(nbytes)  # bounds-checked skip
            tensors.add(name, start, nbytes, dims, dtype_id)
        for _ in range(cur.take("<I")):
            alias = cur.string()
            model.aliases[alias] = cur.string()
        model.tensors = tensors  # type: ignore[assignment]
    except UnicodeDecodeError:
        raise CT2FormatError(f"{path}: not a CTranslate2 model (garbled names)") from None
    return model
