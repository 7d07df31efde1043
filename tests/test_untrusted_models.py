"""Model folders as untrusted input (issue #25): bundles, CTranslate2 files and Hugging Face
folders whose metadata disagrees with their graphs, or whose tokenizer is another model's.

Every such folder must end in one ``as2d: error:`` line naming the file and the field, exit
code 1: never a traceback, a hang, a huge allocation, or another model's text with exit 0. The
cases are real folders (the installed tiny.en bundle, its CTranslate2 source, a Hugging Face
export of it, a small Hugging Face LLM) copied to a temporary folder and damaged there; the
property-based tests mutate them at random and accept only one clean error or the unmutated
model's own tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import cli, ct2_folder, deadline, error_line, linked_bundle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile import as2d, one_error_line

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "sense_and_sensibility.wav"
TIMEOUT = 180  # seconds for one CLI run: a hang fails the test, it does not stall the suite


@pytest.fixture(scope="module")
def tiny(bundle) -> Path:
    return bundle("tiny.en")


@pytest.fixture
def models(tmp_path, monkeypatch) -> Path:
    """An empty models folder of the test's own (where a CTranslate2 folder would be converted
    to), and the onnxruntime encoder (nothing measured)."""
    monkeypatch.setenv("AS2D_ENCODER", "onnxruntime")
    models = tmp_path / "models"
    models.mkdir()
    return models


def refused(model: Path, models: Path, *fragments: str, process: bool = False) -> str:
    """``as2d transcribe SAMPLE --model MODEL`` ends in one ``as2d: error:`` line naming
    ``fragments``, exit code 1, nothing on stdout; the line.

    ``process``: run by the console script, in a process of its own (one case of each kind of
    folder: the exit code and the line as the shell sees them, and the cases that could
    allocate gigabytes); else the same command in this process (the line and the exit code are
    the command's own), without starting Python and importing the converters again for each
    case. A hang fails the test either way."""
    if process:
        p = as2d("transcribe", SAMPLE, "--model", model, "--decoder", "target",
                 env=dict(os.environ, AS2D_MODELS_DIR=str(models)), timeout=TIMEOUT)
        line = one_error_line(p, *fragments, code=1)
        assert p.stdout == ""
        return line
    with deadline(TIMEOUT):
        r = cli("transcribe", SAMPLE, "--model", model, "--decoder", "target",
                models_dir=models)
    line = error_line(r, 1, *fragments)
    assert r.stdout == ""
    return line


def copy_bundle(src: Path, dest: Path) -> Path:
    """``src`` with its manifest and tokenizer copied (the files the tests damage)."""
    return linked_bundle(src, dest, copied=("manifest.json", "tokenizer.json"))


def edit_manifest(bundle: Path, edit) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


# -- CTranslate2 model.bin ---------------------------------------------------------------------

def _first_record(data: bytes) -> tuple[int, int]:
    """(offset of the tensor count, offset of the first tensor's rank byte) in a model.bin."""
    pos = 4
    (n,) = struct.unpack_from("<H", data, pos)
    pos += 2 + n + 4  # spec name, revision
    count_at = pos
    pos += 4
    (n,) = struct.unpack_from("<H", data, pos)
    return count_at, pos + 2 + n


@pytest.fixture(scope="module")
def ct2_source(tmp_path_factory) -> Path:
    return ct2_folder("tiny.en", tmp_path_factory.mktemp("ct2"))


def copy_ct2(src: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in ("model.bin", "tokenizer.json", "config.json"):
        if (src / f).is_file():
            shutil.copyfile(src / f, dest / f)
    return dest


def _damage_header(data: bytearray, how: str) -> bytearray:
    count_at, rank_at = _first_record(bytes(data))
    assert data[rank_at] == 0, "the first tensor of a CTranslate2 Whisper is a scalar"
    # scalar record: rank 0, dtype u8, byte count u32, then its bytes
    dtype, nbytes = data[rank_at + 1], struct.unpack_from("<I", data, rank_at + 2)[0]
    end = rank_at + 6 + nbytes
    if how == "absurd dims":  # 65536**4 items: numpy's int64 product wraps to 0 = byte count
        record = struct.pack("<B4IBI", 4, *[65536] * 4, 1, 0)
    elif how == "rank 100":
        record = struct.pack("<B", 100) + bytes(data[rank_at + 1:end])
    elif how == "byte count":
        record = struct.pack("<BBI", 0, dtype, nbytes + 1) + bytes(data[rank_at + 6:end]) + b"\0"
    elif how == "past the end":
        record = struct.pack("<BIBI", 1, 1 << 31, 1, 1 << 31)
    else:
        raise AssertionError(how)
    data[rank_at:end] = record
    return data


@pytest.mark.slow
@pytest.mark.parametrize("how,field", [("absurd dims", "dims"), ("rank 100", "rank"),
                                       ("byte count", "byte count"),
                                       ("past the end", "byte count"),
                                       ("tensor count", "tensor count")])
def test_a_ct2_header_that_lies_is_one_line(how, field, ct2_source, tmp_path, models):
    folder = copy_ct2(ct2_source, tmp_path / "ct2")
    data = bytearray((folder / "model.bin").read_bytes())
    if how == "tensor count":
        count_at, _ = _first_record(bytes(data))
        struct.pack_into("<I", data, count_at, 1 << 31)
    else:
        data = _damage_header(data, how)
    (folder / "model.bin").write_bytes(bytes(data))
    # dims whose product wraps to 0 in int64: the one that could allocate, in a process
    refused(folder, models, "model.bin", field, process=how == "absurd dims")


@pytest.mark.slow
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_ct2_weights_are_refused_at_conversion(value, ct2_source, tmp_path,
                                                         models):
    from as2d.models.ct2 import load_ct2

    folder = copy_ct2(ct2_source, tmp_path / "ct2")
    offset, _, _, dtype_id = load_ct2(folder / "model.bin").tensors._where["encoder/conv1/weight"]
    dtype = {0: np.float32, 4: np.float16}[dtype_id]
    with open(folder / "model.bin", "r+b") as fh:
        fh.seek(offset + 64)
        fh.write(np.full(3, value, dtype).tobytes())
    refused(folder, models, "model.bin", "encoder/conv1/weight", "NaN or infinite")
    assert not list(models.glob("*/manifest.json"))  # nothing installed


# -- as2d bundle manifests ---------------------------------------------------------------------

@pytest.mark.parametrize("edit,fragment", [
    (lambda m: m["dims"].update(n_text_ctx=1048575), "n_text_ctx"),
    (lambda m: m["dims"].update(n_text_layer=100), "n_text_layer"),
    (lambda m: m["dims"].update(n_vocab=51865), "n_vocab"),
    (lambda m: m["generation"].update(alignment_heads=[[4, 0]]), "alignment_heads"),
    (lambda m: m["generation"].update(alignment_heads=[[0, 6]]), "alignment_heads"),
    (lambda m: m["generation"].update(suppress_ids=[1 << 30]), "suppress_ids"),
])
def test_a_manifest_that_disagrees_with_its_graphs_is_one_line(edit, fragment, tiny, tmp_path,
                                                               models):
    bundle = copy_bundle(tiny, tmp_path / "tiny")
    edit_manifest(bundle, edit)
    refused(bundle, models, "manifest.json", fragment)


def test_deeply_nested_and_huge_json_are_one_line(tiny, tmp_path, models):
    """In a process of their own: a parser's recursion or a 4-GB read would take it down."""
    bundle = copy_bundle(tiny, tmp_path / "tiny")
    (bundle / "manifest.json").write_text('{"format": "as2d-bundle", "a": '
                                          + "[" * 200_000 + "]" * 200_000 + "}")
    refused(bundle, models, "manifest.json", "nested", process=True)
    with open(bundle / "manifest.json", "wb") as fh:  # sparse: 4 GB that take no disk
        fh.truncate(4 << 30)
    refused(bundle, models, "manifest.json", "too large", process=True)


def _swap_tokenizer(bundle: Path, tokenizer: bytes) -> None:
    (bundle / "tokenizer.json").write_bytes(tokenizer)

    def fix(m):
        m["sha256"]["tokenizer.json"] = hashlib.sha256(tokenizer).hexdigest()
        m["sizes"]["tokenizer.json"] = len(tokenizer)
    edit_manifest(bundle, fix)


def _multilingual_tokenizer() -> bytes:
    """Whisper base's tokenizer.json, from its source package."""
    from as2d.models.catalog import lookup
    from as2d.models.source_packages import locate

    src = lookup("base").source
    path = next((p for p in (locate(e, src) for e in src.extra_files)
                 if p.name == "tokenizer.json"), None)
    if path is None:
        pytest.skip("base's tokenizer.json is not among its source files")
    return path.read_bytes()


def test_another_models_tokenizer_is_refused_not_decoded(tiny, tmp_path, models):
    bundle = copy_bundle(tiny, tmp_path / "tiny")
    _swap_tokenizer(bundle, _multilingual_tokenizer())  # base's: ids one off from tiny.en's
    refused(bundle, models, "tokenizer.json", "n_vocab")


def test_a_language_models_tokenizer_is_refused(tiny, tmp_path, models):
    from tiny_llm import train_tokenizer

    bundle = copy_bundle(tiny, tmp_path / "tiny")
    tok = train_tokenizer(["the age of wisdom, the age of foolishness " * 20], 300)
    tok.save(str(tmp_path / "t.json"))
    _swap_tokenizer(bundle, (tmp_path / "t.json").read_bytes())
    refused(bundle, models, "tokenizer.json")


@pytest.mark.parametrize("edit,fragment", [
    (lambda m: m.update(capacity=1048575), "capacity"),
    (lambda m: m["config"].update(num_layers=100), "num_layers"),
])
def test_an_llm_manifest_that_disagrees_with_its_graph_is_one_line(edit, fragment, bundle,
                                                                  tmp_path):
    """The answering model's bundle (its large files linked, its manifest edited)."""
    from as2d.loading import ModelError, load_llm

    src = bundle("gemma-3-270m")
    folder = linked_bundle(src, tmp_path / "llm", skip=(".", "manifest.json"))
    edit_manifest_from(src, folder, edit)
    with pytest.raises(ModelError) as exc:
        load_llm(str(folder))
    assert "\n" not in str(exc.value) and "manifest.json" in str(exc.value)
    assert fragment in str(exc.value)


def edit_manifest_from(src: Path, dest: Path, edit) -> None:
    manifest = json.loads((src / "manifest.json").read_text())
    edit(manifest)
    (dest / "manifest.json").write_text(json.dumps(manifest))


# -- Hugging Face folders ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_whisper(tmp_path_factory, tiny) -> Path:
    from as2d.models.install import export_hf_layout

    return export_hf_layout("tiny.en", tmp_path_factory.mktemp("hf") / "tiny.en")


def copy_hf(src: Path, dest: Path, **config) -> Path:
    shutil.copytree(src, dest)
    return _edit_config(dest, config)


def link_hf(src: Path, dest: Path, copied=(), **config) -> Path:
    """The Whisper export ``src`` in ``dest`` with its config.json (edited with ``config``) and
    the files ``copied`` copied, its graphs linked (150 MB that nothing writes into)."""
    linked_bundle(src, dest, copied=("config.json", *copied))
    return _edit_config(dest, config)


def _edit_config(folder: Path, config: dict) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


# One value per field: more decoder layers than the graphs have and fewer (3) meet the same
# check, the graphs' layer set against range(decoder_layers).
@pytest.mark.parametrize("field,value", [("decoder_layers", 5),
                                         ("max_target_positions", 1048575),
                                         ("num_mel_bins", 128), ("vocab_size", 51865)])
def test_a_hf_whisper_config_that_disagrees_is_one_line(field, value, hf_whisper, tmp_path,
                                                        models):
    folder = link_hf(hf_whisper, tmp_path / "hf", **{field: value})
    # a context of a million positions, were it allocated, would take a process
    refused(folder, models, "config.json", field, process=field == "max_target_positions")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_a_huge_hf_json_file_is_not_read(name, hf_whisper, tmp_path, models):
    """In a process of its own: an 8-GB read would take it down."""
    folder = link_hf(hf_whisper, tmp_path / "hf", copied=(name,))
    with open(folder / name, "ab") as fh:  # sparse: 8 GB that take no disk
        fh.truncate(8 << 30)
    refused(folder, models, name, "too large", process=True)


_TEXT = ["Question: What was it? Answer: The age of wisdom, the age of foolishness. " * 20]


@pytest.fixture(scope="module")
def hf_llm(tmp_path_factory) -> Path:
    from tiny_llm import export_tiny_decoder

    return export_tiny_decoder(tmp_path_factory.mktemp("llm") / "llm", _TEXT)


@pytest.mark.parametrize("field,value", [("num_hidden_layers", 5), ("vocab_size", 10),
                                         ("num_key_value_heads", 3), ("head_dim", 7),
                                         ("num_hidden_layers", "two")])
def test_a_hf_llm_config_that_disagrees_is_one_line(field, value, hf_llm, tmp_path):
    from as2d.loading import ModelError, load_llm

    folder = copy_hf(hf_llm, tmp_path / "llm", **{field: value})
    with pytest.raises(ModelError) as exc:
        load_llm(str(folder))
    assert "\n" not in str(exc.value) and field in str(exc.value)
    assert "config.json" in str(exc.value)


def test_a_huge_hf_llm_config_or_tokenizer_is_not_read(hf_llm, tmp_path):
    from as2d.loading import ModelError, load_llm

    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        folder = copy_hf(hf_llm, tmp_path / name)
        with open(folder / name, "ab") as fh:  # sparse
            fh.truncate(8 << 30)
        with pytest.raises(ModelError) as exc:
            load_llm(str(folder))
        assert name in str(exc.value) and "too large" in str(exc.value)


def test_a_hf_llm_with_another_models_tokenizer_is_one_line(hf_llm, tmp_path):
    from tiny_llm import train_tokenizer

    from as2d.loading import ModelError, load_llm

    folder = copy_hf(hf_llm, tmp_path / "llm")
    train_tokenizer([_TEXT[0] + " other words entirely, zebra quartz " * 30], 2000).save(
        str(folder / "tokenizer.json"))
    with pytest.raises(ModelError) as exc:
        load_llm(str(folder))
    assert "tokenizer.json" in str(exc.value) and "\n" not in str(exc.value)


def test_chat_template_jinja_beside_tokenizer_config_is_used(hf_llm, tmp_path):
    from as2d.loading import ModelError, load_llm

    folder = copy_hf(hf_llm, tmp_path / "llm")
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>"
    (folder / "chat_template.jinja").write_text(template)
    assert load_llm(str(folder)).chat_template == template
    (folder / "chat_template.jinja").write_text("{{ cycler.__init__.__globals__.os }}")
    with pytest.raises(ModelError) as exc:
        load_llm(str(folder))
    assert "chat_template.jinja" in str(exc.value) and "unsafe" in str(exc.value)


# -- property-based: random damage gives one clean error or the model's own tokens ---------

def _tokens_or_error(spec: str, models: Path, audio):
    """The model's tokens on ``audio``, or the ModelError's one line (anything else fails)."""
    from as2d.loading import ModelError, load_whisper
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    with deadline(120):
        try:
            model = load_whisper(spec, models_dir=models)
            opts = TranscribeOptions(language="en")
            return [s.tokens for s in LongFormTranscriber(model).transcribe(audio, opts)]
        except ModelError as exc:
            assert "\n" not in str(exc) and str(exc), repr(exc)
            return str(exc)


@pytest.fixture(scope="module")
def clip():
    import dataclasses

    from as2d.runtime.audio import load_audio

    audio = load_audio(SAMPLE)
    return dataclasses.replace(audio, samples=audio.samples[: 16000 * 6])  # one short window


_SIZES = st.sampled_from([0, 1, 3, 4, 5, 6, 80, 128, 383, 384, 447, 448, 449, 1500, 51863,
                          51864, 51865, 1 << 20, 1048575, 2 ** 31])
# Mostly plausible numbers (near the true sizes: the mutations a loader must catch by looking
# at the graphs), some of the wrong type.
_NUMBERS = st.one_of(_SIZES, _SIZES, st.integers(-2, 600), st.integers(-2, 600), st.none(),
                     st.text(max_size=3), st.floats(allow_nan=True),
                     st.lists(st.integers(-1, 10), max_size=3),
                     st.lists(st.lists(st.integers(-1, 8), min_size=2, max_size=2),
                              max_size=3))
_PROPERTY = settings(max_examples=30, deadline=None, derandomize=True,
                     suppress_health_check=list(HealthCheck))
# A folder that survives its damage is loaded and decoded (a second or more each): fewer
# examples for the real models, as a property over a real model needs (issue #44); the reader of
# model.bin's header, which decodes nothing, takes all of them.
_PROPERTY_MODEL = settings(_PROPERTY, max_examples=12)


@pytest.mark.slow
def test_mutated_manifests_give_one_error_or_the_same_tokens(tiny, clip, tmp_path_factory):
    work = tmp_path_factory.mktemp("mutated-manifest")
    models = work / "models"
    models.mkdir()
    bundle = copy_bundle(tiny, models / "tiny")
    original = (bundle / "manifest.json").read_text()
    want = _tokens_or_error(str(bundle), models, clip)
    assert isinstance(want, list) and want
    keys = ["dims." + k for k in json.loads(original)["dims"]] + [
        "generation.alignment_heads", "generation.suppress_ids", "generation.lang_ids",
        "generation.suppress_ids_begin", "files.decoder", "files.tokenizer", "name"]

    @_PROPERTY_MODEL
    @given(st.lists(st.tuples(st.sampled_from(keys), _NUMBERS), min_size=1, max_size=3))
    def check(edits):
        manifest = json.loads(original)
        for key, value in edits:
            where, _, field = key.rpartition(".")
            (manifest[where] if where else manifest)[field] = value
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        got = _tokens_or_error(str(bundle), models, clip)
        assert isinstance(got, str) or got == want, (edits, got)

    try:
        check()
    finally:
        (bundle / "manifest.json").write_text(original)


@pytest.mark.slow
def test_mutated_hf_configs_give_one_error_or_the_same_tokens(hf_whisper, clip, tmp_path):
    folder = link_hf(hf_whisper, tmp_path / "hf")
    original = (folder / "config.json").read_text()
    want = _tokens_or_error(str(folder), tmp_path, clip)
    assert isinstance(want, list) and want
    keys = list(json.loads(original))

    @_PROPERTY_MODEL
    @given(st.lists(st.tuples(st.sampled_from(keys), _NUMBERS), min_size=1, max_size=3))
    def check(edits):
        cfg = json.loads(original)
        cfg.update(edits)
        (folder / "config.json").write_text(json.dumps(cfg))
        got = _tokens_or_error(str(folder), tmp_path, clip)
        assert isinstance(got, str) or got == want, (edits, got)

    check()


@pytest.mark.slow
def test_mutated_ct2_headers_give_one_error_or_sound_tensors(ct2_source, tmp_path):
    """Random bytes written into the header and tensor index of tiny.en's model.bin: the
    reader refuses it in one line, or every tensor it then offers decodes to exactly its
    byte count inside the file, and the converter's checks hold (no traceback, no allocation
    beyond the file, no hang). Each example rewrites only the bytes it may change (the header
    and index, before the first large tensor), in place: the file is the pristine one with the
    example's edits, without writing its 75 MB again."""
    from as2d.models.ct2 import CT2FormatError, load_ct2
    from as2d.models.whisper_source import SourceError, inspect_ct2

    folder = copy_ct2(ct2_source, tmp_path / "ct2")
    pristine = (folder / "model.bin").read_bytes()
    ref = load_ct2(folder / "model.bin")
    index_end = ref.tensors._where["decoder/embeddings/weight"][0]  # the first large tensor
    head = index_end + 4  # an edit starts before index_end and is at most 4 bytes long

    @_PROPERTY
    @given(st.lists(st.tuples(st.integers(0, index_end - 1), st.binary(min_size=1, max_size=4)),
                    min_size=1, max_size=4))
    def check(edits):
        data = bytearray(pristine[:head])
        for at, raw in edits:
            data[at:at + len(raw)] = raw
        with open(folder / "model.bin", "r+b") as fh:  # the rest of the file stays pristine
            fh.write(bytes(data[:head]))
        with deadline(60):
            try:
                model = load_ct2(folder / "model.bin")
                for name in model.tensors:
                    nbytes = model.tensors.nbytes(name)
                    assert nbytes <= len(pristine)
                    value = model.tensors[name]
                    assert value.nbytes == nbytes or value.dtype == np.float32  # bf16 widened
                inspect_ct2(folder)
                model.f32("encoder/conv1/weight")
            except (CT2FormatError, SourceError) as exc:
                assert "\n" not in str(exc) and str(exc)

    check()
