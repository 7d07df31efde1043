"""Write a small decoder-only LLM in the Hugging Face ONNX layout (as optimum exports it), for
tests: kept out of the wheel.

``as2d ask --llm PATH`` loads such folders (:mod:`as2d.runtime.llm.hf_lm`). No model hub is
reachable here, so this module produces the layout itself, for tests and for trying the path
end to end:
a GPT-style decoder with grouped-query attention and learned positions, random (seeded)
weights, written with :mod:`as2d.models.graph`, beside a ``tokenizer.json`` (a byte-level BPE
trained on a given text), ``config.json``, ``generation_config.json`` and
``tokenizer_config.json``.

The graph follows optimum's contract for ``model.onnx`` with past:

* inputs ``input_ids [batch, seq]``, ``attention_mask [batch, past + seq]``,
  ``position_ids [batch, seq]``, ``past_key_values.N.key/value [batch, kv_heads, past, head_dim]``;
* outputs ``logits [batch, seq, vocab]``, ``present.N.key/value [batch, kv_heads, past + seq,
  head_dim]``.

``row_exact=False`` builds one projection with a single activation scale for the whole pass
(onnxruntime's ``DynamicQuantizeMatMul``), as dynamically quantised exports do: then a token's
logits depend on the other tokens of the pass, which the runtime's load-time check must catch.
Batch 1 is assumed inside the graph (as2d decodes one sequence).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from onnx import TensorProto

from as2d.models.graph import Graph, save_model

SPECIALS = ("<unk>", "<s>", "</s>")


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 0  # set from the tokenizer
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 2048

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def train_tokenizer(texts: list[str], vocab_size: int = 400):
    """A byte-level BPE (GPT-2 style) trained on ``texts``, with <unk>, <s>, </s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def build_graph(cfg: TinyConfig, seed: int = 0, row_exact: bool = True):
    rng = np.random.default_rng(seed)
    d, heads, kvh, hd = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                         cfg.head_dim)
    group = heads // kvh
    kv_dim = kvh * hd

    def w(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or 1.0 / np.sqrt(shape[-1]))).astype(
            np.float32)

    g = Graph("tiny_decoder")
    ids = g.input("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = g.input("attention_mask", TensorProto.INT64, ["batch", "total"])
    pos_ids = g.input("position_ids", TensorProto.INT64, ["batch", "seq"])
    past = [(g.input(f"past_key_values.{i}.key", TensorProto.FLOAT, ["batch", kvh, "past", hd]),
             g.input(f"past_key_values.{i}.value", TensorProto.FLOAT, ["batch", kvh, "past", hd]))
            for i in range(cfg.num_hidden_layers)]

    flat_ids = g.op("Reshape", ids, g.const([-1]))  # batch 1: [S]
    flat_pos = g.op("Reshape", pos_ids, g.const([-1]))
    x = g.op("Add", g.op("Gather", g.weight("wte", w(cfg.vocab_size, d, scale=0.5)), flat_ids,
                         axis=0),
             g.op("Gather", g.weight("wpe", w(cfg.max_position_embeddings, d, scale=0.1)),
                  flat_pos, axis=0))  # [S, d]

    # Additive mask [G*S, T]: causal by position, and attention_mask's padding.
    s_len = g.op("Shape", flat_ids)
    total = g.op("Shape", g.op("Reshape", mask, g.const([-1])))
    n_past = g.op("Sub", total, s_len)
    cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", total), g.const(1)),
                g.const([0]))  # [1, T]
    rows = g.op("Unsqueeze", g.op("Add", g.op("Range", g.const(0), g.op("Squeeze", s_len),
                                              g.const(1)), n_past), g.const([1]))  # [S, 1]
    neg, zero = g.const(-1e9, np.float32), g.const(0.0, np.float32)
    causal = g.op("Where", g.op("Greater", cols, rows), neg, zero)  # [S, T]
    pad = g.op("Mul", g.op("Sub", g.const(1.0, np.float32),
                           g.op("Cast", g.op("Reshape", mask, g.const([1, -1])),
                                to=TensorProto.FLOAT)), neg)  # [1, T]
    add_mask = g.op("Tile", g.op("Add", causal, pad), g.const([group, 1]))  # [G*S, T]

    def ln(x, prefix):
        return g.layer_norm(x, np.ones(d, np.float32) + w(d, scale=0.05),
                            w(d, scale=0.05), prefix)

    for i in range(cfg.num_hidden_layers):
        h = ln(x, f"l{i}.ln1")
        quant = "int8-tensor" if (not row_exact and i == 0) else "fp32"
        q = g.linear(h, w(heads * hd, d), None, f"l{i}.q", quant)
        k = g.linear(h, w(kv_dim, d), None, f"l{i}.k")
        v = g.linear(h, w(kv_dim, d), None, f"l{i}.v")
        # [S, kvh, hd] -> [1, kvh, S, hd]: this pass's keys/values in the cache layout.
        k4 = g.op("Unsqueeze", g.op("Transpose", g.op("Reshape", k, g.const([0, kvh, hd])),
                                    perm=[1, 0, 2]), g.const([0]))
        v4 = g.op("Unsqueeze", g.op("Transpose", g.op("Reshape", v, g.const([0, kvh, hd])),
                                    perm=[1, 0, 2]), g.const([0]))
        k_all = g.op("Concat", past[i][0], k4, axis=2)
        v_all = g.op("Concat", past[i][1], v4, axis=2)
        g.output(k_all, f"present.{i}.key", TensorProto.FLOAT, ["batch", kvh, "total", hd])
        g.output(v_all, f"present.{i}.value", TensorProto.FLOAT, ["batch", kvh, "total", hd])
        # Grouped queries: the `group` heads sharing a key/value head are rows of one product
        # ([kvh, G*S, hd] · [kvh, hd, T]), so even a one-token pass multiplies ≥ 2 rows.
        qg = g.op("Reshape", g.op("Transpose", g.op("Reshape", q, g.const([0, kvh, group, hd])),
                                  perm=[1, 2, 0, 3]), g.const([kvh, -1, hd]))  # rows (g, s)
        kt = g.op("Transpose", g.op("Squeeze", k_all, g.const([0])), perm=[0, 2, 1])
        scores = g.op("Mul", g.op("MatMul", qg, kt), g.const(1.0 / np.sqrt(hd), np.float32))
        probs = g.op("Softmax", g.op("Add", scores, add_mask), axis=-1)
        ctx = g.op("MatMul", probs, g.op("Squeeze", v_all, g.const([0])))  # [kvh, G*S, hd]
        ctx = g.op("Reshape", g.op("Transpose", g.op("Reshape", ctx, g.const([kvh, group, -1, hd])),
                                   perm=[2, 0, 1, 3]), g.const([0, heads * hd]))
        x = g.op("Add", x, g.linear(ctx, w(d, heads * hd), None, f"l{i}.o"))
        h = g.gelu(g.linear(ln(x, f"l{i}.ln2"), w(cfg.intermediate_size, d), None, f"l{i}.up"))
        x = g.op("Add", x, g.linear(h, w(d, cfg.intermediate_size), None, f"l{i}.down"))
    x = ln(x, "ln_f")
    logits = g.linear(x, w(cfg.vocab_size, d, scale=2.0 / np.sqrt(d)), None, "lm_head")
    g.output(g.op("Unsqueeze", logits, g.const([0])), "logits", TensorProto.FLOAT,
             ["batch", "seq", cfg.vocab_size])
    return g.model()


def export_tiny_decoder(folder: str | Path, texts: list[str], cfg: TinyConfig | None = None,
                        seed: int = 0, row_exact: bool = True, vocab_size: int = 400,
                        chat_template: str | None = None) -> Path:
    """Write the whole Hugging Face ONNX folder; returns its path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(texts, vocab_size)
    tok.save(str(out / "tokenizer.json"))
    cfg = cfg or TinyConfig()
    cfg = TinyConfig(**{**asdict(cfg), "vocab_size": tok.get_vocab_size()})
    save_model(build_graph(cfg, seed, row_exact), out / "model.onnx")
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    config = dict(asdict(cfg), model_type="as2d-tiny", architectures=["As2dTinyForCausalLM"],
                  head_dim=cfg.head_dim, bos_token_id=bos, eos_token_id=eos, use_cache=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": bos, "eos_token_id": [eos], "do_sample": False}, indent=2) + "\n")
    tcfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
            "model_max_length": cfg.max_position_embeddings}
    if chat_template:
        tcfg["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    return out
