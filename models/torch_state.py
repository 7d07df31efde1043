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


class TorchStateError(ValueError):
    """The file is not a readable torch state dict (the message says what is wrong)."""


class _Storage:
    """A storage named by the pickle; its bytes are read when a tensor is rebuilt over it."""

    def __init__(self, dtype: type) -> None:
        self.dtype = np.dtype(dtype)


def _rebuild_tensor(storage: np.ndarray, offset: int, size, stride, *_ignored) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2`` in numpy: a strided view over the storage, copied."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    item = storage.dtype.itemsize
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else 0
    if offset < 0 or need > storage.size or any(s < 0 for s in stride):
        raise TorchStateError("a tensor reaches past its storage")
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=tuple(s * item for s in stride))
    return np.array(view, copy=True)


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
            try:
                raw = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise TorchStateError(f"storage {key} is missing from the archive") from None
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
            with archive.open(pkls[0]) as fh:
                state = _Unpickler(fh, archive, prefix).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, OSError) as exc:
        raise TorchStateError(f"unreadable ({exc})") from None
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()):
        raise TorchStateError("not a state dict of tensors")
    return dict(state)
