"""One decoder-only ONNX graph for every GGUF family as2d converts (Llama, Qwen2/2.5, Qwen3,
Phi-3, Gemma 2, Gemma 3), built from dequantised GGUF tensors.

The graph contract (:mod:`as2d.models.gemma_graph` describes it in full):
``tokens [T]``, ``positions [T]``, ``visible [T, T]``, ``logit_rows [1]`` and per layer
``past_k_i``/``past_v_i [n, kv_dim]`` → ``logits [R, V]``, ``new_k_i``/``new_v_i [T, kv_dim]``;
so the runtime (:class:`as2d.runtime.llm.lm.CausalLM`), the speculative scheduler and the
row check serve every family unchanged.

The families differ in a handful of switches, all in :class:`DecoderConfig` (read from the
GGUF by :mod:`as2d.models.gguf_families`):

* Llama: RMSNorm, SiLU-gated MLP; llama.cpp permutes the rows of ``attn_q``/``attn_k`` for its
  adjacent-pair RoPE, which :func:`unpermute` undoes (every other family is stored unpermuted
  and rotated by halves, NeoX style, as here).
* Qwen2/2.5: Llama's layout plus q/k/v biases. Qwen3: per-head RMSNorm of q and k
  (``attn_q_norm``/``attn_k_norm``) before RoPE, no biases.
* Phi-3: q/k/v in one ``attn_qkv`` tensor and gate/up in one ``ffn_up`` (gate first), usually
  one key/value head per query head; LongRoPE (the 128k models) divides the RoPE frequencies
  by per-frequency factors and scales cos/sin.
* Gemma 2: embedding times √d, GELU-tanh gated MLP, norms before *and* after attention and MLP,
  tanh soft-capping of the attention scores and of the final logits, a sliding window on
  alternate layers. Gemma 3: Gemma 2's layout without soft-capping, with q/k norms and a
  second RoPE base for the sliding-window layers.
  llama.cpp's converter stores every Gemma RMSNorm scale as ``1 + w`` (the model multiplies
  by ``1 + w``), so those weights are used as stored.

Row independence (why speculative answers equal greedy ones token for token): projections
are constant-weight ``MatMul``s or the per-row int8 path of :meth:`Graph.linear`, norms one
fused per-row kernel, masks address absolute cache columns, and attention multiplies the
query heads that share a key/value head as rows of one product, so a one-token pass never
falls onto onnxruntime's single-row kernel, which rounds differently. With one query head
per key/value head (Phi-3 mini) each query row is duplicated for that product and the copy
dropped after it: the price is twice the attention arithmetic, not a different kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import TensorProto

from as2d.models.gguf_reader import GGUFError
from as2d.models.graph import Graph

# Context tokens a bundle holds (KV cache rows and RoPE table rows). The cache is allocated
# lazily by the OS, so a large capacity costs only what a sequence uses; a step's attention
# runs over the whole cache, though (int8 single step ~1.4x at 2k tokens, ~2.3x at 4k, vs 64).
DEFAULT_CAPACITY = 4096

WeightSource = Callable[[str], np.ndarray]


class HeadShapes:
    """What every decoder-only config derives from its fields (``num_heads``,
    ``num_kv_heads``, ``head_dim``, ``layer_types``): the projection widths and the manifest's
    ``config`` (JSON-ready: lists, not tuples). Shared by :class:`DecoderConfig` and Gemma 3's
    own config, whose manifests keep their own field names."""

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


@dataclass(frozen=True)
class DecoderConfig(HeadShapes):
    """The architecture as read from a GGUF (the manifest's ``config``)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    rope_base: float  # the global (full-attention) layers'
    rope_local_base: float  # the sliding-window layers'
    rope_scale: float  # linear position scaling of the global layers (1.0 = none)
    layer_types: tuple[str, ...]  # "global" or "local" (sliding window), per layer
    sliding_window: int
    query_scale: float  # folded into the query rows (or the query norm)
    embed_scale: float = 1.0
    attn_softcap: float = 0.0  # 0: none
    final_softcap: float = 0.0
    activation: str = "silu"  # or "gelu_tanh"
    permuted_qk: bool = False  # llama.cpp's row permutation for adjacent-pair RoPE (Llama)
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    tied_output: bool = True
    trained_context: int = 0
    # Per-frequency divisors of the RoPE angles, if the file has this tensor (Llama 3.1's
    # rope_freqs; Phi-3 LongRoPE's short factors), and the factor on cos/sin that comes with
    # LongRoPE (its attention scaling).
    rope_factors: str = "rope_freqs.weight"
    rope_attn_factor: float = 1.0



def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's row permutation of a q/k projection ``[heads*hd, in]`` (or its bias):
    GGUF rows ``(h, i, c)`` (pair ``i``, member ``c``) back to the model's ``(h, c, i)``."""
    out, rest = w.shape[0], w.shape[1:]
    return np.ascontiguousarray(
        w.reshape(heads, out // heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape))


def rope_tables(head_dim: int, base: float, capacity: int, scale: float = 1.0,
                freq_factors: np.ndarray | None = None, attn_factor: float = 1.0
                ) -> tuple[np.ndarray, np.ndarray]:
    """``cos``, ``sin·sign`` tables ``[capacity, head_dim]`` for NeoX-style (half-split) RoPE.

    With ``x' = concat(x[half:], x[:half])`` the rotation is ``x·cos + x'·sin_signed``, where
    ``sin_signed = concat(-sin, sin)``: two multiplies and an add, no negation in the graph.
    Angles are computed in float64 and rounded once.
    """
    half = head_dim // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / head_dim)
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, dtype=np.float64)[:half]
    angles = (np.arange(capacity, dtype=np.float64) / scale)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    if attn_factor != 1.0:
        cos, sin = cos * attn_factor, sin * attn_factor
    return (np.concatenate([cos, cos], axis=1).astype(np.float32),
            np.concatenate([-sin, sin], axis=1).astype(np.float32))


def rms_norm(g: Graph, x: str, weight: np.ndarray, name: str, eps: float) -> str:
    """RMSNorm with the stored scale, as one per-row kernel."""
    w = g.weight(f"{name}.scale", np.asarray(weight, dtype=np.float32))
    return g.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=eps)


def gelu_tanh(g: Graph, x: str) -> str:
    """``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``: Gemma's ``gelu_pytorch_tanh``."""
    c = g.const(math.sqrt(2.0 / math.pi), np.float32)
    inner = g.op("Mul", g.op("Add", x, g.op("Mul", g.op("Mul", g.op("Mul", x, x), x),
                                               g.const(0.044715, np.float32))), c)
    return g.op("Mul", g.op("Mul", x, g.const(0.5, np.float32)),
                g.op("Add", g.op("Tanh", inner), g.const(1.0, np.float32)))


def rope(g: Graph, x: str, cos: str, sin: str, half: int) -> str:
    """Rotate ``x [T, heads, head_dim]`` by the position tables ``[T, 1, head_dim]``."""
    lo, hi = g.op("Split", x, g.const([half, half]), axis=-1, n_out=2)
    swapped = g.op("Concat", hi, lo, axis=-1)
    return g.op("Add", g.op("Mul", x, cos), g.op("Mul", swapped, sin))


def soft_cap(g: Graph, x: str, cap: float) -> str:
    """``cap · tanh(x / cap)`` (Gemma 2's attention-score and logit capping)."""
    c = g.const(cap, np.float32)
    return g.op("Mul", g.op("Tanh", g.op("Div", x, c)), c)


def _qkv(weights: WeightSource, has: Callable[[str], bool], cfg: DecoderConfig, p: str,
         kind: str) -> list[np.ndarray] | None:
    """q, k, v weights (``kind="weight"``) or biases, from separate tensors or Phi-3's fused
    ``attn_qkv`` (rows q, k, v), the Llama permutation undone; None: no biases."""
    fused = p + f"attn_qkv.{kind}"
    if has(fused):
        w = weights(fused)
        parts = np.split(w, [cfg.q_dim, cfg.q_dim + cfg.kv_dim], axis=0)
    elif kind == "bias" and not cfg.qkv_bias:
        return None
    else:
        parts = [weights(p + f"attn_{n}.{kind}") for n in "qkv"]
    if cfg.permuted_qk:
        parts[0], parts[1] = (unpermute(parts[0], cfg.num_heads),
                              unpermute(parts[1], cfg.num_kv_heads))
    return parts


def build_decoder(weights: WeightSource, cfg: DecoderConfig, quant: str = "int8",
                  capacity: int = DEFAULT_CAPACITY, has: Callable[[str], bool] = lambda n: False,
                  progress: Callable[[str], None] | None = None) -> onnx.ModelProto:
    """The decoder graph; ``weights(name)`` gives a GGUF tensor as float32 (each is read once
    and may be freed after its node is built, which keeps conversion memory near one copy of
    the model), ``has(name)`` whether the file holds an optional one (``output.weight``,
    ``rope_freqs.weight``, biases, fused tensors)."""
    if quant not in ("int8", "fp32"):
        raise ValueError(f"unknown precision {quant!r}")
    heads, kvh, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    group = heads // kvh
    if group * kvh != heads:
        raise GGUFError(f"{heads} query heads do not group over {kvh} key/value heads")
    # Rows of one key/value head's attention product: ≥ 2 even for a one-token pass.
    rows = max(group, 2)
    kv_dim, q_dim, eps = cfg.kv_dim, cfg.q_dim, cfg.rms_eps
    g = Graph(f"{cfg.architecture}_decoder")

    def linear(x: str, w: np.ndarray, prefix: str, bias: np.ndarray | None = None) -> str:
        return g.linear(x, w, bias, prefix, quant)

    tokens = g.input("tokens", TensorProto.INT64, ["T"])
    # Where each new token sits and which new tokens it sees: ``n + arange(T)`` and the lower
    # triangle for a sequence; a depth and its ancestors for a tree of continuations.
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
        x = g.op("Gather", g.weight("embed.weight", emb), tokens, axis=0)
    if cfg.embed_scale != 1.0:
        x = g.op("Mul", x, g.const(cfg.embed_scale, np.float32))
    if not cfg.tied_output:
        del emb

    # RoPE rows for the tokens' positions, shaped [T, 1, hd] to broadcast over heads.
    factors = weights(cfg.rope_factors) if has(cfg.rope_factors) else None
    tables = {}
    for kind in sorted(set(cfg.layer_types)):
        base = cfg.rope_local_base if kind == "local" else cfg.rope_base
        scale = cfg.rope_scale if kind == "global" else 1.0
        tables[kind] = tuple(
            g.op("Unsqueeze", g.op("Gather", g.weight(f"rope.{kind}.{nm}", tab), positions,
                                   axis=0), g.const([1]))
            for nm, tab in zip(("cos", "sin"), rope_tables(hd, base, capacity, scale, factors,
                                                           cfg.rope_attn_factor)))

    # Masks over absolute cache columns for the grouped score rows (row r is token r // rows):
    # a row sees the cached columns j <= its position and the new tokens ``visible`` grants
    # it, and in a local layer only those less than `sliding_window` positions back.
    group_shape = g.op("Concat", t_len, g.const([rows]), axis=0)  # [T, rows]
    pos = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", positions, g.const([1])), group_shape),
               g.const([-1, 1]))  # [T*rows, 1]
    past_cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", n_past), g.const(1)),
                     g.const([0]))  # [1, n]
    hidden_new = g.op("Not", g.op("Reshape", g.op("Expand", g.op("Unsqueeze", visible,
                                                                 g.const([1])),
                                                  g.op("Concat", group_shape, t_len, axis=0)),
                                  g.op("Concat", g.const([-1]), t_len, axis=0)))  # [T*rows, T]
    future_past = g.op("Greater", past_cols, pos)
    neg_inf, zero = g.const(-np.inf, np.float32), g.const(0.0, np.float32)
    masks = {"global": g.op("Where", g.op("Concat", future_past, hidden_new, axis=1), neg_inf,
                            zero)}
    if "local" in cfg.layer_types:
        new_cols = g.op("Unsqueeze", positions, g.const([0]))  # [1, T]
        window = g.const(cfg.sliding_window)
        hidden = g.op("Concat",
                      g.op("Or", future_past,
                           g.op("GreaterOrEqual", g.op("Sub", pos, past_cols), window)),
                      g.op("Or", hidden_new,
                           g.op("GreaterOrEqual", g.op("Sub", pos, new_cols), window)), axis=1)
        masks["local"] = g.op("Where", hidden, neg_inf, zero)

    qs = np.float32(cfg.query_scale)
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        kind = cfg.layer_types[i]
        if progress:
            progress(f"layer {i + 1}/{cfg.num_layers} ({kind})")
        h = rms_norm(g, x, weights(p + "attn_norm.weight"), f"l{i}.attn_norm", eps)
        wq, wk, wv = _qkv(weights, has, cfg, p, "weight")
        biases = _qkv(weights, has, cfg, p, "bias")
        if not cfg.qk_norm:  # the query scale folded into the query rows (else its norm)
            wq = wq * qs
            if biases is not None:
                biases[0] = biases[0] * qs
        w_qkv = np.concatenate([wq, wk, wv], axis=0)
        del wq, wk, wv
        qkv = linear(h, w_qkv, f"l{i}.qkv",
                     None if biases is None else np.concatenate(biases))
        del w_qkv
        q, k, v = g.op("Split", qkv, g.const([q_dim, kv_dim, kv_dim]), axis=-1, n_out=3)
        q = g.op("Reshape", q, g.const([0, heads, hd]))
        k = g.op("Reshape", k, g.const([0, kvh, hd]))
        if cfg.qk_norm:
            q = rms_norm(g, q, weights(p + "attn_q_norm.weight") * qs, f"l{i}.q_norm", eps)
            k = rms_norm(g, k, weights(p + "attn_k_norm.weight"), f"l{i}.k_norm", eps)
        cos, sin = tables[kind]
        q = rope(g, q, cos, sin, hd // 2)
        k = g.op("Reshape", rope(g, k, cos, sin, hd // 2), g.const([0, kv_dim]))
        g.output(k, f"new_k_{i}", TensorProto.FLOAT, ["T", kv_dim])
        g.output(v, f"new_v_{i}", TensorProto.FLOAT, ["T", kv_dim])
        k_all = g.op("Concat", past_k[i], k, axis=0)  # [S, kv_dim]
        v_all = g.op("Concat", past_v[i], v, axis=0)
        # Grouped attention: the query heads of one key/value head are rows of one product
        # ([kvh, T*rows, hd] · [kvh, hd, S]); a lone query head goes in twice.
        qg = g.op("Reshape", q, g.const([0, kvh, group, hd]))
        if rows != group:
            qg = g.op("Concat", qg, qg, axis=2)
        qg = g.op("Reshape", g.op("Transpose", qg, perm=[1, 0, 2, 3]), g.const([kvh, -1, hd]))
        kt = g.op("Transpose", g.op("Reshape", k_all, g.const([0, kvh, hd])), perm=[1, 2, 0])
        vh = g.op("Transpose", g.op("Reshape", v_all, g.const([0, kvh, hd])), perm=[1, 0, 2])
        scores = g.op("MatMul", qg, kt)
        if cfg.attn_softcap:
            scores = soft_cap(g, scores, cfg.attn_softcap)
        probs = g.op("Softmax", g.op("Add", scores, masks[kind]), axis=-1)
        ctx = g.op("Reshape", g.op("MatMul", probs, vh), g.const([kvh, -1, rows, hd]))
        if rows != group:
            ctx = g.op("Slice", ctx, g.const([0]), g.const([group]), g.const([2]))
        ctx = g.op("Reshape", g.op("Transpose", ctx, perm=[1, 0, 2, 3]), g.const([0, q_dim]))
        a = linear(ctx, weights(p + "attn_output.weight"), f"l{i}.o")
        if cfg.post_norms:
            a = rms_norm(g, a, weights(p + "post_attention_norm.weight"),
                         f"l{i}.post_attn_norm", eps)
        x = g.op("Add", x, a)

        h = rms_norm(g, x, weights(p + "ffn_norm.weight"), f"l{i}.ffn_norm", eps)
        if has(p + "ffn_gate.weight") or not has(p + "ffn_up.weight"):
            w_gu = np.concatenate([weights(p + "ffn_gate.weight"), weights(p + "ffn_up.weight")],
                                  axis=0)
        else:  # Phi-3: gate and up in one tensor, gate first
            w_gu = weights(p + "ffn_up.weight")
            if w_gu.shape[0] != 2 * cfg.intermediate_size:
                raise GGUFError(f"{p}ffn_up.weight has {w_gu.shape[0]} rows and no ffn_gate; "
                                f"expected gate and up fused ({2 * cfg.intermediate_size})")
        gu = linear(h, w_gu, f"l{i}.gate_up")
        del w_gu
        gate, up = g.op("Split", gu, g.const([cfg.intermediate_size] * 2), axis=-1, n_out=2)
        act = (gelu_tanh(g, gate) if cfg.activation == "gelu_tanh"
               else g.op("Mul", gate, g.op("Sigmoid", gate)))
        h = linear(g.op("Mul", act, up), weights(p + "ffn_down.weight"), f"l{i}.down")
        if cfg.post_norms:
            h = rms_norm(g, h, weights(p + "post_ffw_norm.weight"), f"l{i}.post_ffw_norm", eps)
        x = g.op("Add", x, h)

    # Logits only for the last `logit_rows` rows: a prompt prefill needs one row, not T rows
    # of the whole vocabulary. Rows are independent, so this changes nothing in the rows kept.
    start = g.op("Max", g.op("Sub", t_len, logit_rows), g.const([0]))
    x = g.op("Slice", x, start, t_len, g.const([0]))
    x = rms_norm(g, x, weights("output_norm.weight"), "final_norm", eps)
    if not cfg.tied_output:
        logits = linear(x, weights("output.weight"), "lm_head")
    elif quant == "int8":
        logits = linear(x, emb, "embed")
    else:
        logits = g.op("Gemm", x, "embed.weight", transB=1)
    if cfg.final_softcap:
        logits = soft_cap(g, logits, cfg.final_softcap)
    g.output(logits, "logits", TensorProto.FLOAT, ["R", cfg.vocab_size])
    return g.model()
