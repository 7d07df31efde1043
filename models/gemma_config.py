"""Gemma 3's architecture as read from GGUF metadata (plus the facts the file leaves out).

The GGUF carries one RoPE base (``rope.freq_base``, the global layers' 1e6) and the sliding
window size, but not the local layers' base nor the local/global pattern; llama.cpp takes them
from Gemma 3's architecture (local base 10000, every sixth layer global). We read the keys when
a file has them and fall back to those values otherwise.

The query scale is ``head_dim ** -0.5`` (Gemma 3's ``query_pre_attn_scalar`` equals the head
size for this model); the graph folds it into the query norm's weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from as2d.models.decoder_graph import HeadShapes
from as2d.models.gguf_reader import GGUFError, GGUFModel, check_tensors, layout

ARCH = "gemma3"
# Gemma 3 facts that llama.cpp hard-codes rather than reading from the file.
DEFAULT_LOCAL_ROPE_BASE = 10_000.0
DEFAULT_GLOBAL_EVERY = 6  # layers 5, 11, 17, ... attend globally


@dataclass(frozen=True)
class GemmaConfig(HeadShapes):
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
    tied_output: bool = True  # the output projection is the embedding (no output.weight)

    def to_dict(self) -> dict:
        """The manifest's ``config`` field, with the architecture named."""
        return {**super().to_dict(), "architecture": ARCH}


def gemma_config(m: GGUFModel) -> GemmaConfig:
    """Read the architecture from the GGUF metadata (falling back to Gemma 3's fixed facts)."""
    arch = m.require("general.architecture")
    if arch != ARCH:
        raise GGUFError(f"{m.path.name}: architecture {arch!r}, expected {ARCH!r} (Gemma 3)")
    a = f"{arch}."
    hidden, heads, kv_heads, head_dim, layers, trained = layout(m, a)
    if m.count(a + "attention.value_length", head_dim) != head_dim:
        raise GGUFError("key and value head sizes differ; not a Gemma 3 layout")
    check_tensors(m, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                  layers=layers)
    every = m.count(a + "attention.sliding_window_pattern", DEFAULT_GLOBAL_EVERY)
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
        intermediate_size=m.count(a + "feed_forward_length"),
        rms_eps=float(m.meta(a + "attention.layer_norm_rms_epsilon", 1e-6)),
        rope_global_base=float(m.meta(a + "rope.freq_base", 1_000_000.0)),
        rope_local_base=float(m.meta(a + "rope.local.freq_base", DEFAULT_LOCAL_ROPE_BASE)),
        rope_global_scale=factor,
        sliding_window=int(m.meta(a + "attention.sliding_window", 512)),
        layer_types=types,
        # llama.cpp's rule: the 27B (62 layers) scales queries by (d / heads)^-0.5, every
        # other size by head_dim^-0.5 (Gemma 3's query_pre_attn_scalar).
        query_scale=float(hidden // heads if layers == 62 else head_dim) ** -0.5,
        embed_scale=float(np.float32(math.sqrt(hidden))),
        trained_context=trained,
        tied_output="output.weight" not in m.tensors,
    )
