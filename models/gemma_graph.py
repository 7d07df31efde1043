"""The Gemma 3 decoder as one ONNX graph, built from dequantised GGUF tensors.

``decoder.onnx`` is shaped like the Whisper decoder so that the same speculative scheduler
can drive it:

``tokens [T]`` (int64), ``positions [T]`` (int64), ``visible [T, T]`` (bool),
``logit_rows [1]`` (int64, how many of the last rows need logits), and per layer
``past_k_i``/``past_v_i [n, kv_dim]`` → ``logits [R, V]`` for the last
``R = min(logit_rows, T)`` rows, ``new_k_i``/``new_v_i [T, kv_dim]``.

The caller owns the cache (``n`` rows already decoded) and appends the new rows. A sequence
passes ``positions = n .. n+T-1`` and the lower triangle for ``visible``. A *tree* of
continuations (candidate answers sharing prefixes) passes ``n`` + each token's depth as its
position and its ancestors as what it sees, and is scored in one pass instead of one per branch; its
rows are not kept (the cache layout is a sequence's). Keys are cached after their norm and
RoPE.
Weights arrive by GGUF tensor name (``blk.{i}.attn_q.weight``, …) from a callable, normally
:meth:`as2d.models.gguf_reader.GGUFModel.tensor`; the architecture from
:mod:`as2d.models.gemma_config`.

RMSNorm scales: llama.cpp's converter stores Gemma's RMSNorm scale as ``1 + w`` (Gemma
multiplies by ``1 + w``; llama.cpp's graph multiplies by the stored weight), so the stored
weights are used as they are. Checked on this file: several norm weights are exactly ``0.0``
(a raw ``w = -1``, a switched-off channel); an independent numpy forward pass gives a mean NLL
of ~3.5 nats/token on plain prose with the weights as stored and ~18 with an extra ``+1``; and
llama.cpp itself, run on the same file, agrees with the fp32 graph's top-1 at ~99% of
positions.

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
with the context; see ``DEFAULT_CAPACITY``. A tree pass is not row-exact in that sense (a
branch's ancestors sit in other columns than in a sequence, which regroups the softmax sums):
its scores rank candidates; tokens are only ever committed from sequence passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto

from as2d.models.gemma_config import GemmaConfig
from as2d.models.gguf_reader import GGUFError
from as2d.models.graph import Graph

# Context tokens a bundle holds (KV cache rows and RoPE table rows). The cache is allocated
# lazily by the OS, so a large capacity costs only what a sequence uses; a step's attention
# runs over the whole cache, though (int8 single step ~1.4x at 2k tokens, ~2.3x at 4k, vs 64).
DEFAULT_CAPACITY = 4096

WeightSource = Callable[[str], np.ndarray]


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


def build_decoder(weights: WeightSource, cfg: GemmaConfig, quant: str = "int8",
                  capacity: int = DEFAULT_CAPACITY,
                  progress: Callable[[str], None] | None = None) -> onnx.ModelProto:
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
    # Where each new token sits and which new tokens it sees: ``n + arange(T)`` and the lower
    # triangle for a sequence; a depth and its ancestors for a tree of continuations, all
    # scored in one pass (their rows are then not kept in the cache).
    positions = g.input("positions", TensorProto.INT64, ["T"])
    visible = g.input("visible", TensorProto.BOOL, ["T", "T"])
    logit_rows = g.input("logit_rows", TensorProto.INT64, [1])
    past_k = [g.input(f"past_k_{i}", TensorProto.FLOAT, ["n", kv_dim])
              for i in range(cfg.num_layers)]
    past_v = [g.input(f"past_v_{i}", TensorProto.FLOAT, ["n", kv_dim])
              for i in range(cfg.num_layers)]

    t_len = g.op("Shape", tokens)  # [1]
    n_past = g.op("Slice", g.op("Shape", past_k[0]), g.const([0]), g.const([1]))  # [1]

    emb = weights("token_embd.weight")  # [V, d]
    if quant == "int8":
        x = g.embed_int8(emb, tokens, "embed")
    else:
        table = g.weight("embed.weight", emb)
        x = g.op("Gather", table, tokens, axis=0)
    x = g.op("Mul", x, g.const(cfg.embed_scale, np.float32))

    # RoPE rows for the tokens' positions, shaped [T, 1, hd] to broadcast over heads.
    rope = {}
    for kind in sorted(set(cfg.layer_types)):
        cos, sin = rope_tables(cfg, capacity, kind)
        rope[kind] = tuple(
            g.op("Unsqueeze", g.op("Gather", g.weight(f"rope.{kind}.{nm}", tab), positions,
                                   axis=0), g.const([1]))
            for nm, tab in (("cos", cos), ("sin", sin)))

    # Masks over absolute cache columns for the grouped score rows (row r is token r // group):
    # a row sees the cached columns j <= its position and the new tokens ``visible`` grants
    # it, and in a local layer only those less than `sliding_window` positions back. For a
    # sequence (positions n.., the lower triangle) every value is what a mask built from the
    # cache length gives, so a pass computes each row as before.
    group_shape = g.op("Concat", t_len, g.const([group]), axis=0)  # [T, group]
    pos = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", positions, g.const([1])), group_shape),
               g.const([-1, 1]))  # [T*group, 1]
    past_cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", n_past), g.const(1)),
                     g.const([0]))  # [1, n]
    new_cols = g.op("Unsqueeze", positions, g.const([0]))  # [1, T]
    hidden_new = g.op("Not", g.op("Reshape", g.op("Expand", g.op("Unsqueeze", visible,
                                                                 g.const([1])),
                                                  g.op("Concat", group_shape, t_len, axis=0)),
                                  g.op("Concat", g.const([-1]), t_len, axis=0)))  # [T*group, T]
    future_past = g.op("Greater", past_cols, pos)
    neg_inf, zero = g.const(-np.inf, np.float32), g.const(0.0, np.float32)
    masks = {"global": g.op("Where", g.op("Concat", future_past, hidden_new, axis=1), neg_inf,
                            zero)}
    if "local" in cfg.layer_types:
        window = g.const(cfg.sliding_window)
        hidden = g.op("Concat",
                      g.op("Or", future_past,
                           g.op("GreaterOrEqual", g.op("Sub", pos, past_cols), window)),
                      g.op("Or", hidden_new,
                           g.op("GreaterOrEqual", g.op("Sub", pos, new_cols), window)), axis=1)
        masks["local"] = g.op("Where", hidden, neg_inf, zero)

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
