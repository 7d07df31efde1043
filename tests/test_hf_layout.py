"""Whisper in the Hugging Face ONNX layout (an optimum export) from a local folder.

No hub is reachable, so the folder is written by ``as2d models export`` from the same weights
as our own bundles; the reader must give the same transcript, in the merged and in the split
layout, and must refuse speculation with a graph whose rows are not computed independently.
"""

from __future__ import annotations

import shutil

import pytest

from as2d.runtime.audio import load_audio
from as2d.runtime.transcribe.longform import LongFormTranscriber
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.runtime.whisper.hf_layout import HFLayoutError, HFWhisperModel


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, models_root):
    from as2d.models.install import export_hf_layout

    return export_hf_layout("tiny.en", tmp_path_factory.mktemp("hf") / "tiny.en")


@pytest.fixture(scope="module")
def clip(librivox):
    return load_audio(librivox[0].path)


def tokens(model, audio):
    return [s.tokens for s in LongFormTranscriber(model).transcribe(audio, TranscribeOptions())]


@pytest.fixture(scope="module")
def own_tokens(whisper, clip):
    """Our own tiny.en fp32 bundle's tokens for the clip, which every layout must give
    (decoded once for the module)."""
    return tokens(whisper("tiny.en", "fp32"), clip)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["merged", "split"])
def test_hf_layout_transcribes_like_our_own_bundle(hf_folder, clip, own_tokens, tmp_path,
                                                   layout):
    folder = hf_folder
    if layout == "split":  # the same folder without the merged decoder
        folder = tmp_path / "split"
        shutil.copytree(hf_folder, folder)
        (folder / "decoder_model_merged.onnx").unlink()
    hf = HFWhisperModel(folder, threads=2)
    assert hf.merged == (layout == "merged")
    assert tokens(hf, clip) == own_tokens


def test_the_hub_layout_keeps_its_graphs_under_onnx(hf_folder, clip, own_tokens, tmp_path):
    """onnx-community's repositories: config and tokenizer at the top, graphs (and their
    quantized variants, which are not taken) under ``onnx/``; it transcribes as our own
    bundle does, as the flat folder does (the test above)."""
    from as2d.loading import resolve_bundle_dir

    folder = tmp_path / "hub"
    (folder / "onnx").mkdir(parents=True)
    for f in hf_folder.iterdir():
        shutil.copy(f, folder / ("onnx" if f.suffix in (".onnx", ".data") else "") / f.name)
    shutil.copy(folder / "onnx" / "encoder_model.onnx",
                folder / "onnx" / "encoder_model_quantized.onnx")
    assert resolve_bundle_dir(str(folder)) == folder
    hub = HFWhisperModel(folder, threads=2)
    assert hub.merged and tokens(hub, clip) == own_tokens
    (folder / "onnx" / "encoder_model.onnx").unlink()
    with pytest.raises(HFLayoutError, match="missing encoder_model.onnx"):
        HFWhisperModel(folder)


@pytest.mark.slow
def test_a_graph_that_is_not_row_exact_is_not_used_for_speculation(hf_folder, clip):
    from as2d.engine import Engine, EngineSpec
    from as2d.runtime.rows import rows_exact
    from as2d.runtime.transcribe.strategy import TargetOnly

    notes = []
    engine = Engine(EngineSpec(model=str(hf_folder), decoder="as2d", threads=2),
                    progress=notes.append)
    with engine:
        hf = engine.target  # the folder as the engine loaded it
        assert isinstance(hf, HFWhisperModel)
        assert rows_exact(hf) is False  # a plain export rounds one row differently
        assert hf.row_check["max_abs_diff"] > 0
        assert isinstance(engine.strategy, TargetOnly) and engine.loaded_drafter is None
    assert any("target alone" in n for n in notes)


def test_an_incomplete_folder_says_what_is_missing(tmp_path):
    (tmp_path / "encoder_model.onnx").write_bytes(b"")
    with pytest.raises(HFLayoutError, match="decoder_model_merged.onnx"):
        HFWhisperModel(tmp_path)


@pytest.mark.slow
def test_cli_reads_the_folder_given_as_model(hf_folder, librivox):
    from typer.testing import CliRunner

    from as2d.cli.app import app

    result = CliRunner().invoke(app, ["transcribe", str(librivox[0].path), "-m",
                                      str(hf_folder), "--no-live"])
    assert result.exit_code == 0, result.output
    assert "Dashwood" in result.stdout
