"""int8 decoders' refined logits (issue 27): each row's top logits recomputed exactly, row by row.

The int8 output projection was most of int8's distance from fp32; the decoder graphs now
recompute each row's ``REFINE_TOP`` largest int8 logits as ``x · e_v`` from a 16-bit copy of
the embedding and write them back into the row. These tests check that the values written are
those products and nothing else moves (a small random graph: fast), that a row's result does
not depend on the rows beside it (what keeps AS²D lossless), that older int8 bundles are
converted again, and that the real bundles' single and beam decoders both carry it and pass
the row checks the engine runs before it speculates.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from as2d.models.graph import Graph
from as2d.models.whisper_onnx import REFINE_TOP, _logits


def _session(emb: np.ndarray, refine_top: int, dtype=np.float16) -> ort.InferenceSession:
    g = Graph("refine")
    x = g.input("x", TensorProto.FLOAT, ["R", emb.shape[1]])
    g.output(_logits(g, x, emb, "int8", refine_top, dtype), "logits", TensorProto.FLOAT,
             ["R", emb.shape[0]])
    return ort.InferenceSession(g.model().SerializeToString(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_the_top_logits_are_recomputed_from_the_table_and_nothing_else_moves(dtype):
    rng = np.random.default_rng(7)
    emb = rng.standard_normal((600, 64)).astype(np.float32)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    plain = _session(emb, 0).run(None, {"x": x})[0]
    refined = _session(emb, REFINE_TOP, dtype).run(None, {"x": x})[0]
    table = emb.astype(dtype).astype(np.float32)
    for r in range(len(x)):
        top = np.argsort(-plain[r], kind="stable")[:REFINE_TOP]
        rest = np.setdiff1d(np.arange(emb.shape[0]), top)
        np.testing.assert_allclose(refined[r, top], table[top] @ x[r], rtol=1e-5, atol=1e-5)
        assert np.array_equal(refined[r, rest], plain[r, rest])
        # The int8 values were off (that is the point): the refined ones are the products.
        assert not np.array_equal(refined[r, top], plain[r, top])


def test_a_refined_row_is_the_same_bits_whatever_rows_run_beside_it():
    rng = np.random.default_rng(3)
    emb = rng.standard_normal((800, 64)).astype(np.float32)
    x = rng.standard_normal((7, 64)).astype(np.float32)
    sess = _session(emb, REFINE_TOP)
    together = sess.run(None, {"x": x})[0]
    alone = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
    pairs = np.concatenate([sess.run(None, {"x": x[i:i + 2]})[0] for i in range(0, 6, 2)])
    assert np.array_equal(together, alone)
    assert np.array_equal(together[:6], pairs)


def test_an_int8_whisper_bundle_from_before_the_refinement_is_converted_again():
    from types import SimpleNamespace

    from as2d.models.install import CONVERTER_VERSION, is_current

    def bundle(precision, version):
        return SimpleNamespace(manifest={"kind": "whisper", "precision": precision,
                                         "converter_version": version})

    assert not is_current(bundle("int8", 7))
    assert not is_current(bundle("int8", 8))  # refined, but the int8 input embedding
    assert is_current(bundle("int8", 10))  # every row's logits: read as they are
    assert is_current(bundle("int8", CONVERTER_VERSION))
    assert is_current(bundle("fp32", 7))  # its graphs did not change: not converted again


def _ops(path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_the_bundles_single_and_beam_decoders_refine_and_stay_row_exact(bundle, whisper):
    from as2d.models.bundle import load_bundle
    from as2d.models.install import ensure_beam_decoder
    from as2d.runtime.rows import probe, probe_beams

    path = bundle("base", "int8")
    files = load_bundle(path).manifest["files"]
    assert "decoder_data" in files  # the weights beside the graph (faster session creation)
    beam = ensure_beam_decoder(path)
    for graph in (path / files["decoder"], beam):
        assert {"TopK", "ScatterElements"} <= _ops(graph), graph.name
    assert "TopK" not in _ops(path / files["decoder_draft"])  # the drafter's stays as it was
    model = whisper("base", "int8")
    assert model.beam_graph == beam  # declared from the manifest
    assert probe(model)["exact"]
    assert probe_beams(model)["exact"]
