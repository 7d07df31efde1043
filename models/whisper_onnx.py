"""Build ONNX graphs for Whisper from CTranslate2 weights (no torch needed).

Two graphs per model, shaped for speculative decoding:

``encoder.onnx``
    ``mel [1, n_mels, frames]`` → for every decoder layer ``cross_k_i [H, dh, S]`` and
    ``cross_v_i [H, S, dh]``. The cross-attention keys and values are computed once per window,
    already split into heads (keys pre-transposed), so a decoder step only reads them.
    ``frames`` may be shorter than 3000: a drafter may encode just the audio that is there.

``decoder.onnx``
    ``tokens [T]`` plus, per layer, ``past_k_i``/``past_v_i [n, d]`` (the self-attention cache
    of the ``n`` tokens already decoded) and the window's cross keys/values → ``logits [R, V]``
    of the last ``R = min(logit_rows, T)`` tokens (optional input; all of them by default)
    and ``new_k_i``/``new_v_i [T, d]``. ``T >= 1`` new tokens run in one pass with a causal
    mask, which is what verification needs; the caller owns the cache and appends the new
    rows, so dropping rejected tokens is only a change of length.

Every op in the decoder computes each row independently of the others (per-row int8
activation scales, see :meth:`as2d.models.graph.Graph.linear`), so one pass over ``k`` tokens gives
the same logits, bit for bit, as ``k`` single-token passes: speculative decoding stays lossless.

int8 decoders compute the logits in two steps (:func:`_refined_logits`): the int8 output
projection over the whole vocabulary, then each row's ``REFINE_TOP`` largest logits again as
``x · e_v`` in fp32 from a 16-bit copy of the embedding, written back into the row. The int8
projection was most of int8's distance from fp32 (``scripts/int8_attribution.py``); the few
logits that decide the next token, and that the timestamp rules and log-probabilities read, no
longer carry the projection's int8 rounding (of the hidden state and of the table), for the
price of a TopK and ``k`` dot products a row. The input embedding is read from the same copy.

int8 decoders (not the drafters' ``int8-tensor`` ones) also attend to the audio in int8
(:class:`Cross`): the window's keys and values arrive as int8 with a scale per head and frame
(keys) or per head and channel (values), quantised once per window by the runtime
(:mod:`as2d.runtime.whisper.cross`), and both products of cross-attention are integer products.
Reading the window's fp32 keys and values was half of every decoder pass (Whisper base, one
row, one thread: 10.6 ms against 5.5 ms with a 10-frame window); in int8 a quarter of the bytes
are read. Integer products are exact (through the int8 twin where a CPU's uint8 × int8 kernel
saturates, :mod:`as2d.runtime.int8_exact`), so each row stays independent of the others as
before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from as2d.models.ct2 import CT2FormatError, CT2Model
from as2d.models.graph import MS_DOMAIN, Graph

# Logits of each row recomputed from a 16-bit copy of the embedding in int8 decoders (not in
# the drafters' "int8-tensor" ones; 0: none), by measurement (scripts/int8_attribution.py,
# Whisper base, every window of the real clips, teacher-forced against fp32): mean KL from fp32
# 0.0024 → 0.00105 (top 4), 0.00092 (top 8), 0.00085 (top 16); an fp32 copy measured the same
# as fp16 at twice the size.
REFINE_TOP = 8
REFINE_DTYPE = np.float16
# The input embedding is read from that copy too, not from the int8 one: as accurate (KL
# 0.00097 against 0.00092, within noise) and faster, a contiguous row per token instead of a
# strided column of the int8 table (8 tokens: 12 µs against 122 µs on one thread), which
# pays back part of the refinement's TopK.
EMBED_REFINED = True


def whisper_dims(m: CT2Model) -> dict[str, int]:
    """Model dimensions, named as openai-whisper names them (written to the manifest)."""
    if m.spec != "WhisperSpec":
        raise CT2FormatError(f"expected a Whisper model, found spec {m.spec!r}")
    emb = m.get("decoder/embeddings/weight")
    return dict(
        n_mels=int(m.get("encoder/conv1/weight").shape[1]),
        n_audio_ctx=int(m.get("encoder/position_encodings/encodings").shape[0]),
        n_audio_state=int(m.get("encoder/conv1/weight").shape[0]),
        n_audio_head=m.scalar("encoder/num_heads"),
        n_audio_layer=m.layer_count("encoder"),
        n_vocab=int(emb.shape[0]),
        n_text_ctx=int(m.get("decoder/position_encodings/encodings").shape[0]),
        n_text_state=int(emb.shape[1]),
        n_text_head=m.scalar("decoder/num_heads"),
        n_text_layer=m.layer_count("decoder"),
    )


def _split_heads(g: Graph, x: str, heads: int, perm: list[int]) -> str:
    """[S, d] → [S, H, dh] → transposed by ``perm``."""
    return g.op("Transpose", g.op("Reshape", x, g.const([0, heads, -1])), perm=perm)


def _merge_heads(g: Graph, x: str) -> str:
    """[H, T, dh] → [T, H*dh]."""
    return g.op("Reshape", g.op("Transpose", x, perm=[1, 0, 2]), g.const([0, -1]))


def _attend(g: Graph, q: str, k_t: str, v: str, mask: str | None) -> str:
    """softmax(q·kᵀ + mask)·v with heads first; q is pre-scaled, k is pre-transposed."""
    scores = g.op("MatMul", q, k_t)
    if mask is not None:
        scores = g.op("Add", scores, mask)
    return g.op("MatMul", g.op("Softmax", scores, axis=-1), v)


# Decoders whose cross-attention runs in int8 (Cross). Not the drafters' ("int8-tensor"): they
# decode one row at a time, where onnxruntime's fp32 product of one row (no zero row pads it
# there) reads the window as fast (tiny.en, one thread: 3.6 ms a step either way), and their
# windows then need no quantising.
CROSS_INT8 = ("int8",)


@dataclass(frozen=True)
class Cross:
    """One decoder layer's view of the window: keys ``k [H, dh, S]`` (pre-transposed) and
    values ``v [H, S, dh]``, as fp32 inputs, or (``k_scale``/``v_scale`` set) as int8 inputs
    with their scales: ``k_scale [H, 1, S]`` (a head's frame), ``v_scale [H, 1, dh]`` (a head's
    channel).

    In int8 each product quantises its left operand per row (the queries of a head to int8
    around 128, as the linear layers do; the attention weights, which lie in [0, 1], to uint8 of
    the row's largest), multiplies in integers and scales back: one row's result never depends
    on another row, and an exact integer product is the same whatever the rows beside it (the
    twin keeps it exact where the uint8 × int8 kernel saturates). Measured, Whisper base
    teacher-forced on every window of 15 real clips against fp32 (scripts/int8_attribution.py):
    mean KL 0.00104 nats/token against 0.00093 with fp32 attention to the audio (argmax flips
    3 and 0 of 439); the word error rate of the 12 referenced local clips unchanged. int8 keys
    with fp32 values measured no closer (0.00100), and their one-row fp32 product is not
    row-exact.
    """

    k: str
    v: str
    k_scale: str | None = None
    v_scale: str | None = None

    @classmethod
    def inputs(cls, g: Graph, layer: int, heads: int, hd: int, int8: bool) -> Cross:
        if not int8:
            return cls(g.input(f"cross_k_{layer}", TensorProto.FLOAT, [heads, hd, "audio_ctx"]),
                       g.input(f"cross_v_{layer}", TensorProto.FLOAT, [heads, "audio_ctx", hd]))
        return cls(g.input(f"cross_k_{layer}", TensorProto.INT8, [heads, hd, "audio_ctx"]),
                   g.input(f"cross_v_{layer}", TensorProto.INT8, [heads, "audio_ctx", hd]),
                   g.input(f"cross_k_scale_{layer}", TensorProto.FLOAT, [heads, 1, "audio_ctx"]),
                   g.input(f"cross_v_scale_{layer}", TensorProto.FLOAT, [heads, 1, hd]))

    @property
    def int8(self) -> bool:
        return self.k_scale is not None

    def scores(self, g: Graph, q: str) -> str:
        """``q [H, R, dh]`` (pre-scaled) → ``q·kᵀ [H, R, S]``."""
        if not self.int8:
            return g.op("MatMul", q, self.k)
        row_max = g.op("ReduceMax", g.op("Abs", q), axes=[-1], keepdims=1)
        scale = g.op("Max", g.op("Mul", row_max, g.const(1.0 / 127.0, np.float32)),
                     g.const(1e-12, np.float32))
        qq = g.op("Cast", g.op("Add", g.op("Round", g.op("Div", q, scale)),
                               g.const(128.0, np.float32)), to=TensorProto.UINT8)
        s = g.op("MatMulInteger", qq, self.k, g.const(128, np.uint8))
        return g.op("Mul", g.op("Mul", g.op("Cast", s, to=TensorProto.FLOAT), scale),
                    self.k_scale)

    def values(self, g: Graph, weights: str) -> str:
        """Attention ``weights [H, R, S]`` (rows of a softmax) → ``weights·v [H, R, dh]``."""
        if not self.int8:
            return g.op("MatMul", weights, self.v)
        row_max = g.op("ReduceMax", weights, axes=[-1], keepdims=1)
        scale = g.op("Max", g.op("Mul", row_max, g.const(1.0 / 255.0, np.float32)),
                     g.const(1e-12, np.float32))
        wq = g.op("Cast", g.op("Round", g.op("Div", weights, scale)), to=TensorProto.UINT8)
        o = g.op("MatMulInteger", wq, self.v)
        return g.op("Mul", g.op("Mul", g.op("Cast", o, to=TensorProto.FLOAT), scale),
                    self.v_scale)

    def attend(self, g: Graph, q: str) -> str:
        """softmax(q·kᵀ)·v over query rows that never stand alone (one-row fp32 products
        round differently: see :func:`_attend_padded`; integer products do not)."""
        return self.values(g, g.op("Softmax", self.scores(g, q), axis=-1))


def _scaled_q(weight: np.ndarray, bias: np.ndarray, head_dim: int):
    s = np.float32(head_dim ** -0.5)
    return weight * s, bias * s


def _self_attention_weights(m: CT2Model, prefix: str, d: int, head_dim: int):
    w = m.f32(f"{prefix}/linear_0/weight").copy()  # fused [3d, d]: q, k, v
    b = m.f32(f"{prefix}/linear_0/bias").copy()
    w[:d], b[:d] = _scaled_q(w[:d], b[:d], head_dim)
    return w, b


def build_encoder(m: CT2Model, quant: str = "fp32", data_path=None) -> tuple:
    """The encoder graph; ``data_path``: its weights streamed to that file as they are made
    (ONNX external data, see :class:`as2d.models.graph.Graph`)."""
    dims = whisper_dims(m)
    g = Graph("whisper_encoder", data_path=data_path)
    mel = g.input("mel", TensorProto.FLOAT, [1, dims["n_mels"], "frames"])
    x = encoder_body(g, m, mel, quant)
    td, th = dims["n_text_state"], dims["n_text_head"]
    for i in range(dims["n_text_layer"]):
        p = f"decoder/layer_{i}/attention/linear_1"
        w, b = m.f32(f"{p}/weight"), m.f32(f"{p}/bias")  # fused [2d, d]: k, v
        k = g.linear(x, w[:td], None, f"cross{i}.k", quant)
        v = g.linear(x, w[td:], b[td:], f"cross{i}.v", quant)
        g.output(_split_heads(g, k, th, [1, 2, 0]), f"cross_k_{i}", TensorProto.FLOAT,
                 [th, td // th, "audio_ctx"])
        g.output(_split_heads(g, v, th, [1, 0, 2]), f"cross_v_{i}", TensorProto.FLOAT,
                 [th, "audio_ctx", td // th])
    return g.model(), dims


def encoder_body(g: Graph, m: CT2Model, mel: str, quant: str) -> str:
    """Convolutions, positions, layers and final norm: ``mel [1, n_mels, F]`` → ``[F/2, d]``."""
    dims = whisper_dims(m)
    d, heads = dims["n_audio_state"], dims["n_audio_head"]
    hd = d // heads

    x = g.op("Conv", mel, g.weight("conv1.weight", m.f32("encoder/conv1/weight")),
             g.weight("conv1.bias", m.f32("encoder/conv1/bias")), pads=[1, 1], kernel_shape=[3])
    x = g.gelu(x)
    x = g.op("Conv", x, g.weight("conv2.weight", m.f32("encoder/conv2/weight")),
             g.weight("conv2.bias", m.f32("encoder/conv2/bias")), pads=[1, 1], strides=[2],
             kernel_shape=[3])
    x = g.gelu(x)
    x = g.op("Transpose", g.op("Squeeze", x, g.const([0])), perm=[1, 0])  # [S, d]
    n_ctx = g.op("Slice", g.op("Shape", x), g.const([0]), g.const([1]))
    pos = g.op("Slice", g.weight("encoder.positions",
                                  m.f32("encoder/position_encodings/encodings")),
               g.const([0]), n_ctx)
    x = g.op("Add", x, pos)

    for i in range(dims["n_audio_layer"]):
        p = f"encoder/layer_{i}"
        h = g.layer_norm(x, m.f32(f"{p}/self_attention/layer_norm/gamma"),
                         m.f32(f"{p}/self_attention/layer_norm/beta"), f"enc{i}.attn_ln")
        w, b = _self_attention_weights(m, f"{p}/self_attention", d, hd)
        qkv = g.linear(h, w, b, f"enc{i}.qkv", quant)
        q, k, v = g.op("Split", qkv, g.const([d, d, d]), axis=-1, n_out=3)
        # onnxruntime's fused attention: the encoder always sees whole windows, so it needs no
        # row independence, and the fused kernel never writes the [H, S, S] scores to memory.
        batch = g.const([1, -1, d])
        a = g.op("MultiHeadAttention", g.op("Reshape", q, batch), g.op("Reshape", k, batch),
                 g.op("Reshape", v, batch), domain=MS_DOMAIN, num_heads=heads, scale=1.0)
        a = g.op("Reshape", a, g.const([-1, d]))
        x = g.op("Add", x, g.linear(a, m.f32(f"{p}/self_attention/linear_1/weight"),
                                    m.f32(f"{p}/self_attention/linear_1/bias"), f"enc{i}.out",
                                    quant))
        x = _ffn(g, m, x, p, f"enc{i}", quant)
    return g.layer_norm(x, m.f32("encoder/layer_norm/gamma"), m.f32("encoder/layer_norm/beta"),
                        "enc.ln")


def _ffn(g: Graph, m: CT2Model, x: str, p: str, name: str, quant: str) -> str:
    h = g.layer_norm(x, m.f32(f"{p}/ffn/layer_norm/gamma"), m.f32(f"{p}/ffn/layer_norm/beta"),
                     f"{name}.ffn_ln")
    h = g.gelu(g.linear(h, m.f32(f"{p}/ffn/linear_0/weight"), m.f32(f"{p}/ffn/linear_0/bias"),
                        f"{name}.fc1", quant))
    h = g.linear(h, m.f32(f"{p}/ffn/linear_1/weight"), m.f32(f"{p}/ffn/linear_1/bias"),
                 f"{name}.fc2", quant)
    return g.op("Add", x, h)


def build_decoder(m: CT2Model, quant: str = "fp32", exact_rows: bool = True,
                  alignment_heads: list | None = None, data_path=None, *,
                  refine_top: int = REFINE_TOP, refine_dtype=None,
                  embed_refined: bool = EMBED_REFINED, cross_int8: bool | None = None) -> tuple:
    """The decoder graph. ``exact_rows=False`` builds a drafter's decoder: per-tensor int8
    activations and plain attention, faster, but a row's logits then depend on the other rows
    of its pass; only a model used to draft (never to verify) may use it.

    ``alignment_heads`` (``[[layer, head], ...]``, from the model's config) builds the word
    alignment graph instead: the same decoder with one more output, ``cross_qk [A, T,
    audio_ctx]``, the scaled cross-attention scores (before softmax) of those heads in that
    order. It runs once per window over tokens already committed, never to decode.

    ``refine_top``, ``refine_dtype``, ``embed_refined``: the int8 logits' refinement
    (:func:`_refined_logits`) and the input embedding's table (:func:`_embed`); ``cross_int8``:
    int8 attention to the audio (:class:`Cross`; None: as ``quant`` has it). The defaults are
    what bundles get, other values are for measuring."""
    dims = whisper_dims(m)
    d, heads = dims["n_text_state"], dims["n_text_head"]
    hd = d // heads
    g = Graph("whisper_decoder", data_path=data_path)
    tokens = g.input("tokens", TensorProto.INT64, ["T"])
    layers = range(dims["n_text_layer"])
    past_k = [g.input(f"past_k_{i}", TensorProto.FLOAT, ["n", d]) for i in layers]
    past_v = [g.input(f"past_v_{i}", TensorProto.FLOAT, ["n", d]) for i in layers]
    int8_cross = quant in CROSS_INT8 if cross_int8 is None else cross_int8
    cross = [Cross.inputs(g, i, heads, hd, int8_cross) for i in layers]

    t_len = g.op("Shape", tokens)
    n_past = g.op("Slice", g.op("Shape", past_k[0]), g.const([0]), g.const([1]))
    total = g.op("Add", n_past, t_len)
    emb = m.f32("decoder/embeddings/weight")
    x = _embed(g, emb, tokens, quant, embed_refined, refine_dtype)
    attend = _attend_padded if exact_rows else (
        lambda g_, q_, k_, v_, mask_, *_: _attend(g_, q_, k_, v_, _first_rows(g_, mask_, t_len)))
    pos = g.op("Slice", g.weight("decoder.positions",
                                  m.f32("decoder/position_encodings/encodings")),
               n_past, total)
    x = g.op("Add", x, pos)
    # Causal mask for T query rows plus one padding row (see _pad_rows): row i sees cache
    # columns j <= n + i; the padding row sees everything.
    rows = g.op("Unsqueeze", g.op("Add", g.op("Range", g.const(0),
                                               g.op("Add", g.op("Squeeze", t_len), g.const(1)),
                                               g.const(1)), n_past), g.const([1]))
    cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", total), g.const(1)),
                g.const([0]))
    mask = g.op("Where", g.op("Greater", cols, rows), g.const(-np.inf, np.float32),
                g.const(0.0, np.float32))
    heads_of: dict[int, list[int]] = {}
    for layer, head in alignment_heads or []:
        heads_of.setdefault(int(layer), []).append(int(head))
    qks: list[str] = []  # the alignment heads' scores, layer by layer

    for i in range(dims["n_text_layer"]):
        p = f"decoder/layer_{i}"
        h = g.layer_norm(x, m.f32(f"{p}/self_attention/layer_norm/gamma"),
                         m.f32(f"{p}/self_attention/layer_norm/beta"), f"dec{i}.attn_ln")
        w, b = _self_attention_weights(m, f"{p}/self_attention", d, hd)
        qkv = g.linear(h, w, b, f"dec{i}.qkv", quant)
        q, k_new, v_new = g.op("Split", qkv, g.const([d, d, d]), axis=-1, n_out=3)
        g.output(k_new, f"new_k_{i}", TensorProto.FLOAT, ["T", d])
        g.output(v_new, f"new_v_{i}", TensorProto.FLOAT, ["T", d])
        k_all = g.op("Concat", past_k[i], k_new, axis=0)
        v_all = g.op("Concat", past_v[i], v_new, axis=0)
        a = attend(g, _split_heads(g, q, heads, [1, 0, 2]),
                   _split_heads(g, k_all, heads, [1, 2, 0]),
                   _split_heads(g, v_all, heads, [1, 0, 2]), mask, t_len, heads, hd)
        x = g.op("Add", x, g.linear(_merge_heads(g, a),
                                    m.f32(f"{p}/self_attention/linear_1/weight"),
                                    m.f32(f"{p}/self_attention/linear_1/bias"), f"dec{i}.out",
                                    quant))

        h = g.layer_norm(x, m.f32(f"{p}/attention/layer_norm/gamma"),
                         m.f32(f"{p}/attention/layer_norm/beta"), f"dec{i}.cross_ln")
        wq, bq = _scaled_q(m.f32(f"{p}/attention/linear_0/weight"),
                           m.f32(f"{p}/attention/linear_0/bias"), hd)
        q = g.linear(h, wq, bq, f"dec{i}.cross_q", quant)
        qh = _split_heads(g, q, heads, [1, 0, 2])
        if cross[i].int8:
            scores = cross[i].scores(g, qh)
            a = cross[i].values(g, g.op("Softmax", scores, axis=-1))
        else:
            scores = g.op("MatMul", qh, cross[i].k) if heads_of.get(i) else None
            a = attend(g, qh, cross[i].k, cross[i].v, None, t_len, heads, hd)
        if heads_of.get(i):
            qks.append(g.op("Gather", scores, g.const(heads_of[i]), axis=0))
        x = g.op("Add", x, g.linear(_merge_heads(g, a), m.f32(f"{p}/attention/linear_2/weight"),
                                    m.f32(f"{p}/attention/linear_2/bias"), f"dec{i}.cross_out",
                                    quant))
        x = _ffn(g, m, x, p, f"dec{i}", quant)

    # Logits of the last ``logit_rows`` rows only (every row unless it is fed): a window's
    # prompt pass reads the rows from its start-of-transcript token on, not the ~200 rows of
    # the previous text, whose products with the vocabulary were the pass's largest work and
    # buffers. Rows are independent (see above), so the rows kept are the same bits.
    logit_rows = g.input("logit_rows", TensorProto.INT64, [1])
    g.weight(logit_rows, np.array([1 << 30], np.int64))  # its default: an overridable initializer
    x = g.op("Slice", x, g.op("Max", g.op("Sub", t_len, logit_rows), g.const([0])), t_len,
             g.const([0]))
    x = g.layer_norm(x, m.f32("decoder/layer_norm/gamma"), m.f32("decoder/layer_norm/beta"),
                     "dec.ln")
    logits = _logits(g, x, emb, quant, refine_top, refine_dtype)
    g.output(logits, "logits", TensorProto.FLOAT, ["R", dims["n_vocab"]])
    if qks:
        # Heads in layer order (the aligner averages over them: order does not matter).
        g.output(g.op("Concat", *qks, axis=0), "cross_qk", TensorProto.FLOAT,
                 [len(alignment_heads), "T", "audio_ctx"])
    return g.model(), dims


def _refine_table(g: Graph, emb: np.ndarray, dtype=None) -> str:
    """The 16-bit copy of the tied embedding ``[vocab, d]`` (stored once per graph): the
    refined logits and the input embedding read it."""
    dtype = REFINE_DTYPE if dtype is None else dtype
    name = f"decoder.embedding_{np.dtype(dtype).name}"
    if all(t.name != name for t in g.initializers):
        g.weight(name, np.asarray(emb, dtype=dtype))
    return name


def _embed(g: Graph, emb: np.ndarray, tokens: str, quant: str, refined: bool,
           refine_dtype=None) -> str:
    """The input embedding of ``tokens``: fp32 graphs read their table; ``refined`` int8 graphs
    the 16-bit copy (exact-rows int8), others the output projection's int8 copy."""
    if quant == "fp32":
        return g.op("Gather", g.weight("decoder.embedding", emb), tokens, axis=0)
    if quant == "int8" and refined:
        table = _refine_table(g, emb, refine_dtype)
        if np.dtype(refine_dtype or REFINE_DTYPE) == np.float32:
            return g.op("Gather", table, tokens, axis=0)
        return g.op("Cast", g.op("Gather", table, tokens, axis=0), to=TensorProto.FLOAT)
    return g.embed_int8(emb, tokens, "decoder.projection")


def _logits(g: Graph, x: str, emb: np.ndarray, quant: str, refine_top: int,
            refine_dtype=None) -> str:
    """``x [R, d]`` → logits ``[R, vocab]`` through the tied embedding: fp32, or int8 with each
    row's top ``refine_top`` logits recomputed (:func:`_refined_logits`)."""
    if quant == "fp32":
        return g.op("Gemm", x, "decoder.embedding", transB=1)
    logits = g.linear(x, emb, None, "decoder.projection", quant)
    if quant != "int8" or refine_top <= 0:
        return logits
    wide = np.dtype(refine_dtype or REFINE_DTYPE) == np.float32
    return _refined_logits(g, x, logits, _refine_table(g, emb, refine_dtype), refine_top, wide)


def _refined_logits(g: Graph, x: str, logits: str, table: str, k: int, wide: bool) -> str:
    """Each row's ``k`` largest int8 logits recomputed as ``x · e_v`` (fp32 ``x``, ``e_v``
    read from ``table``, widened unless ``wide``), written back into the row in place.

    Row by row, so the graph stays row-exact: TopK and ScatterElements work within a row, and
    the products are a batch of one-row MatMuls (``[R, 1, d] · [R, d, k]``), the same kernel call
    per row whatever the number of rows in the pass. Everything downstream (argmax,
    log-probabilities, the timestamp rules, logit filters) reads the refined row."""
    _, idx = g.op("TopK", logits, g.const([k]), axis=-1, n_out=2)  # [R, k]
    rows = g.op("Gather", table, idx, axis=0)  # [R, k, d]
    if not wide:
        rows = g.op("Cast", rows, to=TensorProto.FLOAT)
    exact = g.op("MatMul", g.op("Unsqueeze", x, g.const([1])),
                 g.op("Transpose", rows, perm=[0, 2, 1]))  # [R, 1, k]
    return g.op("ScatterElements", logits, idx, g.op("Squeeze", exact, g.const([1])), axis=1)


def _first_rows(g: Graph, mask: str | None, t_len: str) -> str | None:
    """The causal mask without its padding row (for graphs that do not pad queries)."""
    if mask is None:
        return None
    return g.op("Slice", mask, g.const([0]), t_len, g.const([0]))


def _attend_padded(g: Graph, q: str, k_t: str, v: str, mask: str | None, t_len: str,
                   heads: int, hd: int) -> str:
    """Attention whose matrix products never see a single query row.

    onnxruntime multiplies a one-row left operand by a runtime right operand with a different
    kernel than it uses for two or more rows, and the two round differently. Appending one zero
    query row keeps every call on the multi-row kernel, so a token's result is the same whether
    it is decoded alone or verified together with others. The padding row is dropped after.
    """
    pad = g.const(np.zeros((heads, 1, hd), np.float32), np.float32)
    out = _attend(g, g.op("Concat", q, pad, axis=1), k_t, v, mask)
    return g.op("Slice", out, g.const([0]), t_len, g.const([1]))


def build_beam_decoder(m: CT2Model, quant: str = "fp32", data_path=None, *,
                       refine_top: int = REFINE_TOP, refine_dtype=None,
                  embed_refined: bool = EMBED_REFINED) -> tuple:
    """The decoder graph for beam search: ``B`` hypotheses in one pass, over a shared row pool.

    ``tokens [B, T]`` run after each hypothesis's own past, read from a pool of cached rows:
    ``past_k_i``/``past_v_i [N, d]`` hold every row any hypothesis may need, and
    ``past_index [B, n]`` names, for each hypothesis, the pool row of each of its ``n`` past
    positions. Reordering beams is then a reordering of small index rows: no cache is copied
    when a hypothesis is dropped or forked. Outputs ``logits [B, R, V]`` (the last ``R =
    min(logit_rows, T)`` rows; optional input, all by default) and ``new_k_i``/
    ``new_v_i [B, T, d]`` (the caller writes them into the pool).

    Every operator works row by row exactly as :func:`build_decoder`'s exact-rows graph does
    (per-row int8 activations, a zero query row beside each attention product), so a
    hypothesis's row is the row a batch-1 pass over its sequence computes: the load-time check
    (:func:`as2d.runtime.rows.probe_beams`) makes sure of it on the machine at hand.
    """
    dims = whisper_dims(m)
    d, heads = dims["n_text_state"], dims["n_text_head"]
    hd = d // heads
    g = Graph("whisper_beam_decoder", data_path=data_path)
    tokens = g.input("tokens", TensorProto.INT64, ["B", "T"])
    index = g.input("past_index", TensorProto.INT64, ["B", "n"])
    layers = range(dims["n_text_layer"])
    past_k = [g.input(f"past_k_{i}", TensorProto.FLOAT, ["N", d]) for i in layers]
    past_v = [g.input(f"past_v_{i}", TensorProto.FLOAT, ["N", d]) for i in layers]
    cross = [Cross.inputs(g, i, heads, hd, quant in CROSS_INT8) for i in layers]

    shape = g.op("Shape", tokens)  # [B, T]
    t_len = g.op("Slice", shape, g.const([1]), g.const([2]))
    n_past = g.op("Slice", g.op("Shape", index), g.const([1]), g.const([2]))
    total = g.op("Add", n_past, t_len)
    btd = g.op("Concat", shape, g.const([d]), axis=0)  # [B, T, d]
    bthd = g.op("Concat", shape, g.const([heads, hd]), axis=0)  # [B, T, H, dh]
    flat = g.op("Reshape", tokens, g.const([-1]))
    emb = m.f32("decoder/embeddings/weight")
    x = _embed(g, emb, flat, quant, embed_refined, refine_dtype)
    pos = g.op("Slice", g.weight("decoder.positions",
                                  m.f32("decoder/position_encodings/encodings")),
               n_past, total)
    x = g.op("Reshape", g.op("Add", g.op("Reshape", x, btd), pos), g.const([-1, d]))
    rows = g.op("Unsqueeze", g.op("Add", g.op("Range", g.const(0),
                                               g.op("Add", g.op("Squeeze", t_len), g.const(1)),
                                               g.const(1)), n_past), g.const([1]))
    cols = g.op("Unsqueeze", g.op("Range", g.const(0), g.op("Squeeze", total), g.const(1)),
                g.const([0]))
    mask = g.op("Where", g.op("Greater", cols, rows), g.const(-np.inf, np.float32),
                g.const(0.0, np.float32))
    # One zero query row after each hypothesis's rows (see _attend_padded).
    pad = g.const([0, 0, 0, 0, 0, 0, 1, 0])

    def heads_of(x2d: str, perm: list[int]) -> str:  # [B*T, d] -> [B, T, H, dh] -> perm
        return g.op("Transpose", g.op("Reshape", x2d, bthd), perm=perm)

    def attend(q: str, k_t: str, v: str, mask_: str | None) -> str:
        out = _attend(g, g.op("Pad", q, pad), k_t, v, mask_)  # [B, H, T + 1, dh]
        out = g.op("Slice", out, g.const([0]), t_len, g.const([2]))
        return g.op("Reshape", g.op("Transpose", out, perm=[0, 2, 1, 3]), g.const([-1, d]))

    def cross_attend(q2d: str, c: Cross) -> str:
        # Every hypothesis attends to the same audio: its query rows (with their zero row)
        # are stacked under one another per head, so each head is one product of B * (T + 1)
        # rows, not B products against a broadcast copy of the audio's keys.
        q = g.op("Pad", heads_of(q2d, [0, 2, 1, 3]), pad)  # [B, H, T + 1, dh]
        q = g.op("Reshape", g.op("Transpose", q, perm=[1, 0, 2, 3]), g.const([heads, -1, hd]))
        out = c.attend(g, q)
        out = g.op("Reshape", out, g.op("Concat", g.const([heads]), g.op("Slice", shape,
                                                                            g.const([0]),
                                                                            g.const([1])),
                                        g.const([-1, hd]), axis=0))  # [H, B, T + 1, dh]
        out = g.op("Slice", out, g.const([0]), t_len, g.const([2]))
        return g.op("Reshape", g.op("Transpose", out, perm=[1, 2, 0, 3]), g.const([-1, d]))

    for i in layers:
        p = f"decoder/layer_{i}"
        h = g.layer_norm(x, m.f32(f"{p}/self_attention/layer_norm/gamma"),
                         m.f32(f"{p}/self_attention/layer_norm/beta"), f"dec{i}.attn_ln")
        w, b = _self_attention_weights(m, f"{p}/self_attention", d, hd)
        qkv = g.linear(h, w, b, f"dec{i}.qkv", quant)
        q, k_new, v_new = g.op("Split", qkv, g.const([d, d, d]), axis=-1, n_out=3)
        k_new, v_new = g.op("Reshape", k_new, btd), g.op("Reshape", v_new, btd)
        g.output(k_new, f"new_k_{i}", TensorProto.FLOAT, ["B", "T", d])
        g.output(v_new, f"new_v_{i}", TensorProto.FLOAT, ["B", "T", d])
        k_all = g.op("Concat", g.op("Gather", past_k[i], index, axis=0), k_new, axis=1)
        v_all = g.op("Concat", g.op("Gather", past_v[i], index, axis=0), v_new, axis=1)
        split = g.op("Concat", g.op("Slice", shape, g.const([0]), g.const([1])), total,
                     g.const([heads, hd]), axis=0)  # [B, n + T, H, dh]
        a = attend(heads_of(q, [0, 2, 1, 3]),
                   g.op("Transpose", g.op("Reshape", k_all, split), perm=[0, 2, 3, 1]),
                   g.op("Transpose", g.op("Reshape", v_all, split), perm=[0, 2, 1, 3]), mask)
        x = g.op("Add", x, g.linear(a, m.f32(f"{p}/self_attention/linear_1/weight"),
                                    m.f32(f"{p}/self_attention/linear_1/bias"), f"dec{i}.out",
                                    quant))
        h = g.layer_norm(x, m.f32(f"{p}/attention/layer_norm/gamma"),
                         m.f32(f"{p}/attention/layer_norm/beta"), f"dec{i}.cross_ln")
        wq, bq = _scaled_q(m.f32(f"{p}/attention/linear_0/weight"),
                           m.f32(f"{p}/attention/linear_0/bias"), hd)
        q = g.linear(h, wq, bq, f"dec{i}.cross_q", quant)
        a = cross_attend(q, cross[i])
        x = g.op("Add", x, g.linear(a, m.f32(f"{p}/attention/linear_2/weight"),
                                    m.f32(f"{p}/attention/linear_2/bias"), f"dec{i}.cross_out",
                                    quant))
        x = _ffn(g, m, x, p, f"dec{i}", quant)

    # Each hypothesis's last ``logit_rows`` rows only, as build_decoder's (a prompt pass
    # reads its rows from the start-of-transcript token on).
    logit_rows = g.input("logit_rows", TensorProto.INT64, [1])
    g.weight(logit_rows, np.array([1 << 30], np.int64))  # its default: an overridable initializer
    t_len = g.op("Slice", shape, g.const([1]), g.const([2]))
    x = g.op("Slice", g.op("Reshape", x, btd),
             g.op("Max", g.op("Sub", t_len, logit_rows), g.const([0])), t_len, g.const([1]))
    x = g.op("Reshape", x, g.const([-1, d]))
    x = g.layer_norm(x, m.f32("decoder/layer_norm/gamma"), m.f32("decoder/layer_norm/beta"),
                     "dec.ln")
    logits = _logits(g, x, emb, quant, refine_top, refine_dtype)
    logits = g.op("Reshape", logits, g.op("Concat", g.op("Slice", shape, g.const([0]),
                                                          g.const([1])),
                                          g.const([-1, dims["n_vocab"]]), axis=0))
    g.output(logits, "logits", TensorProto.FLOAT, ["B", "R", dims["n_vocab"]])
    return g.model(), dims
