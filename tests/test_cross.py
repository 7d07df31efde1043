"""The window's keys and values in int8 (as2d.runtime.whisper.cross, whisper_onnx.Cross).

int8 decoders read the window's cross-attention keys and values quantised once per window; these
tests check the quantisation itself, the form each graph reads, that the int8 attention stays
close to fp32 attention on real speech, and the twin's uint8 feed. That a pass of several rows
still gives each row what a pass of one gives is checked on these graphs by
tests/test_row_invariance.py and the load-time row checks.
"""

from __future__ import annotations

import numpy as np
import pytest

from as2d.runtime.whisper import cross as cross_module
from as2d.runtime.whisper.cross import CrossForm, CrossQuantiser

quantise = CrossQuantiser(1)


def _window(seed: int = 0, heads: int = 4, hd: int = 16, frames: int = 50) -> dict:
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((heads, hd, frames)).astype(np.float32)
    v = rng.standard_normal((heads, frames, hd)).astype(np.float32) * 3
    k[1, :, 7] = 0.0  # a silent frame: scale floor, integers zero
    return {"cross_k_0": k, "cross_v_0": v}


def test_the_kept_graph_is_the_one_onnx_builds() -> None:
    """The quantiser runs stored bytes so that no transcription pays for importing onnx."""
    import base64
    import zlib

    stored = zlib.decompress(base64.b64decode(cross_module._QUANTISER))
    assert stored == cross_module.quantiser_model()


def test_fp32_is_passed_as_it_is() -> None:
    w = _window()
    assert quantise(w, CrossForm.FP32) is w


def test_keys_per_head_and_frame_values_per_head_and_channel() -> None:
    w = _window()
    out = quantise(w, CrossForm.INT8)
    k, ks = out["cross_k_0"], out["cross_k_scale_0"]
    v, vs = out["cross_v_0"], out["cross_v_scale_0"]
    assert k.dtype == v.dtype == np.int8 and ks.dtype == vs.dtype == np.float32
    assert ks.shape == (4, 1, 50) and vs.shape == (4, 1, 16)
    for q, s, x in ((k, ks, w["cross_k_0"]), (v, vs, w["cross_v_0"])):
        assert np.abs(q.astype(np.int32)).max() <= 127
        # Each slice's largest magnitude is ±127; every value within half a step.
        peaks = np.abs(q.astype(np.int32)).max(axis=1)
        loud = np.abs(x).max(axis=1) > 0
        assert (peaks[loud] == 127).all()
        assert (np.abs(q * s - x) <= s * 0.5 + 1e-6).all()
    assert not k[1, :, 7].any() and ks[1, 0, 7] <= 1e-12


def test_uint8_is_the_same_integers_plus_128() -> None:
    w = _window(3)
    signed, unsigned = quantise(w, CrossForm.INT8), quantise(w, CrossForm.UINT8)
    assert unsigned["cross_k_0"].dtype == np.uint8
    for name in ("cross_k_0", "cross_v_0"):
        assert np.array_equal(unsigned[name].astype(np.int16) - 128,
                              signed[name].astype(np.int16))
    for name in ("cross_k_scale_0", "cross_v_scale_0"):
        assert np.array_equal(unsigned[name], signed[name])


def test_a_graph_reading_keys_and_values_apart_is_refused() -> None:
    """No as2d graph reads the keys in one form and the values in another: such a graph is a
    stale or foreign one, refused with a line that says to reinstall."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    def session(v_type: int):
        graph = helper.make_graph(
            [helper.make_node("Cast", ["cross_k_0"], ["k"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["cross_v_0"], ["v"], to=TensorProto.FLOAT)], "g",
            [helper.make_tensor_value_info("cross_k_0", TensorProto.INT8, [2]),
             helper.make_tensor_value_info("cross_v_0", v_type, [2])],
            [helper.make_tensor_value_info("k", TensorProto.FLOAT, [2]),
             helper.make_tensor_value_info("v", TensorProto.FLOAT, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])

    assert CrossForm.of(session(TensorProto.INT8)) is CrossForm.INT8
    with pytest.raises(ValueError, match="reinstall"):
        CrossForm.of(session(TensorProto.FLOAT))


def test_the_form_is_read_off_the_graph(whisper) -> None:
    """Target decoders of int8 bundles attend in int8 (or uint8 where the twin runs); the
    drafters' decoders and fp32 bundles in fp32; the beam graph reads what the decoder reads."""
    target = whisper("tiny.en", "int8", threads=1)
    assert target.cross_form in (CrossForm.INT8, CrossForm.UINT8)
    assert whisper("tiny.en", "int8", threads=1, role="drafter").cross_form is CrossForm.FP32
    assert whisper("tiny.en", "fp32", threads=1).cross_form is CrossForm.FP32
    assert CrossForm.of(target.beam_session()) is target.cross_form


@pytest.mark.slow
def test_int8_attention_stays_close_to_fp32_attention(whisper, librivox, tmp_path) -> None:
    """The same int8 decoder built with fp32 cross-attention, teacher-forced on the int8 one's
    own transcript of real speech: the next token agrees at nearly every position."""
    import as2d.models.whisper_onnx as W
    from as2d.models.catalog import lookup
    from as2d.models.ct2 import load_ct2
    from as2d.models.graph import save_model
    from as2d.models.source_packages import assemble
    from as2d.runtime.audio import load_audio
    from as2d.runtime.sessions import make_session
    from as2d.runtime.whisper.features import LogMel

    model = whisper("tiny.en", "int8", threads=1)
    weights = load_ct2(assemble(lookup("tiny.en").source, tmp_path / "model.bin"))
    graph, _ = W.build_decoder(weights, "int8", data_path=tmp_path / "fp32x.onnx.data",
                               cross_int8=False)
    save_model(graph, tmp_path / "fp32x.onnx")
    fp32x = make_session(tmp_path / "fp32x.onnx", 1)
    assert CrossForm.of(fp32x) is CrossForm.FP32

    tk = model.tokenizer
    agree = total = 0
    for clip in librivox[:3]:
        mel = LogMel(load_audio(clip.path)).window(0)
        raw = model.encoder.run(mel)
        state = model.decoder_state(model.context(raw, mel.shape[-1]))
        seq = list(tk.sot_sequence(None)) + [tk.no_timestamps]
        logits = state.forward(seq)
        while len(seq) < 60 and (nxt := int(np.argmax(logits[-1]))) != tk.eot:
            seq.append(nxt)
            logits = state.forward([nxt])
        model.release(state)
        ours = model.decoder_state(model.context(raw, mel.shape[-1]))
        mine = ours.forward(seq).argmax(-1)
        model.release(ours)
        feed = dict(raw, tokens=np.asarray(seq, np.int64))
        for i in range(model.dims.n_text_layer):
            feed[f"past_k_{i}"] = np.zeros((0, model.dims.n_text_state), np.float32)
            feed[f"past_v_{i}"] = np.zeros((0, model.dims.n_text_state), np.float32)
        theirs = fp32x.run(["logits"], feed)[0].argmax(-1)
        agree += int((mine == theirs).sum())
        total += len(seq)
    assert total > 60
    assert agree / total >= 0.97, (agree, total)


@pytest.mark.slow
def test_the_twin_reads_the_window_as_uint8_and_decodes_the_same(bundle, librivox, tmp_path,
                                                                 monkeypatch) -> None:
    """Where the u8s8 kernel saturates, the target's decoder is loaded as its twin: the window's
    keys and values go in as uint8, and the tokens are those of the int8 graph (bit for bit
    here, where the u8s8 kernel is exact; on a saturating CPU the twin is what runs)."""
    import shutil
    import threading

    from as2d.runtime import int8_exact
    from as2d.runtime.audio import load_audio
    from as2d.runtime.whisper.features import LogMel
    from as2d.runtime.whisper.model import WhisperModel

    if int8_exact.u8s8_saturates():
        pytest.skip("this CPU's u8s8 kernel saturates: the int8 graph is not the reference")
    folder = tmp_path / "tiny.en-int8"
    shutil.copytree(bundle("tiny.en", "int8"), folder,
                    ignore=shutil.ignore_patterns(".*", "*.u8u8-*", "decoder_beam*"))

    def greedy(model: WhisperModel) -> list[list[int]]:
        tk, out = model.tokenizer, []
        for clip in librivox[:2]:
            ctx = model.encode(LogMel(load_audio(clip.path)).window(0))
            state = model.decoder_state(ctx)
            seq = list(tk.sot_sequence(None)) + [tk.no_timestamps]
            logits, n = state.forward(seq), len(seq)
            while len(seq) < n + 40 and (nxt := int(np.argmax(logits[-1]))) != tk.eot:
                seq.append(nxt)
                logits = state.forward([nxt])
            model.release(state)
            out.append(seq)
        return out

    plain = WhisperModel(folder, threads=1, encoder="onnxruntime")
    assert plain.cross_form is CrossForm.INT8
    monkeypatch.setattr(int8_exact, "twins_wanted", lambda: True)
    # "a twin ran" is process state (--stats reports it): this one must not leak out.
    monkeypatch.setattr(int8_exact, "_twinned", threading.Event())
    twin = WhisperModel(folder, threads=1, encoder="onnxruntime")
    assert twin.cross_form is CrossForm.UINT8
    assert greedy(twin) == greedy(plain)
