"""The Gemma 3 decoder as one ONNX graph, built from dequantised GGUF tensors.

The graph itself is :func:`as2d.models.decoder_graph.build_decoder` (one builder for every
family); this module maps :class:`as2d.models.gemma_config.GemmaConfig` onto it and keeps
the contract and the measurements that hold for Gemma.

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

from collections.abc import Callable

import numpy as np
import onnx

from as2d.models.decoder_graph import DEFAULT_CAPACITY, DecoderConfig
from as2d.models.decoder_graph import build_decoder as _build
from as2d.models.decoder_graph import rope_tables as _tables
from as2d.models.gemma_config import ARCH, GemmaConfig

__all__ = ["DEFAULT_CAPACITY", "build_decoder", "decoder_config", "rope_tables"]

WeightSource = Callable[[str], np.ndarray]


def decoder_config(cfg: GemmaConfig) -> DecoderConfig:
    """Gemma 3 in the shared builder's terms: √d embedding scale, GELU-tanh, q/k norms (the
    query scale folded into the q norm), post-norms, local/global RoPE bases."""
    return DecoderConfig(
        architecture=ARCH, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        num_layers=cfg.num_layers, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, intermediate_size=cfg.intermediate_size, rms_eps=cfg.rms_eps,
        rope_base=cfg.rope_global_base, rope_local_base=cfg.rope_local_base,
        rope_scale=cfg.rope_global_scale, layer_types=tuple(cfg.layer_types),
        sliding_window=cfg.sliding_window, query_scale=cfg.query_scale,
        embed_scale=cfg.embed_scale, activation="gelu_tanh", qk_norm=True, post_norms=True,
        tied_output=cfg.tied_output, trained_context=cfg.trained_context)


def rope_tables(cfg: GemmaConfig, capacity: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """``cos``, ``sin·sign`` tables ``[capacity, head_dim]`` of a local or global layer."""
    if kind == "local":
        return _tables(cfg.head_dim, cfg.rope_local_base, capacity)
    return _tables(cfg.head_dim, cfg.rope_global_base, capacity, cfg.rope_global_scale)


def build_decoder(weights: WeightSource, cfg: GemmaConfig, quant: str = "int8",
                  capacity: int = DEFAULT_CAPACITY,
                  progress: Callable[[str], None] | None = None,
                  has: Callable[[str], bool] = lambda n: False) -> onnx.ModelProto:
    """The Gemma 3 decoder graph (see the module docstring for inputs and outputs).

    ``weights(name)`` returns a GGUF tensor as float32 (``GGUFModel.tensor``); each is read
    once and may be freed after its node is built, which keeps conversion memory near one copy
    of the model.
    """
    return _build(weights, decoder_config(cfg), quant, capacity, has, progress)
