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


VERIFIED_CACHE = ".verified.json"  # in the models folder: file identity → sha256 seen there


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def _identity(path: Path) -> str:
    """What changes when a file's bytes may have: its place, size, times and inode. ``ctime``
    cannot be set back by the user, so a rewrite that restores ``mtime`` still shows."""
    st = path.stat()
    return (f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|"
            f"{st.st_dev}")


class VerifiedCache:
    """sha256 digests already checked, per file identity, in one small JSON file.

    Verifying a 150 MB bundle costs a few tenths of a second; remembering which file identity
    had which digest makes every later load free. A file that changed in any way has a new
    identity and is hashed again. The cache is an optimisation only: unreadable, unwritable or
    damaged, it is ignored (and every load hashes again).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, str] = {}
        self.dirty = False
        if path is not None:
            try:
                data = json.loads(path.read_text())
                if isinstance(data, dict):
                    self.entries = {k: v for k, v in data.items()
                                    if isinstance(k, str) and isinstance(v, str)}
            except (OSError, ValueError):
                pass

    def digest(self, path: Path) -> str:
        key = _identity(path)
        known = self.entries.get(key)
        if known is None:
            known = sha256_file(path)
            if _identity(path) == key:  # not changed while it was read
                self.entries[key] = known
                self.dirty = True
        return known

    def save(self) -> None:
        if not self.dirty or self.path is None:
            return
        live = {k: v for k, v in self.entries.items() if Path(k.split("|")[0]).exists()}
        if _write_json(self.path, live):
            self.dirty = False


def _write_json(path: Path, data) -> bool:
    """A file of remembered verdicts, written whole or not at all (another process may be
    reading it); False when the folder refused it, which only means checking again later."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False


def verified_cache(root: Path | None = None) -> VerifiedCache:
    """The cache in the models folder (``root``, else the default one)."""
    try:
        folder = Path(root) if root is not None else models_dir()
        return VerifiedCache(folder / VERIFIED_CACHE if folder.is_dir() else None)
    except Exception:  # noqa: BLE001 - no cache is always acceptable
        return VerifiedCache(None)


_HEX = frozenset("0123456789abcdef")
MAX_MANIFEST = 16 << 20  # bytes; a real manifest is a few kB


def _check_manifest(path: Path, manifest: dict) -> None:
    """Types of the fields the loader trusts (a hand-edited or hostile manifest gets one
    line, not a traceback deep in the runtime)."""
    def bad(what: str) -> BundleError:
        return BundleError(f"{path}: manifest.json is damaged ({what}); reinstall the model")

    for key in ("name", "kind"):
        if not isinstance(manifest[key], str) or not manifest[key]:
            raise bad(f"{key} is not a name")
    files, digests = manifest["files"], manifest["sha256"]
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise bad("files is not a table of file names")
    if not isinstance(digests, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 and set(v) <= _HEX
            for k, v in digests.items()):
        raise bad("sha256 is not a table of file names to sha256 digests")
    sizes = manifest.get("sizes", {})
    if not isinstance(sizes, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes.values()):
        raise bad("sizes is not a table of file sizes")
    for name in (*files.values(), *digests):
        p = Path(name)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise bad(f"{name!r} is not a file inside the bundle")
    if not isinstance(manifest.get("format_version", 0), int):
        raise bad("format_version is not a number")
    dims = manifest.get("dims")
    if dims is not None:
        if not isinstance(dims, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 20
                for v in dims.values()):
            raise bad("dims is not a table of positive integers")
        if "n_mels" in dims and dims["n_mels"] not in (80, 128):
            raise bad(f"n_mels {dims['n_mels']} is neither 80 nor 128")
    generation = manifest.get("generation", {})
    if not isinstance(generation, dict):
        raise bad("generation is not a table")
    n_vocab = (dims or {}).get("n_vocab", 1 << 20)
    for key in ("suppress_ids", "suppress_ids_begin", "lang_ids"):
        ids = generation.get(key, [])
        if not isinstance(ids, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_vocab
                for v in ids):
            raise bad(f"generation.{key} is not a list of token ids below n_vocab {n_vocab}")


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

    def verify(self, full: bool = True, cache: VerifiedCache | None = None) -> None:
        """Check that every file is present with its size (and, when ``full``, its sha256).

        With a ``cache`` (:func:`verified_cache`), a file whose identity was verified before is
        not hashed again, and the digests of files hashed now are remembered.
        """
        model = self.manifest.get('model', self.name)
        repair = f"reinstall it with: as2d models install {model} " \
                 f"--precision {self.manifest.get('precision', 'int8')} --force"
        if self.manifest.get("user"):  # converted from a folder the user named
            repair = (f"remove it (as2d models remove {self.name}) and name its source again: "
                      f"{self.manifest.get('source', {}).get('origin') or model}")
        for fname, digest in self.manifest["sha256"].items():
            p = self.path / fname
            if not p.is_file():
                raise BundleError(f"model {self.name}: {fname} is missing; {repair}")
            want = self.manifest.get("sizes", {}).get(fname)
            if want is not None and p.stat().st_size != want:
                raise BundleError(f"model {self.name}: {fname} has the wrong size "
                                  f"(damaged or truncated); {repair}")
            if full and (cache.digest(p) if cache else sha256_file(p)) != digest:
                raise BundleError(f"model {self.name}: {fname} fails its sha256 check "
                                  f"(damaged); {repair}")
        if cache is not None:
            cache.save()

    def verify_at_load(self) -> None:
        """Full verification, remembered per file identity in the models folder's cache: the
        first load of a bundle hashes it, later loads of the same files cost a few stat calls.
        """
        self.verify(full=True, cache=verified_cache())


def load_bundle(path: Path) -> Bundle:
    mf = path / "manifest.json"
    if not mf.is_file():
        raise BundleError(f"{path}: not an as2d model bundle (no manifest.json)")
    try:
        size = mf.stat().st_size
        if size > MAX_MANIFEST:  # untrusted: a few kB, never read whole past the cap
            raise BundleError(f"{mf}: {size} bytes is too large for a manifest")
        with open(mf, "rb") as fh:
            manifest = json.loads(fh.read(MAX_MANIFEST + 1))
    except RecursionError:
        raise BundleError(f"{mf}: nested too deeply to be a manifest") from None
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: manifest.json is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: not an as2d model bundle")
    lacking = [k for k in ("name", "kind", "files", "sha256") if k not in manifest]
    if lacking:
        raise BundleError(f"{path}: manifest.json is incomplete (no {', '.join(lacking)})")
    _check_manifest(path, manifest)
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
