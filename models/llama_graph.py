"""Llama-family decoders (SmolLM, TinyLlama, Llama 2/3) as one ONNX graph, from GGUF tensors.

The graph has the contract of :mod:`as2d.models.gemma_graph` (``tokens``, ``positions``,
``visible``, ``logit_rows``, per-layer ``past_k_i``/``past_v_i`` → ``logits``,
``new_k_i``/``new_v_i``), so the runtime (:class:`as2d.runtime.llm.lm.CausalLM`), the
speculative scheduler and the row check serve both families unchanged. The parts they share
come from the Gemma module: the fused per-row RMSNorm, the half-split RoPE rotation, and the
grouped-query attention whose query heads of one key/value head are rows of one product (so a
one-token pass never falls onto onnxruntime's single-row kernel and every row is computed the
same way whatever the number of rows in a call).

What differs from Gemma: plain RMSNorm before attention and MLP (no post-norms, no q/k
norms), SiLU-gated MLP, no embedding scale, one RoPE base for every layer (optionally with
linear scaling or Llama 3.1's per-frequency factors, ``rope_freqs.weight``), an output
projection that is tied to the embedding unless the file has ``output.weight``.

RoPE layout: llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` so that its
"normal" RoPE (rotating adjacent pairs ``(2i, 2i+1)``) gives the model's half-split RoPE. The
rows are permuted back here (:func:`unpermute`), and the graph rotates halves as Gemma's does.
The test's numpy reference does the opposite: it keeps the GGUF rows and rotates adjacent
pairs, so the two agree only if the permutation is undone correctly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import TensorProto

from as2d.models.gemma_graph import DEFAULT_CAPACITY, _rms_norm, _rope
from as2d.models.gguf_reader import GGUFError, GGUFModel
from as2d.models.graph import Graph

ARCH = "llama"
# Families whose GGUFs exist but whose graphs this converter does not build (yet).
OTHER_FAMILIES = {"qwen2": "Qwen2", "qwen3": "Qwen3", "phi3": "Phi-3", "gemma2": "Gemma 2",
                  "gemma": "Gemma", "mistral3": "Mistral 3", "qwen2moe": "Qwen2-MoE"}

WeightSource = Callable[[str], np.ndarray]


@dataclass(frozen=True)
class LlamaConfig:
    """The architecture as read from the GGUF (the manifest's ``config``)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    rope_base: float
    rope_scale: float  # linear position scaling (1.0 = none)
    tied_output: bool
    trained_context: int
    architecture: str = ARCH

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def to_dict(self) -> dict:
        return asdict(self)


def llama_config(m: GGUFModel) -> LlamaConfig:
    """Read a Llama-architecture GGUF's facts; one clear error for any other family."""
    arch = str(m.require("general.architecture"))
    if arch != ARCH:
        family = OTHER_FAMILIES.get(arch, arch)
        raise GGUFError(f"{m.path.name}: a {family} model (architecture {arch!r}); this as2d "
                        "converts Llama-family GGUFs (SmolLM, TinyLlama, Llama) and Gemma 3")
    a = f"{arch}."
    hidden = int(m.require(a + "embedding_length"))
    heads = int(m.require(a + "attention.head_count"))
    kv_heads = int(m.meta(a + "attention.head_count_kv", heads))
    head_dim = int(m.meta(a + "attention.key_length", hidden // heads))
    if int(m.meta(a + "attention.value_length", head_dim)) != head_dim:
        raise GGUFError("key and value head sizes differ; not a Llama layout")
    rope_dims = int(m.meta(a + "rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise GGUFError(f"partial rotary embeddings ({rope_dims} of {head_dim}) are not handled")
    if int(m.meta(a + "expert_count", 0) or 0) > 0:
        raise GGUFError("mixture-of-experts Llama models are not handled")
    scaling = str(m.meta(a + "rope.scaling.type", "none"))
    if scaling not in ("none", "linear"):
        raise GGUFError(f"RoPE scaling {scaling!r} is not handled")
    factor = float(m.meta(a + "rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
    vocab = len(m.require("tokenizer.ggml.tokens"))
    emb = m.tensors.get("token_embd.weight")
    if emb is None or emb.shape != (hidden, vocab):
        raise GGUFError(f"token_embd.weight is {list(emb.shape) if emb else 'missing'}, "
                        f"expected [{hidden}, {vocab}]")
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, num_layers=int(m.require(a + "block_count")),
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=int(m.require(a + "feed_forward_length")),
        rms_eps=float(m.meta(a + "attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(m.meta(a + "rope.freq_base", 10_000.0)), rope_scale=factor,
        tied_output="output.weight" not in m.tensors,
        trained_context=int(m.meta(a + "context_length", 0)))


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's row permutation of a q/k projection ``[heads*hd, in]``: GGUF rows
    ``(h, i, c)`` (pair ``i``, member ``c``) back to the model's ``(h, c, i)`` (halves)."""
    out, rest = w.shape[0], w.shape[1:]
    return np.ascontiguousarray(
        w.reshape(heads, out // heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape))


def rope_tables(cfg: LlamaConfig, capacity: int, freq_factors: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``cos``, ``sin·sign`` ``[capacity, head_dim]`` for half-split RoPE (float64 angles,
    rounded once), as :func:`as2d.models.gemma_graph.rope_tables` lays them out."""
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / cfg.head_dim)
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, dtype=np.float64)[:half]
    angles = (np.arange(capacity, dtype=np.float64) / cfg.rope_scale)[:, None] * inv_freq[None]
    cos, sin = np.cos(angles), np.sin(angles)
    return (np.concatenate([cos, cos], axis=1).astype(np.float32),
            np.concatenate([-sin, sin], axis=1).astype(np.float32))


def build_decoder(weights: WeightSource, cfg: LlamaConfig, quant: str = "int8",
                  capacity: int = DEFAULT_CAPACITY, has: Callable[[str], bool] = lambda n: False,
                  progress: Callable[[str], None] | None = None) -> onnx.ModelProto:
    """The Llama decoder graph; ``weights(name)`` gives a GGUF tensor as float32, ``has(name)``
    whether the file holds an optional one (``output.weight``, ``rope_freqs.weight``)."""
    if quant not in ("int8", "fp32"):
        raise ValueError(f"unknown precision {quant!r}")
    heads, kvh, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    group = heads // kvh
    if group * kvh != heads:
        raise GGUFError(f"{heads} query heads do not group over {kvh} key/value heads")
    if group < 2:
        raise GGUFError("this converter relies on grouped-query attention (≥2 query heads per "
                        "key/value head) for row-independent attention")
    kv_dim, q_dim, eps = cfg.kv_dim, cfg.q_dim, cfg.rms_eps
    g = Graph("llama_decoder")

    def linear(x: str, w: np.ndarray, prefix: str) -> str:
        return g.linear(x, w, None, prefix, quant)

    tokens = g.input("tokens", TensorProto.INT64, ["T"])
    positions = g.input("positions", TensorProto.INT64, ["T"])
    visible = g.input("visible", TensorProto.BOOL, ["T", "T"])
    logit_rows = g.input("logit_rows", TensorProto.INT64, [1])
    past_k = [g.input(f"past_k_{i}", TensorProto.FLOAT, ["n", kv_dim])
              for i in range(cfg.num_layers)]
    past_v = [g.input(f"past_v_{i}", TensorProto.FLOAT, ["n", kv_dim])
              for i in range(cfg.num_layers)]
    t_len = g.op("Shape", tokens)
    n_past = g.op("Slice", g.op("Shape", past_k[0]), g.const([0]), g.const([1]))

    emb = weights("token_embd.weight")  # [V, d]
    if quant == "int8":
        x = g.embed_int8(emb, tokens, "embed")
    else:
        x = g.op("Gather", g.weight("embed.weight", emb), tokens, axis=0)
    if not cfg.tied_output:
        del emb

    factors = weights("rope_freqs.weight") if has("rope_freqs.weight") else None
    cos, sin = (g.op("Unsqueeze", g.op("Gather", g.weight(f"rope.{nm}", tab), positions, axis=0),
                     g.const([1]))
                for nm, tab in zip(("cos", "sin"), rope_tables(cfg, capacity, factors)))

    # The mask over absolute cache columns for the grouped score rows (as Gemma's global one).
    group_shape = g.op("Concat", t_len, g.const([group]), axis=0)
    pos = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", positions, g.const([1])), group_shape),
               g.const([-1, 1]))
    past_cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", n_past), g.const(1)),
                     g.const([0]))
    hidden_new = g.op("Not", g.op("Reshape", g.op("Expand", g.op("Unsqueeze", visible,
                                                                 g.const([1])),
                                                  g.op("Concat", group_shape, t_len, axis=0)),
                                  g.op("Concat", g.const([-1]), t_len, axis=0)))
    mask = g.op("Where", g.op("Concat", g.op("Greater", past_cols, pos), hidden_new, axis=1),
                g.const(-np.inf, np.float32), g.const(0.0, np.float32))
    scale = np.float32(hd ** -0.5)

    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        if progress:
            progress(f"layer {i + 1}/{cfg.num_layers}")
        h = _rms_norm(g, x, weights(p + "attn_norm.weight"), f"l{i}.attn_norm", eps)
        # The query scale is folded into the query rows (a power of two for 64-wide heads).
        w_qkv = np.concatenate([unpermute(weights(p + "attn_q.weight"), heads) * scale,
                                unpermute(weights(p + "attn_k.weight"), kvh),
                                weights(p + "attn_v.weight")], axis=0)
        qkv = linear(h, w_qkv, f"l{i}.qkv")
        del w_qkv
        q, k, v = g.op("Split", qkv, g.const([q_dim, kv_dim, kv_dim]), axis=-1, n_out=3)
        q = _rope(g, g.op("Reshape", q, g.const([0, heads, hd])), cos, sin, hd // 2)
        k = g.op("Reshape", _rope(g, g.op("Reshape", k, g.const([0, kvh, hd])), cos, sin,
                                  hd // 2), g.const([0, kv_dim]))
        g.output(k, f"new_k_{i}", TensorProto.FLOAT, ["T", kv_dim])
        g.output(v, f"new_v_{i}", TensorProto.FLOAT, ["T", kv_dim])
        k_all = g.op("Concat", past_k[i], k, axis=0)
        v_all = g.op("Concat", past_v[i], v, axis=0)
        qg = g.op("Reshape", g.op("Transpose", g.op("Reshape", q, g.const([0, kvh, group, hd])),
                                  perm=[1, 0, 2, 3]), g.const([kvh, -1, hd]))
        kt = g.op("Transpose", g.op("Reshape", k_all, g.const([0, kvh, hd])), perm=[1, 2, 0])
        vh = g.op("Transpose", g.op("Reshape", v_all, g.const([0, kvh, hd])), perm=[1, 0, 2])
        probs = g.op("Softmax", g.op("Add", g.op("MatMul", qg, kt), mask), axis=-1)
        ctx = g.op("MatMul", probs, vh)
        ctx = g.op("Reshape", g.op("Transpose", g.op("Reshape", ctx, g.const([kvh, -1, group, hd])),
                                   perm=[1, 0, 2, 3]), g.const([0, q_dim]))
        x = g.op("Add", x, linear(ctx, weights(p + "attn_output.weight"), f"l{i}.o"))

        h = _rms_norm(g, x, weights(p + "ffn_norm.weight"), f"l{i}.ffn_norm", eps)
        w_gu = np.concatenate([weights(p + "ffn_gate.weight"), weights(p + "ffn_up.weight")],
                              axis=0)
        gu = linear(h, w_gu, f"l{i}.gate_up")
        del w_gu
        gate, up = g.op("Split", gu, g.const([cfg.intermediate_size] * 2), axis=-1, n_out=2)
        silu = g.op("Mul", gate, g.op("Sigmoid", gate))
        x = g.op("Add", x, linear(g.op("Mul", silu, up), weights(p + "ffn_down.weight"),
                                  f"l{i}.down"))

    start = g.op("Max", g.op("Sub", t_len, logit_rows), g.const([0]))
    x = g.op("Slice", x, start, t_len, g.const([0]))
    x = _rms_norm(g, x, weights("output_norm.weight"), "final_norm", eps)
    if cfg.tied_output:
        logits = (linear(x, emb, "embed") if quant == "int8"
                  else g.op("Gemm", x, "embed.weight", transB=1))
    else:
        logits = linear(x, weights("output.weight"), "lm_head")
    g.output(logits, "logits", TensorProto.FLOAT, ["R", cfg.vocab_size])
    return g.model()
