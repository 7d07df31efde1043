"""``scripts/ct2_to_ggml.py``: the whisper.cpp model file written from a CTranslate2 folder.

whisper.cpp is not installed here or on CI, so its loader cannot judge the file; instead the
file written from the real tiny.en weights is read back by a small reader written here from
whisper.cpp's loader (header, mel filters, vocabulary, tensor records), and checked against
what that loader asks for: every tensor it creates, by name, with its shape and storage type,
nothing else, and the weights themselves (split from CTranslate2's fused projections).
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ct2_to_ggml.py"


def _script():
    spec = importlib.util.spec_from_file_location("ct2_to_ggml", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_ggml(path: Path) -> dict:
    """whisper.cpp's legacy model file, read the way its loader reads it."""
    buf = path.read_bytes()
    pos = 0

    def ints(n: int) -> tuple[int, ...]:
        nonlocal pos
        out = struct.unpack_from(f"<{n}i", buf, pos)
        pos += 4 * n
        return out

    def raw(n: int) -> bytes:
        nonlocal pos
        assert pos + n <= len(buf), "file ends inside a record"
        out = buf[pos:pos + n]
        pos += n
        return out

    (magic,) = struct.unpack_from("<I", buf, 0)
    pos = 4
    keys = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
            "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
    hp = dict(zip(keys, ints(len(keys))))
    n_mel, n_fft = ints(2)
    filters = np.frombuffer(raw(4 * n_mel * n_fft), dtype="<f4").reshape(n_mel, n_fft)
    (count,) = ints(1)
    vocab = [raw(ints(1)[0]) for _ in range(count)]
    tensors: dict[str, tuple[list[int], int, np.ndarray]] = {}
    while pos < len(buf):
        n_dims, name_len, ttype = ints(3)
        assert 0 < n_dims <= 4 and ttype in (0, 1)
        ne = list(ints(n_dims))
        name = raw(name_len).decode("utf-8")
        assert name not in tensors, f"{name} written twice"
        dtype = "<f4" if ttype == 0 else "<f2"
        data = np.frombuffer(raw(int(np.prod(ne)) * (4 if ttype == 0 else 2)), dtype=dtype)
        tensors[name] = (ne, ttype, data.reshape(list(reversed(ne))))
    return {"magic": magic, "hparams": hp, "filters": filters, "vocab": vocab,
            "tensors": tensors}


def expected_tensors(hp: dict) -> dict[str, tuple[list[int], int]]:
    """Name → (ne, type) of every tensor whisper.cpp's loader creates for an f16 model
    (0: float32, 1: float16), from its ``whisper_model_load``."""
    d, mels, a_ctx, t_ctx = hp["n_audio_state"], hp["n_mels"], hp["n_audio_ctx"], hp["n_text_ctx"]
    F32, F16 = 0, 1
    out = {
        "encoder.positional_embedding": ([d, a_ctx], F32),
        "encoder.conv1.weight": ([3, mels, d], F16), "encoder.conv1.bias": ([1, d], F32),
        "encoder.conv2.weight": ([3, d, d], F16), "encoder.conv2.bias": ([1, d], F32),
        "encoder.ln_post.weight": ([d], F32), "encoder.ln_post.bias": ([d], F32),
        "decoder.positional_embedding": ([d, t_ctx], F32),
        "decoder.token_embedding.weight": ([d, hp["n_vocab"]], F16),
        "decoder.ln.weight": ([d], F32), "decoder.ln.bias": ([d], F32),
    }

    def block(prefix: str, cross: bool) -> None:
        attns = ["attn", "cross_attn"] if cross else ["attn"]
        for ln in ["mlp_ln", "attn_ln"] + (["cross_attn_ln"] if cross else []):
            out[f"{prefix}.{ln}.weight"] = ([d], F32)
            out[f"{prefix}.{ln}.bias"] = ([d], F32)
        out[f"{prefix}.mlp.0.weight"] = ([d, 4 * d], F16)
        out[f"{prefix}.mlp.0.bias"] = ([4 * d], F32)
        out[f"{prefix}.mlp.2.weight"] = ([4 * d, d], F16)
        out[f"{prefix}.mlp.2.bias"] = ([d], F32)
        for a in attns:
            for p in ("query", "key", "value", "out"):
                out[f"{prefix}.{a}.{p}.weight"] = ([d, d], F16)
                if p != "key":
                    out[f"{prefix}.{a}.{p}.bias"] = ([d], F32)

    for i in range(hp["n_audio_layer"]):
        block(f"encoder.blocks.{i}", cross=False)
    for i in range(hp["n_text_layer"]):
        block(f"decoder.blocks.{i}", cross=True)
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from helpers import ct2_folder

    work = tmp_path_factory.mktemp("ggml")
    folder = ct2_folder("tiny.en", work)
    out = work / "ggml-tiny.en.bin"
    info = _script().convert(folder, out)
    return folder, info, read_ggml(out)


def test_header_and_filters_are_what_whisper_cpp_reads(converted):
    from as2d.models.ct2 import load_ct2
    from as2d.models.whisper_onnx import whisper_dims
    from as2d.runtime.whisper.features import mel_filters

    folder, _, f = converted
    dims = whisper_dims(load_ct2(folder / "model.bin"))
    assert f["magic"] == 0x67676D6C
    assert f["hparams"] == {**dims, "ftype": 1}
    assert f["filters"].shape == (80, 201)
    np.testing.assert_array_equal(f["filters"], mel_filters(80))
    # Slaney triangles: each band non-negative, one peak, peaks rising with the band.
    assert (f["filters"] >= 0).all()
    peaks = f["filters"].argmax(axis=1)
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > peaks[0]


def test_vocabulary_holds_the_text_tokens_as_raw_bytes(converted):
    from as2d.runtime.whisper.tokenizer import WhisperTokenizer

    folder, _, f = converted
    tok = WhisperTokenizer(folder / "tokenizer.json", f["hparams"]["n_vocab"])
    assert len(f["vocab"]) == tok.eot  # text tokens only; whisper.cpp names the rest
    for text in (" And Mr. John Dashwood had then leisure", " naïve café, 東京 — ok?"):
        ids = tok.encode(text)
        assert b"".join(f["vocab"][i] for i in ids).decode("utf-8") == text


def test_tensors_are_every_one_the_loader_creates_with_its_shape_and_type(converted):
    _, info, f = converted
    want = expected_tensors(f["hparams"])
    got = {name: (ne, t) for name, (ne, t, _) in f["tensors"].items()}
    assert set(got) == set(want)
    assert got == want
    assert info["tensors"] == len(want)


def test_weights_are_the_ct2_weights_split_from_the_fused_projections(converted):
    from as2d.models.ct2 import load_ct2

    folder, _, f = converted
    m = load_ct2(folder / "model.bin")
    d = f["hparams"]["n_audio_state"]
    t = {name: data for name, (_, _, data) in f["tensors"].items()}
    qkv = m.f32("encoder/layer_1/self_attention/linear_0/weight")
    qkv_b = m.f32("encoder/layer_1/self_attention/linear_0/bias")
    for i, p in enumerate(("query", "key", "value")):
        np.testing.assert_array_equal(t[f"encoder.blocks.1.attn.{p}.weight"],
                                      qkv[i * d:(i + 1) * d].astype(np.float16))
    np.testing.assert_array_equal(t["encoder.blocks.1.attn.value.bias"], qkv_b[2 * d:])
    kv = m.f32("decoder/layer_0/attention/linear_1/weight")
    np.testing.assert_array_equal(t["decoder.blocks.0.cross_attn.key.weight"],
                                  kv[:d].astype(np.float16))
    np.testing.assert_array_equal(t["decoder.blocks.0.cross_attn.value.bias"],
                                  m.f32("decoder/layer_0/attention/linear_1/bias")[d:])
    np.testing.assert_array_equal(t["encoder.conv1.weight"],
                                  m.f32("encoder/conv1/weight").astype(np.float16))
    np.testing.assert_array_equal(t["encoder.conv2.bias"].reshape(-1),
                                  m.f32("encoder/conv2/bias"))
    np.testing.assert_array_equal(t["decoder.token_embedding.weight"],
                                  m.f32("decoder/embeddings/weight").astype(np.float16))


def test_a_folder_that_is_no_model_is_one_error_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    rc = _script().main([str(tmp_path), str(tmp_path / "out.bin")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("ct2_to_ggml: error:")
    assert not (tmp_path / "out.bin").exists()
