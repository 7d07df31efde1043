"""The model families as2d converts from GGUF, read into one :class:`DecoderConfig`.

Each family's facts come from the file's metadata where llama.cpp's converter writes them and,
where llama.cpp hard-codes them instead, from the same rule llama.cpp applies (noted at each):

* ``llama`` (SmolLM, TinyLlama, Llama 2/3): q/k rows permuted for adjacent-pair RoPE; linear
  RoPE scaling or Llama 3.1's per-frequency factors (``rope_freqs.weight``).
* ``qwen2`` (Qwen2, Qwen2.5): q/k/v biases. ``qwen3``: q/k RMSNorm per head, no biases.
* ``phi3`` (Phi-3, Phi-3.5 mini): fused ``attn_qkv`` and gate/up. llama.cpp ignores the
  sliding window Phi-3 files declare (its converter does not describe it correctly), and so
  does this one, so that answers match what llama.cpp and Ollama users get. LongRoPE files
  (the 128k models: ``rope_factors_short``/``_long``, ``rope.scaling.attn_factor``) convert
  with the short factors, for a context up to the original one (4096).
* ``gemma2``: √d embedding scale, GELU-tanh, post-norms, soft-capped attention scores and
  logits (50 and 30 unless the file says), a sliding window on even layers (0, 2, …), the
  query scale ``head_dim^-0.5`` except the 27B's ``(d/heads)^-0.5`` (llama.cpp's rule).
* ``gemma3``: :mod:`as2d.models.gemma_config` (also the catalog's answering model).
"""

from __future__ import annotations

import math

import numpy as np

from as2d.models.decoder_graph import DecoderConfig
from as2d.models.gemma_config import gemma_config
from as2d.models.gemma_graph import decoder_config as gemma3_decoder_config
from as2d.models.gguf_reader import MAX_CONTEXT, GGUFError, GGUFModel, check_tensors, layout

FAMILIES = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "phi3": "Phi-3",
            "gemma2": "Gemma 2", "gemma3": "Gemma 3"}
# Families whose GGUFs exist but whose graphs this converter does not build.
OTHER_FAMILIES = {"gemma": "Gemma (1)", "mistral3": "Mistral 3", "qwen2moe": "Qwen2-MoE",
                  "qwen3moe": "Qwen3-MoE", "phi2": "Phi-2", "gemma3n": "Gemma 3n",
                  "gemma4": "Gemma 4", "phimoe": "Phi-3.5-MoE"}


def describe(arch: str) -> str:
    return FAMILIES.get(arch) or OTHER_FAMILIES.get(arch) or arch


def decoder_config(m: GGUFModel) -> DecoderConfig:
    """Read a GGUF's architecture; one clear error for a family or variant not handled."""
    arch = str(m.require("general.architecture"))
    if arch == "gemma3":
        return gemma3_decoder_config(gemma_config(m))
    if arch not in FAMILIES:
        raise GGUFError(f"{m.path.name}: a {describe(arch)} model (architecture {arch!r}); "
                        f"this as2d converts {', '.join(FAMILIES.values())} GGUFs")
    a = f"{arch}."
    name = FAMILIES[arch]
    hidden, heads, kv_heads, head_dim, layers, trained = layout(m, a)
    if m.count(a + "attention.value_length", head_dim) != head_dim:
        raise GGUFError(f"key and value head sizes differ; not a {name} layout")
    rope_dims = int(m.meta(a + "rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise GGUFError(f"partial rotary embeddings ({rope_dims} of {head_dim} dimensions) "
                        "are not handled")
    if int(m.meta(a + "expert_count", 0) or 0) > 0:
        raise GGUFError(f"mixture-of-experts {name} models are not handled")
    factors, attn_factor = "rope_freqs.weight", 1.0
    if arch == "phi3" and "rope_factors_short.weight" in m.tensors:
        # LongRoPE: the short factors up to the original context, the long ones past it
        # (transformers and llama.cpp switch alike). A bundle holds at most the original
        # context, so the short factors are the only ones it needs.
        original = m.count(a + "rope.scaling.original_context_length", 0)
        if not 0 < original <= MAX_CONTEXT:
            raise GGUFError("a Phi-3 LongRoPE file without rope.scaling.original_context_length")
        factors, trained = "rope_factors_short.weight", min(trained or original, original)
        attn_factor = float(m.meta(a + "rope.scaling.attn_factor", 1.0))
    scaling = str(m.meta(a + "rope.scaling.type", "none"))
    if scaling not in ("none", "linear"):
        raise GGUFError(f"RoPE scaling {scaling!r} is not handled (none or linear are)")
    factor = float(m.meta(a + "rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
    check_tensors(m, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                  layers=layers)
    vocab = len(m.require("tokenizer.ggml.tokens"))
    emb = m.tensors.get("token_embd.weight")
    if emb is None or emb.shape != (hidden, vocab):
        raise GGUFError(f"token_embd.weight is {list(emb.shape) if emb else 'missing'}, "
                        f"expected [{hidden}, {vocab}]")
    base = float(m.meta(a + "rope.freq_base", 10_000.0))
    gemma = arch == "gemma2"
    if gemma:
        window = int(m.meta(a + "attention.sliding_window", 4096))
        types = tuple("local" if i % 2 == 0 else "global" for i in range(layers))
    else:
        window, types = 0, ("global",) * layers
    scale_dim = hidden // heads if gemma and layers == 46 else head_dim
    return DecoderConfig(
        architecture=arch, vocab_size=vocab, hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=m.count(a + "feed_forward_length"),
        rms_eps=float(m.meta(a + "attention.layer_norm_rms_epsilon", 1e-6 if gemma else 1e-5)),
        rope_base=base, rope_local_base=base, rope_scale=factor, layer_types=types,
        sliding_window=window, query_scale=float(scale_dim) ** -0.5,
        embed_scale=float(np.float32(math.sqrt(hidden))) if gemma else 1.0,
        attn_softcap=float(m.meta(a + "attn_logit_softcapping", 50.0)) if gemma else 0.0,
        final_softcap=float(m.meta(a + "final_logit_softcapping", 30.0)) if gemma else 0.0,
        activation="gelu_tanh" if gemma else "silu",
        permuted_qk=arch == "llama",
        qkv_bias="blk.0.attn_q.bias" in m.tensors or "blk.0.attn_qkv.bias" in m.tensors,
        qk_norm=arch == "qwen3",
        post_norms=gemma,
        tied_output="output.weight" not in m.tensors,
        trained_context=trained, rope_factors=factors, rope_attn_factor=attn_factor)
