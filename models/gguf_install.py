"""GGUF files the user already has (a path, or a model in Ollama's store), converted once.

``as2d ask --llm PATH.gguf`` / ``--llm ollama:NAME[:TAG]``: the file is converted into an LLM
bundle in the model cache by :func:`as2d.models.llm_install.convert_gguf` (any family of
:mod:`as2d.models.gguf_families`), under a name that holds the file's sha256, so the
conversion happens once per content and a changed file is converted anew. Its own module
because it uses the install machinery (locks, atomic rename) of :mod:`as2d.models.install`,
which imports the converter.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from as2d.models.bundle import (
    Bundle,
    BundleError,
    models_dir,
    verified_cache,
)
from as2d.models.install import build_once, writable_root
from as2d.models.llm_install import convert_gguf
from as2d.models.source_packages import Progress, SourceError

OLLAMA_PREFIX = "ollama:"
_OLLAMA_MODEL = "application/vnd.ollama.image.model"


def ollama_blob(spec: str, home: Path | None = None) -> Path:
    """The GGUF blob of ``ollama:NAME[:TAG]`` in Ollama's store (``$OLLAMA_MODELS`` or
    ``~/.ollama/models``): the tag's manifest names the model layer's digest, and the layer is
    ``blobs/sha256-<hex>``. Ollama keeps plain GGUF files there, so nothing is copied."""
    name = spec[len(OLLAMA_PREFIX):].strip()
    if not name:
        raise SourceError("ollama: needs a model name (ollama:NAME[:TAG])")
    name, _, tag = name.partition(":")
    tag = tag or "latest"
    store = Path(home or os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")
    store = store.expanduser()
    parts = name.split("/")
    host = "registry.ollama.ai"
    if len(parts) == 3:  # host/namespace/model
        host, parts = parts[0], parts[1:]
    elif len(parts) == 1:
        parts = ["library", parts[0]]
    if any(not p or p in (".", "..") or not re.fullmatch(r"[\w.-]+", p) for p in [*parts, tag]):
        raise SourceError(f"{spec}: not an Ollama model name")
    manifest = store / "manifests" / host / Path(*parts) / tag
    if not manifest.is_file():
        raise SourceError(f"{spec}: no Ollama model {name}:{tag} in {store} (pull it with "
                          f"Ollama first, or set OLLAMA_MODELS)")
    try:
        doc = json.loads(manifest.read_text())
        layer = next(x for x in doc.get("layers", []) if x.get("mediaType") == _OLLAMA_MODEL)
        digest = str(layer["digest"])
    except (OSError, ValueError, StopIteration, KeyError, TypeError, AttributeError):
        raise SourceError(f"{spec}: its Ollama manifest {manifest} names no model layer") from None
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise SourceError(f"{spec}: its Ollama manifest has an odd digest {digest!r}")
    blob = store / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        raise SourceError(f"{spec}: the model layer {blob} is missing from Ollama's store")
    return blob


def gguf_file(spec: str) -> Path:
    """The GGUF file ``spec`` names (a path, or ``ollama:NAME[:TAG]``), checked to exist."""
    if spec.startswith(OLLAMA_PREFIX):
        return ollama_blob(spec)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise SourceError(f"{spec}: no such GGUF file")
    return path.resolve()


def install_gguf(spec: str, precision: str = "int8", root: Path | None = None,
                 progress: Progress | None = None, force: bool = False) -> Bundle:
    """The bundle of the GGUF file ``spec`` names, converted now unless this content was
    converted before: the bundle's name holds the file's sha256 (hashed once, then remembered
    per file identity in the models folder), so a renamed or moved copy is found again and a
    changed file is converted anew."""
    if precision not in ("int8", "fp32"):
        raise BundleError(f"a GGUF model converts to int8 or fp32, not {precision!r}")
    path = gguf_file(spec)
    root = writable_root(models_dir(root))
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise BundleError(f"{spec}: not a GGUF file")
    cache = verified_cache(root)
    digest = cache.digest(path)
    cache.save()
    stem = spec[len(OLLAMA_PREFIX):].replace(":", "-") if spec.startswith(OLLAMA_PREFIX) \
        else path.stem
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.")[:60] or "gguf"
    model = f"{stem}-{digest[:10]}"
    name = f"{model}-{precision}"
    def convert(work: Path) -> dict:
        if progress:
            progress(f"converting {spec} to {name} (once)")
        source = {"format": "gguf", "path": str(path), "origin": spec,
                  "content_sha256": digest, "sha256": None, "packages": []}
        manifest = convert_gguf(path, name, precision, work, source, progress)
        arch = manifest["config"].get("architecture", "gemma3")
        manifest.update(name=name, model=model, kind="llm", precision=precision, user=True,
                        architecture=f"{arch} language model (--llm)")
        return manifest

    return build_once(root, name, force, spec, convert)[0]
