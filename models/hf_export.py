"""Export a Whisper model in the Hugging Face ONNX layout (as optimum writes it).

as2d reads this layout (``runtime/hf_whisper.py``) so that users can bring models they already
have. Writing it ourselves lets the tests exercise that reader without a model hub, and lets a
user hand our converted weights to other tools (``as2d models export``).

Layout: ``encoder_model.onnx`` (``input_features [1, n_mels, 3000]`` → ``last_hidden_state``),
``decoder_model.onnx`` (``input_ids``, ``encoder_hidden_states`` → ``logits``, ``present.*``),
``decoder_with_past_model.onnx`` (``input_ids``, ``past_key_values.*`` → ``logits``,
``present.N.decoder.*``) and ``decoder_model_merged.onnx`` (both behind an ``If`` on
``use_cache_branch``); keys/values are ``[1, heads, length, head_dim]``; ``config.json`` and
``tokenizer.json`` beside them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from as2d.models.ct2 import CT2Model
from as2d.models.graph import Graph, save_model
from as2d.models.whisper_onnx import (
    _attend,
    _ffn,
    _merge_heads,
    _scaled_q,
    _self_attention_weights,
    _split_heads,
    encoder_body,
    whisper_dims,
)

F = TensorProto.FLOAT


def _encoder(m: CT2Model):
    dims = whisper_dims(m)
    g = Graph("encoder")
    mel = g.input("input_features", F, [1, dims["n_mels"], 3000])
    x = encoder_body(g, m, mel, "fp32")
    g.output(g.op("Unsqueeze", x, g.const([0])), "last_hidden_state", F,
             [1, dims["n_audio_ctx"], dims["n_audio_state"]])
    return g.model()


def _to_rows(g: Graph, kv: str, d: int) -> str:
    """[1, H, n, dh] → [n, d]."""
    return g.op("Reshape", g.op("Transpose", kv, perm=[0, 2, 1, 3]), g.const([-1, d]))


def _to_heads(g: Graph, rows: str, heads: int, hd: int) -> str:
    """[n, d] → [1, H, n, dh]."""
    return g.op("Transpose", g.op("Reshape", rows, g.const([1, -1, heads, hd])),
                perm=[0, 2, 1, 3])


def _decoder_body(g: Graph, m: CT2Model, ids: str, with_past: bool) -> dict[str, str]:
    """The decoder in HF's conventions; returns output name → value."""
    dims = whisper_dims(m)
    d, heads, layers = dims["n_text_state"], dims["n_text_head"], dims["n_text_layer"]
    hd = d // heads
    tokens = g.op("Reshape", ids, g.const([-1]))
    t_len = g.op("Shape", tokens)
    if with_past:
        n_past = g.op("Slice", g.op("Shape", "past_key_values.0.decoder.key"), g.const([2]),
                      g.const([3]))
    else:
        n_past = g.const([0])
    total = g.op("Add", n_past, t_len)
    emb = m.f32("decoder/embeddings/weight")
    x = g.op("Gather", g.weight("decoder.embedding", emb), tokens, axis=0)
    x = g.op("Add", x, g.op("Slice", g.weight("decoder.positions",
                                                m.f32("decoder/position_encodings/encodings")),
                             n_past, total))
    rows = g.op("Unsqueeze", g.op("Add", g.op("Range", g.const(0), g.op("Squeeze", t_len),
                                               g.const(1)), n_past), g.const([1]))
    cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", total), g.const(1)),
                g.const([0]))
    mask = g.op("Where", g.op("Greater", cols, rows), g.const(-np.inf, np.float32),
                g.const(0.0, np.float32))
    if not with_past:
        hidden = g.op("Squeeze", "encoder_hidden_states", g.const([0]))  # [S, d]
    outs: dict[str, str] = {}
    for i in range(layers):
        p = f"decoder/layer_{i}"
        h = g.layer_norm(x, m.f32(f"{p}/self_attention/layer_norm/gamma"),
                         m.f32(f"{p}/self_attention/layer_norm/beta"), f"dec{i}.attn_ln")
        w, b = _self_attention_weights(m, f"{p}/self_attention", d, hd)
        q, k_new, v_new = g.op("Split", g.linear(h, w, b, f"dec{i}.qkv"), g.const([d, d, d]),
                               axis=-1, n_out=3)
        if with_past:
            k_all = g.op("Concat", _to_rows(g, f"past_key_values.{i}.decoder.key", d), k_new,
                         axis=0)
            v_all = g.op("Concat", _to_rows(g, f"past_key_values.{i}.decoder.value", d), v_new,
                         axis=0)
        else:
            k_all, v_all = k_new, v_new
        outs[f"present.{i}.decoder.key"] = _to_heads(g, k_all, heads, hd)
        outs[f"present.{i}.decoder.value"] = _to_heads(g, v_all, heads, hd)
        a = _attend(g, _split_heads(g, q, heads, [1, 0, 2]),
                    _split_heads(g, k_all, heads, [1, 2, 0]),
                    _split_heads(g, v_all, heads, [1, 0, 2]), mask)
        out = g.linear(_merge_heads(g, a), m.f32(f"{p}/self_attention/linear_1/weight"),
                       m.f32(f"{p}/self_attention/linear_1/bias"), f"dec{i}.out")
        x = g.op("Add", x, out)
        if with_past:
            ck, cv = f"past_key_values.{i}.encoder.key", f"past_key_values.{i}.encoder.value"
        else:
            wkv = m.f32(f"{p}/attention/linear_1/weight")
            bkv = m.f32(f"{p}/attention/linear_1/bias")
            ck = _to_heads(g, g.linear(hidden, wkv[:d], None, f"cross{i}.k"), heads, hd)
            cv = _to_heads(g, g.linear(hidden, wkv[d:], bkv[d:], f"cross{i}.v"), heads, hd)
            outs[f"present.{i}.encoder.key"] = ck
            outs[f"present.{i}.encoder.value"] = cv
        h = g.layer_norm(x, m.f32(f"{p}/attention/layer_norm/gamma"),
                         m.f32(f"{p}/attention/layer_norm/beta"), f"dec{i}.cross_ln")
        wq, bq = _scaled_q(m.f32(f"{p}/attention/linear_0/weight"),
                           m.f32(f"{p}/attention/linear_0/bias"), hd)
        q = g.linear(h, wq, bq, f"dec{i}.cross_q")
        k_t = g.op("Transpose", g.op("Squeeze", ck, g.const([0])), perm=[0, 2, 1])
        v = g.op("Squeeze", cv, g.const([0]))
        a = _attend(g, _split_heads(g, q, heads, [1, 0, 2]), k_t, v, None)
        x = g.op("Add", x, g.linear(_merge_heads(g, a), m.f32(f"{p}/attention/linear_2/weight"),
                                    m.f32(f"{p}/attention/linear_2/bias"), f"dec{i}.cross_out"))
        x = _ffn(g, m, x, p, f"dec{i}", "fp32")
    x = g.layer_norm(x, m.f32("decoder/layer_norm/gamma"), m.f32("decoder/layer_norm/beta"),
                     "dec.ln")
    logits = g.op("Gemm", x, "decoder.embedding", transB=1)
    outs = {"logits": g.op("Unsqueeze", logits, g.const([0])), **outs}
    return outs


def _kv_inputs(g: Graph, dims: dict, kinds=("decoder", "encoder")) -> None:
    heads, hd = dims["n_text_head"], dims["n_text_state"] // dims["n_text_head"]
    for i in range(dims["n_text_layer"]):
        for kind in kinds:
            for kv in ("key", "value"):
                g.input(f"past_key_values.{i}.{kind}.{kv}", F,
                        [1, heads, "past_len" if kind == "decoder" else "enc_len", hd])


def _outputs(g: Graph, outs: dict[str, str]) -> None:
    for name, value in outs.items():
        g.output(value, name, F, None)


def _decoder(m: CT2Model, with_past: bool):
    dims = whisper_dims(m)
    g = Graph("decoder_with_past" if with_past else "decoder")
    ids = g.input("input_ids", TensorProto.INT64, [1, "T"])
    if with_past:
        _kv_inputs(g, dims)
    else:
        g.input("encoder_hidden_states", F, [1, dims["n_audio_ctx"], dims["n_audio_state"]])
    _outputs(g, _decoder_body(g, m, ids, with_past))
    return g.model()


def _merged(m: CT2Model):
    """Both decoders behind an ``If``; the weights are shared outer-scope initializers."""
    dims = whisper_dims(m)
    main = Graph("decoder_merged")
    main.input("input_ids", TensorProto.INT64, [1, "T"])
    main.input("encoder_hidden_states", F, [1, "enc_len", dims["n_audio_state"]])
    _kv_inputs(main, dims)
    cond = main.input("use_cache_branch", TensorProto.BOOL, [1])
    branches, names = [], None
    for with_past, scope in ((True, "past_"), (False, "first_")):
        g = Graph(scope + "branch", scope=scope)
        outs = _decoder_body(g, m, "input_ids", with_past)
        if with_past:  # the encoder keys/values pass through unchanged
            for i in range(dims["n_text_layer"]):
                for kv in ("key", "value"):
                    outs[f"present.{i}.encoder.{kv}"] = g.op(
                        "Identity", f"past_key_values.{i}.encoder.{kv}")
        names = names or list(outs)
        for init in g.initializers:
            if init.name not in {i.name for i in main.initializers}:
                main.initializers.append(init)
        branches.append(helper.make_graph(
            g.nodes, g.name, [], [helper.make_tensor_value_info(outs[n], F, None)
                                  for n in names]))
    main.nodes.append(helper.make_node("If", [cond], names, then_branch=branches[0],
                                       else_branch=branches[1]))
    for n in names:
        main.outputs.append(helper.make_tensor_value_info(n, F, None))
    return main.model()


def export_hf(m: CT2Model, tokenizer_json: Path, out: Path, merged: bool = True,
              split: bool = True) -> Path:
    """Write ``m`` (fp32) to ``out`` in the Hugging Face ONNX layout."""
    dims = whisper_dims(m)
    out.mkdir(parents=True, exist_ok=True)
    save_model(_encoder(m), out / "encoder_model.onnx")
    if split:
        save_model(_decoder(m, False), out / "decoder_model.onnx")
        save_model(_decoder(m, True), out / "decoder_with_past_model.onnx")
    if merged:
        save_model(_merged(m), out / "decoder_model_merged.onnx")
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    config = {
        "model_type": "whisper", "d_model": dims["n_text_state"],
        "encoder_attention_heads": dims["n_audio_head"], "encoder_layers": dims["n_audio_layer"],
        "decoder_attention_heads": dims["n_text_head"], "decoder_layers": dims["n_text_layer"],
        "vocab_size": dims["n_vocab"], "num_mel_bins": dims["n_mels"],
        "max_source_positions": dims["n_audio_ctx"], "max_target_positions": dims["n_text_ctx"],
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out
