"""Reader for CTranslate2's ``model.bin``.

The Whisper weights we can get offline ship in CTranslate2's binary format. Reading it directly
keeps the converter free of torch and of CTranslate2 itself (which is only a test-time peer).
Layout (little-endian): u32 binary version, string spec name, u32 spec revision, u32 tensor
count, then per tensor: string name, u8 rank, u32 dims, u8 dtype, u32 byte count, raw bytes;
then u32 alias count and (alias, target) string pairs. Strings carry a u16 length that counts a
trailing NUL.
"""

from __future__ import annotations

import mmap
import struct
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
        return np.asarray(self.get(name), dtype=np.float32)

    def scalar(self, name: str) -> int:
        return int(np.asarray(self.get(name)).reshape(-1)[0])

    def layer_count(self, prefix: str) -> int:
        n = 0
        while any(k.startswith(f"{prefix}/layer_{n}/") for k in self.tensors):
            n += 1
        return n


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
    itemsize = 2 if dtype_id == _BF16 else getattr(_DTYPES.get(dtype_id), "itemsize", None)
    if itemsize is not None and int(np.prod(dims, dtype=np.int64)) * itemsize != len(raw):
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
    """Read every tensor of a CTranslate2 ``model.bin`` into numpy arrays."""
    path = Path(path)
    if path.stat().st_size < 12:
        raise CT2FormatError(f"{path}: too short to be a CTranslate2 model")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        cur = _Cursor(memoryview(mm))
        try:
            version = cur.take("<I")
            if version > 6 or version < 5:
                raise CT2FormatError(f"unsupported CTranslate2 binary version {version}")
            spec = cur.string()
            revision = cur.take("<I")
            count = cur.take("<I")
            model = CT2Model(spec=spec, revision=revision, binary_version=version)
            for _ in range(count):
                name = cur.string()
                rank = cur.take("<B")
                dims = [cur.take("<I") for _ in range(rank)]
                dtype_id = cur.take("<B")
                nbytes = cur.take("<I")
                model.tensors[name] = _read_tensor(cur.raw(nbytes), dims, dtype_id)
            for _ in range(cur.take("<I")):
                alias = cur.string()
                model.aliases[alias] = cur.string()
        except UnicodeDecodeError:
            raise CT2FormatError(f"{path}: not a CTranslate2 model (garbled names)") from None
        except BaseException as exc:
            # Ctrl-C, SIGTERM: the finished frames in the traceback hold views of the map,
            # which could then not be closed (a second, confusing error).
            import traceback

            traceback.clear_frames(exc.__traceback__)
            raise
        finally:
            cur.buf.release()
    return model
