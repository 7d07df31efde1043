"""GGUF metadata as untrusted input (issue #45): the architecture's numbers are checked against
each other and against the tensors the file holds before anything is built from them.

Each case is a small, well-formed Qwen2 GGUF (two layers, f32 tensors of the shapes its
metadata declares) with one field changed the way a hostile or damaged file would change it.
Every case must end in one :class:`BundleError` line naming the field, in well under a second,
never a ``ZeroDivisionError``, a million-layer graph or a context no model has.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

HIDDEN, HEADS, KV_HEADS, LAYERS, FF = 64, 4, 2, 2, 96
# A byte-level BPE vocabulary: the printable ASCII characters, "Ġ" (a space) and one merge.
TOKENS = [chr(c) for c in range(33, 127)] + ["Ġ", "th", "<|endoftext|>"]
VOCAB = len(TOKENS)


def write_qwen2(path: Path, **over) -> Path:
    """A tiny Qwen2 GGUF; ``over`` replaces metadata (``head_count=0``) or, for
    ``drop_tensor``/``extra_tensor``, the tensor directory."""
    meta = dict(context_length=256, embedding_length=HIDDEN, block_count=LAYERS,
                feed_forward_length=FF, head_count=HEADS, head_count_kv=KV_HEADS)
    meta.update({k: v for k, v in over.items() if k in meta or k == "key_length"})
    w = gguf.GGUFWriter(str(path), "qwen2")
    for key, value in meta.items():
        field = f"qwen2.attention.{key}" if key.startswith(("head_count", "key_length")) \
            else f"qwen2.{key}"
        if isinstance(value, str):
            w.add_string(field, value)
        elif value >= 1 << 32 or value < 0:
            w.add_int64(field, value)
        else:
            w.add_uint32(field, value)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(TOKENS)
    w.add_token_types([1] * (VOCAB - 1) + [3])
    w.add_token_merges(["t h"])
    w.add_bos_token_id(VOCAB - 1)
    w.add_eos_token_id(VOCAB - 1)
    w.add_add_bos_token(False)
    head_dim = HIDDEN // HEADS
    rng = np.random.default_rng(0)

    def t(*shape):  # numpy order [out, in]
        return rng.standard_normal(shape).astype(np.float32)

    w.add_tensor("token_embd.weight", t(VOCAB, HIDDEN))
    w.add_tensor("output_norm.weight", t(HIDDEN))
    for i in range(over.get("tensor_layers", LAYERS)):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", t(HIDDEN))
        w.add_tensor(p + "attn_q.weight", t(HEADS * head_dim, HIDDEN))
        w.add_tensor(p + "attn_k.weight", t(KV_HEADS * head_dim, HIDDEN))
        w.add_tensor(p + "attn_v.weight", t(KV_HEADS * head_dim, HIDDEN))
        w.add_tensor(p + "attn_output.weight", t(HIDDEN, HEADS * head_dim))
        w.add_tensor(p + "ffn_norm.weight", t(HIDDEN))
        w.add_tensor(p + "ffn_gate.weight", t(FF, HIDDEN))
        w.add_tensor(p + "ffn_up.weight", t(FF, HIDDEN))
        w.add_tensor(p + "ffn_down.weight", t(HIDDEN, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_untouched_file_converts(tmp_path):
    """The baseline the hostile cases change one field of converts (the checks refuse no
    sound file)."""
    from as2d.models.gguf_families import decoder_config
    from as2d.models.gguf_install import install_gguf
    from as2d.models.gguf_reader import GGUFModel

    path = write_qwen2(tmp_path / "ok.gguf")
    cfg = decoder_config(GGUFModel(path))
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (2, 4, 2, 16)
    assert cfg.trained_context == 256
    assert (install_gguf(str(path), "int8", tmp_path / "models").path / "decoder.onnx").is_file()


CASES = {
    "no heads": (dict(head_count=0), "head_count is 0"),
    "negative heads": (dict(head_count=-4), "head_count is -4"),
    "heads not dividing": (dict(head_count=5), "does not divide embedding_length"),
    "kv heads not dividing": (dict(head_count_kv=3), "head_count_kv 3 does not divide"),
    "no kv heads": (dict(head_count_kv=0), "head_count_kv is 0"),
    "a million layers": (dict(block_count=10**6), "block_count is 1000000"),
    "fewer layers": (dict(block_count=1), "block_count is 1 but the file holds layers 0-1"),
    "missing layer tensors": (dict(tensor_layers=1), "block_count is 2"),
    "no layers": (dict(block_count=0), "block_count is 0"),
    "huge context": (dict(context_length=2**31), "context_length is 2147483648"),
    "negative context": (dict(context_length=-1), "context_length is -1"),
    "huge embedding": (dict(embedding_length=2**40), "embedding_length is 1099511627776"),
    "lying head size": (dict(key_length=32), "attn_q.weight is [64, 64]"),
    "text for a count": (dict(block_count="two"), "'qwen2.block_count' is 'two'"),
    "no feed-forward": (dict(feed_forward_length=0), "feed_forward_length is 0"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_metadata_is_one_line_before_any_work(case, tmp_path):
    from as2d.models.bundle import BundleError
    from as2d.models.gguf_install import install_gguf

    over, words = CASES[case]
    path = write_qwen2(tmp_path / f"{case.replace(' ', '-')}.gguf", **over)
    t0 = time.perf_counter()
    with pytest.raises(BundleError) as exc:
        install_gguf(str(path), "int8", tmp_path / "models")
    took = time.perf_counter() - t0
    msg = str(exc.value)
    print(f"{case}: {msg} ({took:.2f} s)")
    assert words in msg and "\n" not in msg and path.name in msg
    assert took < 5, took  # refused from the header: nothing converted
    assert not any((tmp_path / "models").rglob("*.onnx"))
