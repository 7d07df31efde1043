"""Whisper models the user brings: a CTranslate2 folder (as faster-whisper's converted models
ship) or a Hugging Face repo id found in the local hub cache, converted once into the as2d
model cache.

A folder is untrusted input. Before anything is converted it is checked: ``model.bin`` is a
CTranslate2 Whisper model whose shapes agree with each other (:func:`check_dims`), the
vocabulary (``tokenizer.json``, else ``vocabulary.json`` / ``vocabulary.txt``) matches the
model's output size, ``preprocessor_config.json`` agrees on the mel bands. The bundle is named
after the folder and the sha256 of its files (:func:`content_digest`), so the same folder is
converted once and a changed one is converted again; the file digests are remembered per file
identity (:class:`as2d.models.bundle.VerifiedCache`), so naming the folder again costs a few
``stat`` calls, not a read of 3 GB. Nothing is written outside the model cache.

A repo id (``Systran/faster-whisper-small``) is looked up in the Hugging Face cache through
``huggingface_hub``'s own API with ``local_files_only=True`` and ``HF_HUB_OFFLINE`` set, the way
faster-whisper finds a model it downloaded: ``HF_HUB_CACHE`` and ``HF_HOME`` are honoured by
that library, and no network call is ever made.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from as2d.models.bundle import Bundle, BundleError, installed_bundles, verified_cache
from as2d.models.source_packages import SourceError

# Whisper's published shapes: (mels, vocabulary, encoder layers, decoder layers, width, heads).
# The width and heads may differ in a fine-tune; the name is what --stats and `models list`
# call the model, and what the drafter choice reads (a larger target is worth drafting for).
ARCHITECTURES: dict[str, tuple[int, int, int, int, int, int]] = {
    "tiny.en": (80, 51864, 4, 4, 384, 6),
    "tiny": (80, 51865, 4, 4, 384, 6),
    "base.en": (80, 51864, 6, 6, 512, 8),
    "base": (80, 51865, 6, 6, 512, 8),
    "small.en": (80, 51864, 12, 12, 768, 12),
    "small": (80, 51865, 12, 12, 768, 12),
    "medium.en": (80, 51864, 24, 24, 1024, 16),
    "medium": (80, 51865, 24, 24, 1024, 16),
    "large-v2": (80, 51865, 32, 32, 1280, 20),  # also large-v1: the same shapes
    "large-v3": (128, 51866, 32, 32, 1280, 20),
    "large-v3-turbo": (128, 51866, 32, 4, 1280, 20),
    "distil-large-v3": (128, 51866, 32, 2, 1280, 20),
    "distil-large-v2": (80, 51865, 32, 2, 1280, 20),
    "distil-medium.en": (80, 51864, 24, 2, 1024, 16),
    "distil-small.en": (80, 51864, 12, 2, 768, 12),
}
TIMESTAMPS = 1501  # <|0.00|> … <|30.00|>, after <|notimestamps|>
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.json", "vocabulary.txt",
               "preprocessor_config.json")
MAX_SIDE_FILE = 64 << 20  # a tokenizer.json is 2-3 MB; anything past this is not one


def architecture(dims: dict) -> str:
    """The published architecture ``dims`` has (``"large-v3-turbo"``), by layer counts, mel
    bands and vocabulary (a narrower model of the same depth counts as that architecture), or
    ``"custom"``."""
    key = (dims["n_mels"], dims["n_vocab"], dims["n_audio_layer"], dims["n_text_layer"])
    for name, shape in ARCHITECTURES.items():
        if shape[:4] == key:
            return name
    return "custom"


def looks_like_repo_id(spec: str) -> bool:
    """``ORG/NAME`` as the hub spells it (not a path: no leading ``.``, ``/`` or ``~``)."""
    return bool(_REPO_ID.match(spec)) and ".." not in spec



def hub_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot folder of ``repo_id`` in the Hugging Face cache; never downloads."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise SourceError(f"{repo_id}: looking a model up in the Hugging Face cache needs "
                          "huggingface_hub (pip install huggingface_hub)") from None
    try:
        # local_files_only: the cache is read, the network never tried (HF_HUB_OFFLINE is
        # not touched: it is read once at import, and setting it would be process-wide).
        path = snapshot_download(repo_id, revision=revision, local_files_only=True,
                                 cache_dir=hub_cache_dir())
    except Exception as exc:  # noqa: BLE001 - LocalEntryNotFoundError, a bad id, a bad cache
        where = hub_cache_dir() or _default_hub_cache()
        raise SourceError(f"{repo_id}: not a model folder, and not in the Hugging Face cache "
                          f"({where}); download it there first, or give its folder "
                          f"({type(exc).__name__})") from None
    return Path(path)


def hub_cache_dir() -> str | None:
    """The cache folder the user chose, read now (huggingface_hub reads its variables once, at
    import, and another library may have imported it first): ``HF_HUB_CACHE``, else
    ``HF_HOME/hub``; None leaves the library's default (``~/.cache/huggingface/hub``)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.path.expanduser(os.environ[var])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return None


def _default_hub_cache() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except Exception:  # noqa: BLE001 - only for a message
        return "HF_HUB_CACHE"


# -- checking a folder --------------------------------------------------------------------------
@dataclass
class CT2Folder:
    """A checked CTranslate2 Whisper folder."""

    path: Path
    files: dict[str, Path]  # file name → path, model.bin and the side files present
    dims: dict
    tokenizer: dict  # the tokenizer.json document (read, or made from vocabulary.*)
    config: dict  # config.json, {} when absent

    @property
    def architecture(self) -> str:
        return architecture(self.dims)


def _read_json(path: Path, what: str):
    if path.stat().st_size > MAX_SIDE_FILE:
        raise SourceError(f"{path}: {path.stat().st_size} bytes is too large for {what}")
    try:
        return json.loads(path.read_bytes())
    except RecursionError:
        raise SourceError(f"{path}: nested too deeply to be {what}") from None
    except (OSError, ValueError) as exc:
        raise SourceError(f"{path}: unreadable {what} ({exc})") from None


def check_dims(dims: dict, where: str) -> None:
    """Shapes a Whisper model must have, whatever its size (so that a hostile or damaged file
    is refused before a graph is built from it)."""
    def bad(why: str) -> SourceError:
        return SourceError(f"{where}: not a Whisper model we can convert ({why})")

    if dims["n_mels"] not in (80, 128):
        raise bad(f"{dims['n_mels']} mel bands, not 80 or 128")
    if dims["n_audio_ctx"] != 1500 or dims["n_text_ctx"] != 448:
        raise bad(f"contexts {dims['n_audio_ctx']}/{dims['n_text_ctx']}, not 1500/448")
    if not 51000 <= dims["n_vocab"] <= 52000:
        raise bad(f"a vocabulary of {dims['n_vocab']} tokens")
    for side in ("audio", "text"):
        state, heads, layers = (dims[f"n_{side}_state"], dims[f"n_{side}_head"],
                                dims[f"n_{side}_layer"])
        if not (0 < heads <= state and state % heads == 0 and state <= 8192):
            raise bad(f"{side} width {state} with {heads} heads")
        if not 0 < layers <= 64:
            raise bad(f"{layers} {side} layers")
    if dims["n_audio_state"] != dims["n_text_state"]:
        raise bad("encoder and decoder widths differ")


def _special_names(doc: dict) -> dict[str, int]:
    return {a["content"]: int(a["id"]) for a in doc.get("added_tokens", ())
            if isinstance(a, dict) and isinstance(a.get("content"), str)
            and isinstance(a.get("id"), int)}


def tokenizer_from_vocabulary(tokens: list[str]) -> dict:
    """A ``tokenizer.json`` for a folder that ships only CTranslate2's vocabulary (one token per
    id, byte-level pieces, then the special and timestamp tokens): what the runtime's tokenizer
    reads of such a file (vocabulary, specials, byte-level pre-tokenizer); the BPE merges are
    not needed (tokens merge by rank, which is the id)."""
    try:
        eot = tokens.index("<|endoftext|>")
    except ValueError:
        raise SourceError("the vocabulary has no <|endoftext|>") from None
    vocab = {t: i for i, t in enumerate(tokens[:eot])}
    added = []
    for i in range(eot, len(tokens)):
        if re.fullmatch(r"<\|\d+\.\d\d\|>", tokens[i]):
            break  # timestamps: the runtime derives them from <|notimestamps|>
        added.append({"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}


def _vocabulary_tokens(files: dict[str, Path]) -> list[str] | None:
    if "vocabulary.json" in files:
        tokens = _read_json(files["vocabulary.json"], "vocabulary.json")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise SourceError(f"{files['vocabulary.json']}: not a list of tokens")
        return tokens
    if "vocabulary.txt" in files:
        p = files["vocabulary.txt"]
        if p.stat().st_size > MAX_SIDE_FILE:
            raise SourceError(f"{p}: too large for a vocabulary")
        return p.read_text(encoding="utf-8").splitlines()
    return None


def inspect_ct2(folder: Path) -> CT2Folder:
    """Check a CTranslate2 Whisper folder (see the module docstring); raises SourceError."""
    from as2d.models.ct2 import CT2FormatError, load_ct2
    from as2d.models.whisper_onnx import whisper_dims

    folder = Path(folder)
    model_bin = folder / "model.bin"
    if not model_bin.is_file():
        raise SourceError(f"{folder}: no model.bin (expected a CTranslate2 Whisper folder)")
    files = {"model.bin": model_bin}
    files.update({n: folder / n for n in _SIDE_FILES if (folder / n).is_file()})
    try:
        dims = whisper_dims(load_ct2(model_bin))
    except (CT2FormatError, OSError, IndexError, KeyError, TypeError, ValueError) as exc:
        # (an empty or mis-shaped scalar or weight that the reader's own checks let through)
        raise SourceError(f"{model_bin}: not a CTranslate2 Whisper model ({exc})") from None
    check_dims(dims, str(model_bin))
    if "tokenizer.json" in files:
        tokenizer = _read_json(files["tokenizer.json"], "tokenizer.json")
        if not isinstance(tokenizer, dict):
            raise SourceError(f"{files['tokenizer.json']}: not a tokenizer")
    else:
        tokens = _vocabulary_tokens(files)
        if tokens is None:
            raise SourceError(f"{folder}: no tokenizer.json, vocabulary.json or vocabulary.txt")
        tokenizer = tokenizer_from_vocabulary(tokens)
    specials = _special_names(tokenizer)
    nots = specials.get("<|notimestamps|>")
    if nots is None or "<|endoftext|>" not in specials or "<|startoftranscript|>" not in specials:
        raise SourceError(f"{folder}: the tokenizer lacks Whisper's special tokens")
    if nots + 1 + TIMESTAMPS != dims["n_vocab"]:
        raise SourceError(f"{folder}: the tokenizer ({nots + 1 + TIMESTAMPS} tokens with the "
                          f"timestamps) does not match the model ({dims['n_vocab']} outputs)")
    config = _read_json(files["config.json"], "config.json") if "config.json" in files else {}
    if not isinstance(config, dict):
        raise SourceError(f"{files['config.json']}: not a configuration")
    if "preprocessor_config.json" in files:
        pre = _read_json(files["preprocessor_config.json"], "preprocessor_config.json")
        mels = pre.get("feature_size") if isinstance(pre, dict) else None
        if mels is not None and mels != dims["n_mels"]:
            raise SourceError(f"{folder}: preprocessor_config.json says {mels} mel bands, the "
                              f"model takes {dims['n_mels']}")
    return CT2Folder(folder, files, dims, tokenizer, config)


def generation_config(src: CT2Folder) -> dict:
    """What the manifest keeps of config.json (the runtime reads ``alignment_heads``): values
    of the right shape only; alignment heads default to Whisper's rule for models that do not
    name theirs (every head of the decoder's second half)."""
    out: dict = {}
    for key in ("suppress_ids", "suppress_ids_begin", "lang_ids"):
        value = src.config.get(key)
        if isinstance(value, str):  # some converters wrote lists as strings
            try:
                value = json.loads(value)
            except ValueError:
                value = None
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            out[key] = value
    layers, heads = src.dims["n_text_layer"], src.dims["n_text_head"]
    value = src.config.get("alignment_heads")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if (isinstance(value, list) and value and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) for v in p)
            and 0 <= p[0] < layers and 0 <= p[1] < heads for p in value)):
        out["alignment_heads"] = value
    else:
        out["alignment_heads"] = [[la, h] for la in range(layers // 2, layers)
                                  for h in range(heads)]
    return out


def content_digest(src: CT2Folder, root: Path | None = None) -> str:
    """sha256 over the names and sha256 digests of the folder's files (each file's digest
    remembered per file identity in the models folder: hashed once, then only ``stat``-ed)."""
    cache = verified_cache(root)
    h = hashlib.sha256()
    for name in sorted(src.files):
        h.update(f"{name}\0{cache.digest(src.files[name])}\n".encode())
    cache.save()
    return h.hexdigest()


def slug(origin: str) -> str:
    """A folder-name-safe short name for a source (``Systran/faster-whisper-small`` →
    ``Systran--faster-whisper-small``)."""
    text = origin.strip().rstrip("/")
    text = text.replace("/", "--") if looks_like_repo_id(text) else Path(text).name
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:60]
    return text or "whisper"


# -- installing -----------------------------------------------------------------------------------
def user_bundles(root: Path) -> list[Bundle]:
    """The bundles in ``root`` converted from folders the user named."""
    return [b for b in installed_bundles(root) if b.manifest.get("user")]


def source_of(bundle: Bundle) -> Path:
    """The folder a user bundle was converted from, checked unchanged (graphs added on first
    use, such as the alignment graph, are converted from it again)."""
    src = bundle.manifest.get("source", {})
    folder = Path(src.get("path") or "")
    if not src.get("path") or not (folder / "model.bin").is_file():
        raise BundleError(f"{bundle.name} was converted from {src.get('path')!r}, which is no "
                          "longer there; name that model again to convert it")
    if content_digest(inspect_ct2(folder), bundle.path.parent) != src.get("content_sha256"):
        raise BundleError(f"{folder} has changed since {bundle.name} was converted from it; "
                          "name it again to convert it again")
    return folder


def matches_catalog(dims: dict, expected: dict) -> list[str]:
    """How ``dims`` differ from a catalog model's (empty when they match)."""
    return [f"{k} {dims.get(k)} (expected {v})" for k, v in expected.items()
            if dims.get(k) != v]
