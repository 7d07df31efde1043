"""Bundles: a folder of ONNX graphs, tokenizer and a manifest, in the user's model cache.

The manifest records what the runtime needs (dimensions, file names, generation settings) and
the sha256 of every file, so that ``as2d models verify`` can tell a damaged bundle from a good
one and say how to repair it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

FORMAT = "as2d-bundle"
FORMAT_VERSION = 1
ENV_MODELS_DIR = "AS2D_MODELS_DIR"


class BundleError(Exception):
    """A bundle is missing, incomplete or damaged (the message says how to fix it)."""


def models_dir(override: str | os.PathLike | None = None) -> Path:
    """Where bundles live: ``--models-dir``, else ``$AS2D_MODELS_DIR``, else the user cache."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(ENV_MODELS_DIR)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("as2d", appauthor=False)) / "models"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


@dataclass
class Bundle:
    path: Path
    manifest: dict

    @property
    def name(self) -> str:
        return self.manifest["name"]

    def size(self) -> int:
        """Bytes on disk of the bundle's files (missing ones count as 0; verify reports them)."""
        return sum((self.path / f).stat().st_size for f in self.manifest["sha256"]
                   if (self.path / f).is_file())

    def verify(self, full: bool = True) -> None:
        """Check that every file is present with its size (and, when ``full``, its sha256)."""
        model = self.manifest.get('model', self.name)
        repair = f"reinstall it with: as2d models install {model} " \
                 f"--precision {self.manifest.get('precision', 'int8')} --force"
        for fname, digest in self.manifest["sha256"].items():
            p = self.path / fname
            if not p.is_file():
                raise BundleError(f"model {self.name}: {fname} is missing; {repair}")
            want = self.manifest.get("sizes", {}).get(fname)
            if want is not None and p.stat().st_size != want:
                raise BundleError(f"model {self.name}: {fname} has the wrong size "
                                  f"(damaged or truncated); {repair}")
            if full and sha256_file(p) != digest:
                raise BundleError(f"model {self.name}: {fname} fails its sha256 check "
                                  f"(damaged); {repair}")


def load_bundle(path: Path) -> Bundle:
    mf = path / "manifest.json"
    if not mf.is_file():
        raise BundleError(f"{path}: not an as2d model bundle (no manifest.json)")
    try:
        manifest = json.loads(mf.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: manifest.json is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: not an as2d model bundle")
    lacking = [k for k in ("name", "kind", "files", "sha256") if k not in manifest]
    if lacking:
        raise BundleError(f"{path}: manifest.json is incomplete (no {', '.join(lacking)})")
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise BundleError(f"{path}: bundle format {manifest['format_version']} is newer than "
                          "this as2d understands; upgrade as2d")
    return Bundle(path, manifest)


def write_manifest(path: Path, manifest: dict) -> dict:
    """Add the file digests and sizes to ``manifest`` and write it."""
    manifest = dict(manifest, format=FORMAT, format_version=FORMAT_VERSION)
    files = sorted(set(manifest["files"].values()))
    manifest["sha256"] = {f: sha256_file(path / f) for f in files}
    manifest["sizes"] = {f: (path / f).stat().st_size for f in files}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def installed_bundles(root: Path) -> list[Bundle]:
    out = []
    if root.is_dir():
        for p in sorted(root.iterdir()):
            if p.is_dir() and (p / "manifest.json").is_file():
                try:
                    out.append(load_bundle(p))
                except BundleError:
                    continue
    return out
