"""int8 weight products are exact on every CPU (as2d.runtime.int8_exact).

Where onnxruntime's uint8 × int8 kernel saturates (AVX2 without VNNI), graphs are loaded through a
uint8 × uint8 twin. These tests hold on any x86-64 CPU: the twin is built and run everywhere and
compared with integer arithmetic done in numpy, and the probe's verdict is checked against what
the original graph computes on this CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from as2d.runtime import int8_exact
from as2d.runtime.int8_exact import _twin, exact_graph, u8s8_saturates

DEPTH, COLS = 256, 48


def _session(model_or_bytes) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    data = model_or_bytes if isinstance(model_or_bytes, bytes) else \
        model_or_bytes.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _graph(op: str, w: np.ndarray, scale: np.ndarray, b_zero: np.ndarray | None = None):
    """One product of as2d's kinds: per-row ``MatMulIntegerToFloat`` (uint8 A, zero point 128),
    ``MatMulInteger`` (Hugging Face exports) or ``DynamicQuantizeMatMul`` (drafters)."""
    inits = [numpy_helper.from_array(w, "w")]
    if op == "MatMulIntegerToFloat":
        inits += [numpy_helper.from_array(np.array(1.0, np.float32), "a_scale"),
                  numpy_helper.from_array(scale, "w_scale"),
                  numpy_helper.from_array(np.array(128, np.uint8), "a_zero")]
        inputs = ["a", "w", "a_scale", "w_scale", "a_zero"]
        a_type, y_type = TensorProto.UINT8, TensorProto.FLOAT
    elif op == "MatMulInteger":
        inits += [numpy_helper.from_array(np.array(128, np.uint8), "a_zero")]
        inputs = ["a", "w", "a_zero"]
        a_type, y_type = TensorProto.UINT8, TensorProto.INT32
    else:
        inits += [numpy_helper.from_array(scale, "w_scale")]
        inputs = ["a", "w", "w_scale"]
        a_type, y_type = TensorProto.FLOAT, TensorProto.FLOAT
    if b_zero is not None:
        inits.append(numpy_helper.from_array(b_zero, "w_zero"))
        inputs += [""] * ({"MatMulIntegerToFloat": 5, "MatMulInteger": 3,
                           "DynamicQuantizeMatMul": 3}[op] - len(inputs)) + ["w_zero"]
    domain = "" if op == "MatMulInteger" else "com.microsoft"
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], domain=domain)], "g",
        [helper.make_tensor_value_info("a", a_type, ["rows", DEPTH])],
        [helper.make_tensor_value_info("y", y_type, ["rows", COLS])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _full_range(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Activations at the ends of uint8 and weights at the ends of int8: pairs of products
    that overflow an int16 wherever a kernel adds them there."""
    rng = np.random.default_rng(seed)
    a = np.where(rng.random((rows, DEPTH)) < 0.5, 1, 255).astype(np.uint8)
    w = np.where(rng.random((DEPTH, COLS)) < 0.5, -127, 127).astype(np.int8)
    return a, w


@pytest.mark.parametrize("op", ["MatMulIntegerToFloat", "MatMulInteger"])
@pytest.mark.parametrize("rows", [1, 5, 64])
def test_twin_products_are_exact(op: str, rows: int) -> None:
    a, w = _full_range(rows, seed=rows)
    scale = np.ones(COLS, np.float32)
    twin, external = _twin_of(_graph(op, w, scale))
    assert not external
    got = _session(twin).run(None, {"a": a})[0]
    exact = (a.astype(np.int64) - 128) @ w.astype(np.int64)
    assert np.array_equal(got.astype(np.int64), exact)
    # Every product became uint8 × uint8; nothing else was touched.
    node = twin.graph.node[0]
    kinds = {t.name: t.data_type for t in twin.graph.initializer}
    assert kinds[node.input[1]] == TensorProto.UINT8
    assert "w" not in kinds  # the int8 copy had no other reader


def test_twin_keeps_an_int8_table_that_something_else_reads() -> None:
    """The tied embedding reads rows of the int8 output projection (Gather): that reader keeps
    the int8 table, the product gets its own uint8 copy."""
    a, w = _full_range(3, seed=7)
    model = _graph("MatMulIntegerToFloat", w, np.ones(COLS, np.float32))
    g = model.graph
    g.node.append(helper.make_node("Gather", ["w", "idx"], ["rows_of_w"], axis=0))
    g.initializer.append(numpy_helper.from_array(np.array([0, 5], np.int64), "idx"))
    g.output.append(helper.make_tensor_value_info("rows_of_w", TensorProto.INT8, [2, COLS]))
    twin, _ = _twin_of(model)
    y, gathered = _session(twin).run(None, {"a": a})
    assert np.array_equal(gathered, w[[0, 5]])
    assert np.array_equal(y.astype(np.int64), (a.astype(np.int64) - 128) @ w.astype(np.int64))


def test_twin_of_a_dynamic_product_equals_the_original_where_nothing_overflows() -> None:
    """DynamicQuantizeMatMul (the drafters' int8) with a weight zero point: with small weights no
    kernel saturates, so the twin must give the original's results bit for bit."""
    rng = np.random.default_rng(3)
    w = rng.integers(-40, 41, (DEPTH, COLS)).astype(np.int8)
    zero = rng.integers(-3, 4, COLS).astype(np.int8)
    model = _graph("DynamicQuantizeMatMul", w, np.full(COLS, 0.01, np.float32), zero)
    twin, _ = _twin_of(model)
    x = rng.standard_normal((6, DEPTH)).astype(np.float32)
    assert np.array_equal(_session(twin).run(None, {"a": x})[0],
                          _session(model).run(None, {"a": x})[0])


def test_the_probe_says_what_this_cpu_computes() -> None:
    """The verdict matches the original graph on this CPU: exact where the probe says it does
    not saturate, wrong somewhere where it says it does."""
    a, w = _full_range(9, seed=1)
    got = _session(_graph("MatMulInteger", w, np.ones(COLS, np.float32))).run(None, {"a": a})[0]
    exact = (a.astype(np.int64) - 128) @ w.astype(np.int64)
    assert np.array_equal(got, exact) is not u8s8_saturates()


def test_exact_graph_writes_one_twin_and_reuses_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(int8_exact, "twins_wanted", lambda: True)
    monkeypatch.setattr(int8_exact, "PRUNE_AFTER_S", -1.0)  # old twins go at once here
    monkeypatch.setattr(int8_exact, "user_cache", lambda *_: tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    a, w = _full_range(4, seed=2)
    src = tmp_path / "graph.onnx"
    onnx.save_model(_graph("MatMulIntegerToFloat", w, np.ones(COLS, np.float32)), src,
                    save_as_external_data=True, location="graph.onnx.data", size_threshold=0)
    first = exact_graph(src)
    assert first != src and first.parent == tmp_path / "cache"
    assert (tmp_path / "cache" / f"{first.name}.data").exists()  # kept external, like its source
    assert exact_graph(src) == first  # found, not made again
    got = _session(onnx.load(str(first))).run(None, {"a": a})[0]
    assert np.array_equal(got.astype(np.int64), (a.astype(np.int64) - 128) @ w.astype(np.int64))
    # A reconverted source gets a new twin and the old one goes.
    onnx.save_model(_graph("MatMulIntegerToFloat", w[:, ::-1].copy(),
                           np.ones(COLS, np.float32)), src)
    second = exact_graph(src)
    assert second != first and not first.exists() and second.exists()
    # A graph without int8 products is itself, remembered by a marker.
    plain = tmp_path / "plain.onnx"
    onnx.save_model(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "p",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])), plain)
    assert exact_graph(plain) == plain
    assert list((tmp_path / "cache").glob("plain-*.same"))
    # Twins and markers of graphs that are gone (a test's temporary folder) go with the next twin.
    plain.unlink()
    other = tmp_path / "other.onnx"
    onnx.save_model(_graph("MatMulInteger", w, np.ones(COLS, np.float32)), other)
    src.unlink()
    exact_graph(other)
    left = sorted(p.name.split("-")[0] for p in (tmp_path / "cache").iterdir())
    assert left == ["other"] * 3  # its twin, the note of its source and its lock
    # No folder to write: the twin comes back serialised.
    onnx.save_model(_graph("MatMulIntegerToFloat", w, np.ones(COLS, np.float32)), src)
    monkeypatch.setattr(int8_exact, "user_cache", lambda *_: None)
    assert isinstance(exact_graph(src), bytes)


def test_graphs_load_as_they_are_where_products_are_exact(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(int8_exact, "twins_wanted", lambda: False)
    src = tmp_path / "graph.onnx"
    onnx.save_model(_graph("MatMulInteger", *_full_range(2, 0)[1:], np.ones(COLS, np.float32)),
                    src)
    assert exact_graph(src) == src


def _twin_of(model):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save_model(model, path)
        twin, external = _twin(path)
    assert twin is not None
    return twin, external


def test_stats_say_whether_twins_ran(tmp_path, monkeypatch) -> None:
    from as2d.runtime.transcribe.stats import RunStats

    monkeypatch.setattr(int8_exact, "_twinned", __import__("threading").Event())
    summary = RunStats("clip.wav", "as2d", "base-int8", "tiny.en-int8").summary
    assert summary()["int8_twins"] is False
    monkeypatch.setattr(int8_exact, "twins_wanted", lambda: True)
    monkeypatch.setattr(int8_exact, "user_cache", lambda *_: tmp_path)
    src = tmp_path / "g.onnx"
    onnx.save_model(_graph("MatMulInteger", _full_range(1, 0)[1], np.ones(COLS, np.float32)), src)
    exact_graph(src)
    assert summary()["int8_twins"] is True


def test_a_bundles_twin_lives_in_the_bundle(tmp_path, monkeypatch) -> None:
    """Beside the graph in an as2d bundle (its other caches live there, and a removed bundle
    takes its twins along): a plain transcription writes nothing under HOME."""
    monkeypatch.setattr(int8_exact, "twins_wanted", lambda: True)
    monkeypatch.setattr(int8_exact, "user_cache", lambda *_: pytest.fail("not the user cache"))
    bundle = tmp_path / "base-int8"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    a, w = _full_range(2, seed=4)
    onnx.save_model(_graph("MatMulIntegerToFloat", w, np.ones(COLS, np.float32)),
                    bundle / "decoder.onnx")
    twin = exact_graph(bundle / "decoder.onnx")
    assert twin.parent == bundle and twin.name.startswith("decoder.u8u8-")
    assert exact_graph(bundle / "decoder.onnx") == twin


def test_a_dynamic_product_that_overflows_is_exact_in_the_twin() -> None:
    """The drafters' DynamicQuantizeMatMul with activations that quantise to 0 and 255 against
    full-range weights: the twin gives the exact integer product, scaled."""
    rng = np.random.default_rng(5)
    x = np.where(rng.random((4, DEPTH)) < 0.5, -1.0, 1.0).astype(np.float32)
    _, w = _full_range(1, seed=6)
    w_scale = np.full(COLS, 0.5, np.float32)
    twin, _ = _twin_of(_graph("DynamicQuantizeMatMul", w, w_scale))
    got = _session(twin).run(None, {"a": x})[0]
    # The activations as onnxruntime quantises them (its own DynamicQuantizeLinear), then the
    # integer product done here.
    quantise = helper.make_model(helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["a"], ["q", "s", "z"])], "dq",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["rows", DEPTH])],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, ["rows", DEPTH]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("z", TensorProto.UINT8, [])]),
        opset_imports=[helper.make_opsetid("", 17)])
    q, scale, zero = _session(quantise).run(None, {"a": x})
    assert {0, 255} <= set(np.unique(q)) or q.max() - q.min() >= 253  # products that overflow
    exact = ((q.astype(np.int64) - int(zero)) @ w.astype(np.int64)) * np.float64(scale) * 0.5
    np.testing.assert_allclose(got, exact, rtol=1e-6)


def test_the_real_bundles_twins_leave_no_saturating_product(bundle) -> None:
    """Every int8 product of the shipped graphs (target decoder, drafter decoder, encoder)
    becomes uint8 x uint8; the tied table is read through its uint8 copy and not kept twice;
    the twins run. Where this CPU does not saturate, they give the graphs' own bits."""
    folder = bundle("tiny.en", "int8")
    for name in ("decoder.onnx", "decoder_draft.onnx", "encoder.onnx"):
        twin, _ = _twin(folder / name)
        assert twin is not None, name
        kinds = {t.name: t.data_type for t in twin.graph.initializer}
        # The window's keys and values (int8 inputs of the target's decoder) are read as uint8.
        kinds |= {i.name: i.type.tensor_type.elem_type for i in twin.graph.input}
        for node in twin.graph.node:
            if node.op_type in ("MatMulInteger", "MatMulIntegerToFloat",
                                "DynamicQuantizeMatMul"):
                assert kinds.get(node.input[1]) == TensorProto.UINT8, (name, node.name)
            if node.op_type == "Gather" and node.input[0] in kinds:
                assert kinds[node.input[0]] != TensorProto.INT8, (name, node.name)
        assert not any(k == TensorProto.INT8 and t.endswith("weight_q") for t, k in kinds.items())
        original = onnx.load(str(folder / name))
        feeds = {}
        rng = np.random.default_rng(0)
        twin_feeds = {}
        for i in _session(original).get_inputs():
            shape = [d if isinstance(d, int) else 2 for d in i.shape]
            if i.type == "tensor(int8)":  # the twin reads the same integers + 128
                feeds[i.name] = rng.integers(-127, 128, shape).astype(np.int8)
                twin_feeds[i.name] = (feeds[i.name].astype(np.int16) + 128).astype(np.uint8)
            elif "int" in i.type:
                feeds[i.name] = rng.integers(0, 50, shape).astype(
                    np.int64 if "int64" in i.type else np.int32)
            else:
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        try:
            ours = _session(twin).run(None, {**feeds, **twin_feeds})
        except Exception:  # noqa: BLE001 - a graph whose inputs need real shapes: loads only
            continue
        if not u8s8_saturates():
            for a, b in zip(ours, _session(original).run(None, feeds)):
                np.testing.assert_array_equal(a, b)


def test_a_fed_int8_operand_is_read_as_uint8_in_the_twin() -> None:
    """An int8 operand given at run time (a window's cross-attention keys and values): the twin
    takes it as uint8 with zero point 128, and the same integers give the same exact products,
    with full-range values that overflow a saturating kernel's int16 pairs."""
    a, w = _full_range(5, seed=11)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "a_zero"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, ["rows", DEPTH]),
                     helper.make_tensor_value_info("b", TensorProto.INT8, [DEPTH, COLS])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["rows", COLS])],
        [numpy_helper.from_array(np.array(128, np.uint8), "a_zero"),
         numpy_helper.from_array(w, "w_unused")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # A weight product beside it, so that the graph is one the twin rewrites.
    model.graph.node.append(helper.make_node("MatMulInteger", ["a", "w_unused", "a_zero"],
                                             ["y2"]))
    model.graph.output.append(helper.make_tensor_value_info("y2", TensorProto.INT32,
                                                            ["rows", COLS]))
    twin, _ = _twin_of(model)
    fed = {i.name: i.type.tensor_type.elem_type for i in twin.graph.input}
    assert fed["b"] == TensorProto.UINT8
    b_u8 = (w.astype(np.int16) + 128).astype(np.uint8)
    y, y2 = _session(twin).run(None, {"a": a, "b": b_u8})
    exact = (a.astype(np.int64) - 128) @ w.astype(np.int64)
    assert np.array_equal(y.astype(np.int64), exact)
    assert np.array_equal(y2.astype(np.int64), exact)


def test_a_fed_int8_operand_that_something_else_reads_stays_int8() -> None:
    """Reading the input as uint8 would shift what every reader sees: where another node reads
    it too, the twin leaves it as it is."""
    _, w = _full_range(2, seed=12)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "a_zero"], ["y"]),
         helper.make_node("Cast", ["b"], ["b_float"], to=TensorProto.FLOAT),
         helper.make_node("MatMulInteger", ["a", "w", "a_zero"], ["y2"])],
        "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, ["rows", DEPTH]),
              helper.make_tensor_value_info("b", TensorProto.INT8, [DEPTH, COLS])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["rows", COLS]),
         helper.make_tensor_value_info("b_float", TensorProto.FLOAT, [DEPTH, COLS]),
         helper.make_tensor_value_info("y2", TensorProto.INT32, ["rows", COLS])],
        [numpy_helper.from_array(np.array(128, np.uint8), "a_zero"),
         numpy_helper.from_array(w, "w")])
    twin, _ = _twin_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    kinds = {i.name: i.type.tensor_type.elem_type for i in twin.graph.input}
    assert kinds["b"] == TensorProto.INT8
    product = next(n for n in twin.graph.node if n.output[0] == "y")
    assert list(product.input) == ["a", "b", "a_zero"]


def test_products_inside_subgraphs_are_made_exact_too() -> None:
    """A Hugging Face "merged" decoder keeps its products in the branches of an If, reading
    initializers of the outer graph."""
    a, w = _full_range(3, seed=8)

    def branch(name: str):
        return helper.make_graph(
            [helper.make_node("MatMulInteger", ["a", "w", "a_zero"], [f"{name}_y"])], name, [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.INT32, ["rows", COLS])])

    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=branch("then"),
                          else_branch=branch("else"))], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["rows", DEPTH]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["rows", COLS])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(128, np.uint8),
                                                                  "a_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    twin, _ = _twin_of(model)
    exact = (a.astype(np.int64) - 128) @ w.astype(np.int64)
    for flag in (True, False):
        got = _session(twin).run(None, {"a": a, "flag": np.array(flag)})[0]
        assert np.array_equal(got, exact)


def test_the_probes_kept_graphs_are_the_ones_onnx_builds() -> None:
    """The probe runs stored bytes so that no transcription pays for importing onnx."""
    import base64
    import zlib

    stored = tuple(zlib.decompress(base64.b64decode(m)) for m in int8_exact._PROBE_MODELS)
    assert stored == int8_exact.probe_models()
    assert isinstance(int8_exact._probe(), bool)
