#!/usr/bin/env python
"""Write whisper.cpp's ggml model file from a CTranslate2 Whisper folder.

Why: ``scripts/bench_e2e.py`` runs whisper.cpp as a peer, and a fair comparison needs the
**same weights** for every side. The only Whisper weights this project can get offline are the
CTranslate2 folders that as2d and faster-whisper are built from, so this script writes those
weights in whisper.cpp's own (legacy ggml) layout; whisper.cpp's quantizer then makes the q8_0
file from it.

    python scripts/ct2_to_ggml.py base /tmp/ggml-base.bin          # from the catalog's packages
    python scripts/ct2_to_ggml.py tiny.en /tmp/ggml-tiny.en.bin
    python scripts/ct2_to_ggml.py /path/to/ct2-folder out.bin [--f32]

The file (all integers little-endian int32), as whisper.cpp's loader reads it:

1. magic ``0x67676d6c`` ("ggml");
2. hyper-parameters: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
   n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype (1: float16 weights,
   0: float32);
3. the mel filterbank: n_mel, n_fft (= 201 bins), then n_mel × n_fft float32 (the same Slaney
   filters that as2d's front end uses, :func:`as2d.runtime.whisper.features.mel_filters`);
4. the vocabulary: a count, then for every text token (ids below ``<|endoftext|>``) its length
   and raw bytes; whisper.cpp names the special and timestamp tokens itself;
5. tensor records until the end of the file: n_dims, name length, type (0 float32, 1 float16),
   the dims innermost first (numpy's shape reversed), the name, then the raw data.

Names follow openai-whisper's state dict (``encoder.blocks.0.attn.query.weight`` ...).
CTranslate2 fuses the self-attention projections (q, k, v in one ``linear_0``) and the cross-
attention key/value (``linear_1``); they are split here. Whisper's key projections have no bias:
CTranslate2 stores a zero one, which is checked and dropped. The output projection is the token
embedding (tied), so it is not written. As in whisper.cpp's own converters, the matrices are
float16 and the biases, norms, conv biases and positional embeddings float32 (``--f32``: all
float32). Quantized CTranslate2 weights (int8 with a ``_scale``) are dequantized first.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

GGML_MAGIC = 0x67676D6C
F32, F16 = 0, 1  # ggml type ids (also the file's ftype for float32 / float16 weights)


class ConvertError(Exception):
    """A problem the user can fix (wrong folder, missing packages): one line, no traceback."""


# -- the source ---------------------------------------------------------------------------------

def resolve_source(spec: str, cache: Path) -> Path:
    """A CTranslate2 folder: ``spec`` itself when it is one, else a catalog model name (its
    packages' parts joined once into ``cache``, as the converters and the tests do)."""
    path = Path(spec)
    if path.is_dir():
        return path
    from as2d.models.catalog import lookup
    from as2d.models.source_packages import assemble, locate

    try:
        entry = lookup(spec)
    except Exception as exc:  # noqa: BLE001 - unknown name: say what was looked for
        raise ConvertError(f"{spec}: neither a CTranslate2 folder nor a catalog model "
                           f"({exc})") from None
    src = entry.source
    if entry.kind != "whisper":
        raise ConvertError(f"{spec} is not a Whisper model")
    try:
        side = locate(src.parts[0], src).parent
        if len(src.parts) == 1:
            return side
        dest = cache / f"ct2-{entry.name}"
        model_bin = dest / "model.bin"
        if not (model_bin.is_file() and model_bin.stat().st_size == src.size):
            dest.mkdir(parents=True, exist_ok=True)
            assemble(src, model_bin)
        for extra in src.extra_files:
            target = dest / Path(extra.path).name
            if not target.is_file():
                target.write_bytes(locate(extra, src).read_bytes())
        return dest
    except Exception as exc:  # noqa: BLE001 - SourceError and OSError: one line
        raise ConvertError(str(exc)) from None


def text_tokens(tokenizer: dict) -> list[bytes]:
    """Raw bytes of every text token (ids below ``<|endoftext|>``), in id order."""
    from as2d.runtime.whisper.tokenizer import _piece_bytes

    specials = {a["content"]: int(a["id"]) for a in tokenizer.get("added_tokens", ())
                if isinstance(a, dict) and "content" in a and "id" in a}
    eot = specials.get("<|endoftext|>")
    if eot is None:
        raise ConvertError("the tokenizer has no <|endoftext|>")
    pieces: list[str | None] = [None] * eot
    for piece, i in tokenizer["model"]["vocab"].items():
        if 0 <= i < eot:
            pieces[i] = piece
    missing = [i for i, p in enumerate(pieces) if p is None]
    if missing:
        raise ConvertError(f"the tokenizer lacks {len(missing)} text token(s) "
                           f"(first id {missing[0]})")
    return [_piece_bytes(p) for p in pieces]  # type: ignore[arg-type]


# -- the tensors --------------------------------------------------------------------------------

def _split(w: np.ndarray, d: int, parts: int) -> list[np.ndarray]:
    if w.shape[0] != parts * d:
        raise ConvertError(f"fused projection of {w.shape[0]} rows, expected {parts} × {d}")
    return [w[i * d:(i + 1) * d] for i in range(parts)]


def _no_bias(name: str, b: np.ndarray) -> None:
    if np.any(b != 0):
        raise ConvertError(f"{name}: a non-zero key bias, which whisper.cpp cannot hold")


def ggml_tensors(m, dims: dict) -> Iterator[tuple[str, np.ndarray]]:
    """(whisper.cpp name, float32 array in openai-whisper's shape) for every tensor, one at a
    time (so a large model is never held twice)."""
    d = dims["n_audio_state"]

    def lin(src: str, dst: str) -> Iterator[tuple[str, np.ndarray]]:
        yield f"{dst}.weight", m.f32(f"{src}/weight")
        yield f"{dst}.bias", m.f32(f"{src}/bias")

    def norm(src: str, dst: str) -> Iterator[tuple[str, np.ndarray]]:
        yield f"{dst}.weight", m.f32(f"{src}/gamma")
        yield f"{dst}.bias", m.f32(f"{src}/beta")

    def self_attn(src: str, dst: str) -> Iterator[tuple[str, np.ndarray]]:
        wq, wk, wv = _split(m.f32(f"{src}/linear_0/weight"), d, 3)
        bq, bk, bv = _split(m.f32(f"{src}/linear_0/bias"), d, 3)
        _no_bias(f"{src}/linear_0", bk)
        yield f"{dst}.query.weight", wq
        yield f"{dst}.query.bias", bq
        yield f"{dst}.key.weight", wk
        yield f"{dst}.value.weight", wv
        yield f"{dst}.value.bias", bv
        yield from lin(f"{src}/linear_1", f"{dst}.out")

    yield "encoder.conv1.weight", m.f32("encoder/conv1/weight")
    yield "encoder.conv1.bias", m.f32("encoder/conv1/bias").reshape(-1, 1)
    yield "encoder.conv2.weight", m.f32("encoder/conv2/weight")
    yield "encoder.conv2.bias", m.f32("encoder/conv2/bias").reshape(-1, 1)
    yield "encoder.positional_embedding", m.f32("encoder/position_encodings/encodings")
    for i in range(dims["n_audio_layer"]):
        src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        yield from norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
        yield from self_attn(f"{src}/self_attention", f"{dst}.attn")
        yield from norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")
        yield from lin(f"{src}/ffn/linear_0", f"{dst}.mlp.0")
        yield from lin(f"{src}/ffn/linear_1", f"{dst}.mlp.2")
    yield from norm("encoder/layer_norm", "encoder.ln_post")

    yield "decoder.token_embedding.weight", m.f32("decoder/embeddings/weight")
    yield "decoder.positional_embedding", m.f32("decoder/position_encodings/encodings")
    for i in range(dims["n_text_layer"]):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        yield from norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
        yield from self_attn(f"{src}/self_attention", f"{dst}.attn")
        yield from norm(f"{src}/attention/layer_norm", f"{dst}.cross_attn_ln")
        yield from lin(f"{src}/attention/linear_0", f"{dst}.cross_attn.query")
        wk, wv = _split(m.f32(f"{src}/attention/linear_1/weight"), d, 2)
        bk, bv = _split(m.f32(f"{src}/attention/linear_1/bias"), d, 2)
        _no_bias(f"{src}/attention/linear_1", bk)
        yield f"{dst}.cross_attn.key.weight", wk
        yield f"{dst}.cross_attn.value.weight", wv
        yield f"{dst}.cross_attn.value.bias", bv
        yield from lin(f"{src}/attention/linear_2", f"{dst}.cross_attn.out")
        yield from norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")
        yield from lin(f"{src}/ffn/linear_0", f"{dst}.mlp.0")
        yield from lin(f"{src}/ffn/linear_1", f"{dst}.mlp.2")
    yield from norm("decoder/layer_norm", "decoder.ln")


def storage_type(name: str, array: np.ndarray, f16: bool) -> int:
    """float16 for the matrices and conv kernels, float32 for the rest (whisper.cpp's loader
    allocates the biases, norms and positional embeddings as float32 whatever the ftype)."""
    if not f16 or array.ndim < 2 or name.endswith(".bias") or "positional_embedding" in name:
        return F32
    return F16


# -- the writer ---------------------------------------------------------------------------------

def _i32(out: BinaryIO, *values: int) -> None:
    out.write(struct.pack(f"<{len(values)}i", *values))


def write_record(out: BinaryIO, name: str, array: np.ndarray, ttype: int) -> None:
    data = np.ascontiguousarray(array, dtype="<f2" if ttype == F16 else "<f4")
    raw_name = name.encode("utf-8")
    _i32(out, data.ndim, len(raw_name), ttype)
    _i32(out, *reversed(data.shape))  # ggml's ne: innermost dimension first
    out.write(raw_name)
    out.write(data.tobytes())


def convert(folder: Path, out_path: Path, f16: bool = True) -> dict:
    """Write ``out_path`` from the CTranslate2 folder; returns what was written (for a summary)."""
    from as2d.models.ct2 import load_ct2
    from as2d.models.whisper_source import SourceError, inspect_ct2
    from as2d.runtime.whisper.features import mel_filters

    try:
        src = inspect_ct2(folder)
    except SourceError as exc:
        raise ConvertError(str(exc)) from None
    dims = src.dims
    tokens = text_tokens(src.tokenizer)
    filters = np.asarray(mel_filters(dims["n_mels"]), dtype="<f4")
    m = load_ct2(src.files["model.bin"])
    tmp = out_path.with_name(out_path.name + ".part")
    try:
        count, nbytes = _write(tmp, dims, filters, tokens, m, f16)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed or interrupted conversion leaves no partial file
        raise
    tmp.replace(out_path)
    return {"dims": dims, "tensors": count, "parameters": nbytes, "tokens": len(tokens),
            "bytes": out_path.stat().st_size}


def _write(tmp: Path, dims: dict, filters, tokens, m, f16: bool) -> tuple[int, int]:
    """The ggml file's header, mel filters, vocabulary and tensors, written to ``tmp``."""
    count, nbytes = 0, 0
    with open(tmp, "wb") as out:
        _i32(out, GGML_MAGIC)
        _i32(out, dims["n_vocab"], dims["n_audio_ctx"], dims["n_audio_state"],
             dims["n_audio_head"], dims["n_audio_layer"], dims["n_text_ctx"],
             dims["n_text_state"], dims["n_text_head"], dims["n_text_layer"], dims["n_mels"],
             F16 if f16 else F32)
        _i32(out, *filters.shape)
        out.write(filters.tobytes())
        _i32(out, len(tokens))
        for t in tokens:
            _i32(out, len(t))
            out.write(t)
        for name, array in ggml_tensors(m, dims):
            write_record(out, name, array, storage_type(name, array, f16))
            count += 1
            nbytes += array.size
    return count, nbytes


def main(argv: list[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="CTranslate2 Whisper folder, or a catalog name (base, tiny.en)")
    ap.add_argument("out", type=Path, help="ggml model file to write")
    ap.add_argument("--f32", action="store_true", help="float32 matrices (default float16)")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "as2d-bench", help="where a catalog model's parts are joined once")
    args = ap.parse_args(argv)
    try:
        folder = resolve_source(args.source, args.cache)
        info = convert(folder, args.out, f16=not args.f32)
    except ConvertError as exc:
        print(f"ct2_to_ggml: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ct2_to_ggml: error: {exc}", file=sys.stderr)
        return 2
    d = info["dims"]
    print(f"wrote {args.out}: {info['bytes'] / 1e6:.1f} MB, {info['tensors']} tensors, "
          f"{info['parameters'] / 1e6:.1f} M parameters, {info['tokens']} text tokens, "
          f"{d['n_audio_layer']}+{d['n_text_layer']} layers of {d['n_audio_state']}, "
          f"n_vocab {d['n_vocab']}, {'float32' if args.f32 else 'float16'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
