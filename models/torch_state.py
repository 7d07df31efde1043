"""Read a torch ``state_dict`` file (the zip format of ``torch.save``) without torch.

A ``.pt`` zip holds ``<prefix>/data.pkl``, a pickle that describes every tensor (its storage's
key, dtype, offset, shape and strides) and names torch's rebuild functions, and one raw
little-endian file per storage under ``<prefix>/data/<key>``. Unpickling it with torch would
run whatever callables the pickle names; here a restricted ``Unpickler`` maps only the few names
a plain state dict uses (an ``OrderedDict``, typed storages, ``_rebuild_tensor_v2``) to numpy
and refuses every other global, so a hostile file cannot run code and torch is never needed.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from pathlib import Path

import numpy as np

# torch's typed storages → the numpy dtype of their raw bytes (little-endian, as torch writes).
_STORAGES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


# The largest member read (the zip's own size field is checked, and reading stops past it, so
# a small deflated member cannot expand into gigabytes): CAM++'s weights are 28 MB.
MAX_MEMBER_BYTES = 256 * 1024 * 1024


def _read_capped(archive: zipfile.ZipFile, name: str) -> bytes:
    """A member's bytes, refused once more than :data:`MAX_MEMBER_BYTES` come out (a zip
    may claim a small size and inflate to more)."""
    with archive.open(name) as fh:
        raw = fh.read(MAX_MEMBER_BYTES + 1)
    if len(raw) > MAX_MEMBER_BYTES:
        raise TorchStateError(f"{name} inflates past {MAX_MEMBER_BYTES} bytes")
    return raw


class TorchStateError(ValueError):
    """The file is not a readable torch state dict (the message says what is wrong)."""


class _Storage:
    """A storage named by the pickle; its bytes are read when a tensor is rebuilt over it."""

    def __init__(self, dtype: type) -> None:
        self.dtype = np.dtype(dtype)


def _rebuild_tensor(storage, offset, size, stride, *_ignored) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2`` in numpy: a strided view over the storage, copied.
    A tensor holds at most its storage's elements (a stride of 0 over a dimension of more than
    one element would repeat them: a few bytes that copy into gigabytes)."""
    if not isinstance(storage, np.ndarray) or storage.ndim != 1:
        raise TorchStateError("a tensor is not built over a storage")
    if not (_is_int(offset) and isinstance(size, tuple | list) and isinstance(stride, tuple | list)
            and len(size) == len(stride) and all(_is_int(v) for v in (*size, *stride))):
        raise TorchStateError("a tensor's offset, size or stride is not whole numbers")
    offset, size, stride = int(offset), tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if offset < 0 or any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise TorchStateError("a tensor has a negative offset, size or stride")
    if any(n > 1 and s == 0 for n, s in zip(size, stride)):
        raise TorchStateError("a tensor repeats its storage (a stride of 0)")
    count = 1
    for n in size:
        count *= n
    if count > storage.size:
        raise TorchStateError("a tensor holds more elements than its storage")
    item = storage.dtype.itemsize
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if count else 0
    if need > storage.size:
        raise TorchStateError("a tensor reaches past its storage")
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=tuple(s * item for s in stride))
    return np.array(view, copy=True)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(fh)
        self.archive, self.prefix = archive, prefix
        self.loaded: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGES:
            return _Storage(_STORAGES[name])
        raise TorchStateError(f"the state dict names {module}.{name}, which a plain state "
                              "dict does not (refused)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _Storage)):
            raise TorchStateError(f"unknown storage reference {pid!r:.80}")
        _, kind, key, _location, numel = pid
        if key not in self.loaded:
            name = f"{self.prefix}data/{key}"
            try:
                size = self.archive.getinfo(name).file_size
            except (KeyError, TypeError):
                raise TorchStateError(f"storage {key!r:.40} is missing from the archive"
                                      ) from None
            if size > MAX_MEMBER_BYTES:
                raise TorchStateError(f"storage {key} is {size} bytes, more than a speaker "
                                      f"model's ({MAX_MEMBER_BYTES} at most)")
            raw = _read_capped(self.archive, name)
            arr = np.frombuffer(raw, dtype=kind.dtype.newbyteorder("<"))
            if arr.size < int(numel):
                raise TorchStateError(f"storage {key} is truncated")
            self.loaded[key] = arr.astype(kind.dtype, copy=False)
        return self.loaded[key]


def load_state_dict(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the state dict at ``path`` as a numpy array, by name."""
    try:
        with zipfile.ZipFile(path) as archive:
            pkls = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if len(pkls) != 1:
                raise TorchStateError("not a torch zip file (no single data.pkl)")
            prefix = pkls[0][: -len("data.pkl")]
            if archive.getinfo(pkls[0]).file_size > MAX_MEMBER_BYTES:
                raise TorchStateError("data.pkl is too large for a state dict")
            pkl = io.BytesIO(_read_capped(archive, pkls[0]))
            state = _Unpickler(pkl, archive, prefix).load()
    except TorchStateError:
        raise
    except MemoryError:
        raise TorchStateError("unreadable (it asks for more memory than there is)") from None
    except Exception as exc:  # a hostile or damaged pickle: any error is this one error
        first = (str(exc).splitlines() or [""])[0][:120]
        raise TorchStateError(f"unreadable ({type(exc).__name__}: {first})") from None
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()):
        raise TorchStateError("not a state dict of tensors")
    return dict(state)
