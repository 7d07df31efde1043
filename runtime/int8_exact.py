"""Exact int8 products on every x86-64 CPU: a twin graph where onnxruntime's u8s8 kernel saturates.

as2d's int8 graphs multiply uint8 activations (each row shifted by 128) by int8 weights
(``MatMulIntegerToFloat``; the drafters' ``DynamicQuantizeMatMul``; ``MatMulInteger`` in
Hugging Face exports). Where the CPU has VNNI (AVX-512 VNNI, AVX-VNNI) or AMX, onnxruntime's
kernel adds the products straight into int32: exact. Where it has AVX2 alone, the kernel first
adds each pair of products into a saturating int16 (``vpmaddubsw``), and 255·127 + 255·127 does
not fit: a pair worth 64,770 is cut to 32,767. Measured on an AMD EPYC (Zen 3, AVX2, no VNNI):
products of 512 full-range values off by up to a fifth of the largest result, on every row
count. That is not rounding; it is a different model, and only on some CPUs.

The same integers through the u8u8 kernel are exact everywhere: it widens both operands to int16
before multiplying. So where a probe shows saturation (:func:`u8s8_saturates`: a product built
to overflow an int16 pair, run once per process — measured, not read off a CPU flag), each int8
graph is loaded through a twin whose int8 weights are stored as uint8 plus 128 with a zero point
of 128 (:func:`exact_graph`); an int8 operand fed at run time (the window's cross-attention keys
and values, :mod:`as2d.runtime.whisper.cross`) becomes a uint8 input the caller fills the same
way. The twin computes what a VNNI CPU computes from the bundle, so a
bundle means one model on every CPU; every row stays independent of the others (AS²D's
losslessness rests on that, and the row check in :mod:`as2d.runtime.rows` still runs on what
is loaded). The u8u8 kernel is slower than the saturating one (measured there: 1.1–2× a
product); correct first.

A twin is written once per graph, beside it in the model's bundle (where the model's other
caches live) or, for a graph elsewhere or in a read-only folder, in the user cache; its name
holds the source's size and time (and in the cache its path), so a reconverted bundle gets a
new one. A graph without int8 weight products gets a small marker instead, so that later
loads need not read it again.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from as2d.runtime.files import exclusive, user_cache, write_replacing

TWIN_VERSION = 3
PRUNE_AFTER_S = 600.0  # an old twin goes only once it has not been touched for this long
# op → (index of B, index of B's zero point) among its inputs
_PRODUCTS = {"MatMulInteger": (1, 3), "MatMulIntegerToFloat": (1, 5),
             "DynamicQuantizeMatMul": (1, 3)}
# op → index of A's zero point (its type is A's); DynamicQuantizeMatMul quantises A to uint8
_A_ZERO_POINT = {"MatMulInteger": 2, "MatMulIntegerToFloat": 4}
_FED_ZERO = "as2d.fed_int8.zero"  # the zero point of int8 inputs a twin reads as uint8


@functools.cache
def u8s8_saturates() -> bool:
    """Whether onnxruntime's uint8 × int8 product loses bits on this CPU, and the uint8 × uint8
    one does not (then twins are worth loading). One small run of each, once per process; a
    probe that cannot run (an onnxruntime without these kernels) means no twins."""
    try:
        return _probe()
    except Exception as exc:  # noqa: BLE001 - the graphs then run as they are
        import warnings

        warnings.warn(f"as2d: the int8 kernel probe failed ({exc}); int8 graphs run as they are",
                      RuntimeWarning, stacklevel=2)
        return False


_ROWS, _DEPTH, _COLS = 8, 64, 16


def probe_models() -> tuple[bytes, bytes]:
    """The probe's two one-op graphs (uint8 × int8, uint8 × uint8 with zero point 128), built
    with onnx. The probe runs the copies kept in :data:`_PROBE_MODELS` instead: importing onnx
    costs a process 1.3–1.5 s, which every transcription would pay (a test checks they match)."""
    from onnx import TensorProto, helper, numpy_helper

    def model(weights: np.ndarray, b_zero: np.ndarray | None) -> bytes:
        inits = [numpy_helper.from_array(weights, "b"),
                 numpy_helper.from_array(np.array(1.0, np.float32), "a_scale"),
                 numpy_helper.from_array(np.ones(_COLS, np.float32), "b_scale"),
                 numpy_helper.from_array(np.array(0, np.uint8), "a_zero")]
        inputs = ["a", "b", "a_scale", "b_scale", "a_zero"]
        if b_zero is not None:
            inits.append(numpy_helper.from_array(b_zero, "b_zero"))
            inputs.append("b_zero")
        graph = helper.make_graph(
            [helper.make_node("MatMulIntegerToFloat", inputs, ["y"], domain="com.microsoft")],
            "probe", [helper.make_tensor_value_info("a", TensorProto.UINT8, ["rows", _DEPTH])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", _COLS])], inits)
        return helper.make_model(graph, ir_version=8, producer_name="as2d", opset_imports=[
            helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        ).SerializeToString()

    w = _probe_weights()
    return model(w, None), model((w.astype(np.int16) + 128).astype(np.uint8),
                                 np.full(_COLS, 128, np.uint8))


def _probe_weights() -> np.ndarray:
    w = np.full((_DEPTH, _COLS), 127, np.int8)
    w[:, ::2] = -127
    return w


# probe_models(), zlib-compressed and base64-encoded (tests/test_int8_exact.py checks them)
_PROBE_MODELS = (
    "eNrtlDELwjAUBpNa2/BQSIPg7tjBwdHFkkE0IC5OLpLUKEJrJK2ILurg5o+2Sh06O1qOB4/v9iOEuTIbrIcPgAlgCViBL1dZLBMNviofT64u2hqGz73OTOazYzLd53qr7cKMEyPzYTs2aT/dxdZkZpOz5sEapcMnIRGhtMGxEjdyv9bU1PwrYUAx/7ZFuAjdRuG8yEMxlp0R0Xv85cI2dXhZK4HRslskjTGgxGEt8JhrzSkDh0SqEOePwBVBuQuIBjyAatEofgGaKUQC",
    "eNrj4BBiSSw2SrFay8UVwMWYyMWYxMWeGF+cnJiTysWeBGWwJcZXpRblc7ElgWkhxkolEd/EEt/SHM+8ktT01KKQfLec/MQSK97k/Fy93Mzkovzi/LQSIdaCovykVK0eDg4HDgEBJifGJK8GDsb/o3AUjsKRCrUEBRidYGWMFwsDQ4O9lj+weAAKQssbLweQICVYixdY2kBLLS9GBi05cPEDLb68BBrQQJQ4sOgTEuIS4GAS4uFiE2Ipyi8v5mLicEgCSlSCJRhRJAScWLgYBASdBLlQSzwBRgDsK1JX",
)


def _probe() -> bool:
    import base64
    import zlib

    import onnxruntime as ort

    rows = _ROWS

    def run(model: bytes) -> np.ndarray:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        return np.concatenate([session.run(None, {"a": a[:n]})[0] for n in (1, rows)])

    signed_model, unsigned_model = (zlib.decompress(base64.b64decode(m)) for m in _PROBE_MODELS)
    a = np.full((rows, _DEPTH), 255, np.uint8)
    a[::2, ::3] = 200  # not one constant: any pairing of k overflows all the same
    exact = np.concatenate([a[:1], a]).astype(np.int64) @ _probe_weights().astype(np.int64)
    signed, unsigned = run(signed_model), run(unsigned_model)
    return bool(np.any(signed != exact)) and bool(np.all(unsigned == exact))


def twins_wanted() -> bool:
    """Twins are loaded where the probe shows saturation, unless ``$AS2D_INT8_EXACT=0`` asks
    for the graphs as they are (to measure what saturation costs; results then differ by CPU)."""
    return os.environ.get("AS2D_INT8_EXACT", "1") != "0" and u8s8_saturates()


def mode() -> str:
    """How this process computes int8 weight products: "u8s8" (the bundle's graphs as they
    are) or "u8u8" (their exact twins). Part of what results remembered on disk are keyed by."""
    return "u8u8" if twins_wanted() else "u8s8"


_twinned = threading.Event()  # a twin was loaded in this process (for --stats)


def twinned() -> bool:
    """Whether this process loaded at least one twin (so ``--stats`` says so only then)."""
    return _twinned.is_set()


def exact_graph(path: str | Path) -> Path | bytes:
    """The graph to load for ``path``: itself where int8 products are exact here (or it has
    none), else its u8u8 twin — a file beside it in an as2d bundle, else in the user cache,
    or the serialised graph when no folder can be written."""
    path = Path(path)
    if not twins_wanted():
        return path
    folder, prefix = _place(path)
    stem = f"{prefix}{_digest(path)}"
    if folder is None:
        model, _ = _twin(path)
        return path if model is None else _serialised(model, path)
    twin, same = folder / f"{stem}.onnx", folder / f"{stem}.same"
    # Both notes are written atomically, so a load that finds one needs no lock (every
    # session load after the first, in every process).
    if twin.exists():
        _twinned.set()
        return twin
    if same.exists():
        return path
    # Between processes: one builds a twin while the others wait, then find it (N workers
    # starting at once must not each hold a large model's twin in memory).
    with exclusive(folder / f"{stem}.lock"):
        if twin.exists():
            _twinned.set()
            return twin
        if same.exists():
            return path
        model, external = _twin(path)
        if model is None:
            _write_text(same, str(path.resolve()))
            return path
        if not _write_twin(model, folder, stem, external, path):
            return _serialised(model, path)
    _prune(folder, prefix, keep=stem)
    _twinned.set()
    return twin


def _digest(path: Path) -> str:
    """The source as a twin's name knows it: the size and time of the graph and of the weight
    files beside it (``decoder.onnx.data``, ``model.onnx_data``), and the twin format."""
    parts = [str(TWIN_VERSION)]
    for f in sorted(path.parent.glob(f"{path.name}*")):
        st = f.stat()
        parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def _serialised(model, path: Path) -> bytes | Path:
    """The twin in memory, when no folder could keep it; a graph too large for that (2 GB)
    runs as it is, with a warning."""
    try:
        _twinned.set()
        return model.SerializeToString()
    except ValueError:
        import warnings

        warnings.warn(f"as2d: {path.name}: no folder to write its exact int8 twin and too large "
                      "to hold in memory; it runs with this CPU's saturating int8 kernel",
                      RuntimeWarning, stacklevel=3)
        return path


def _place(path: Path) -> tuple[Path | None, str]:
    """Where ``path``'s twin lives and the start of its name (then the source's digest): beside
    it in a writable as2d bundle (a folder with a manifest: models are kept together, and a
    removed or reconverted bundle takes its twins with it), else in the user cache, named by
    the source's path too (never beside a graph in someone else's folder, a package's say)."""
    folder = path.parent
    if (folder / "manifest.json").is_file() and os.access(folder, os.W_OK | os.X_OK):
        return folder, f"{path.stem}.u8u8-"
    cache = user_cache("int8-exact")
    if cache is None:
        return None, ""
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache, f"{path.stem}-{tag}-"


def _graphs(graph) -> Iterator:
    """``graph`` and every subgraph in it (the branches of ``If``, the bodies of ``Loop`` and
    ``Scan``: a Hugging Face "merged" decoder keeps its products there)."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


def _twin(path: Path):
    """The graph at ``path`` with every uint8 × int8 weight product made uint8 × uint8 (None
    when it has none), and whether the source keeps its weights as external data. Weights
    are read only when there is a product to change."""
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.load(str(path), load_external_data=False)
    nodes = [n for g in _graphs(model.graph) for n in g.node]
    if not any(n.op_type in _PRODUCTS for n in nodes):
        return None, False
    external = any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    if external:
        _load_external(model, path.parent)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    unsigned = _uint8_values(model.graph, inits)

    def a_is_u8(node) -> bool:
        a_zero = _A_ZERO_POINT.get(node.op_type)
        return (node.op_type == "DynamicQuantizeMatMul"
                or (a_zero is not None and len(node.input) > a_zero
                    and node.input[a_zero] in unsigned)
                or node.input[0] in unsigned)

    def takes_fed(node, name: str) -> bool:
        """``node`` reads ``name`` only as the B of a uint8 product with no zero point of its
        own: the product that a uint8 input (+ 128, zero point 128) leaves exact."""
        if node.op_type not in _PRODUCTS or node.domain not in ("", "com.microsoft"):
            return False
        b_index, zero_index = _PRODUCTS[node.op_type]
        return (list(node.input).count(name) == 1 and node.input[b_index] == name
                and a_is_u8(node)
                and not (len(node.input) > zero_index and node.input[zero_index]))

    readers: dict[str, list] = {}
    for node in nodes:
        for name in set(node.input):
            readers.setdefault(name, []).append(node)
    # An int8 input (Whisper's cross-attention keys and values) is read as uint8 only where
    # every node that reads it can take it so: any other reader would see shifted values.
    signed_inputs = {i.name: i for i in graph.input
                     if i.type.tensor_type.elem_type == TensorProto.INT8
                     and all(takes_fed(n, i.name) for n in readers.get(i.name, []))}
    made: dict[str, str] = {}
    fed: set[str] = set()  # int8 graph inputs (a window's keys/values) now read as uint8
    for node in nodes:
        if node.op_type not in _PRODUCTS or node.domain not in ("", "com.microsoft"):
            continue
        b_index, zero_index = _PRODUCTS[node.op_type]
        b = inits.get(node.input[b_index])
        if node.input[b_index] in signed_inputs:
            # A fed operand: the graph takes it as uint8 (+ 128, as2d.runtime.whisper.cross
            # feeds it so) with zero point 128.
            while len(node.input) <= zero_index:
                node.input.append("")
            node.input[zero_index] = _FED_ZERO
            fed.add(node.input[b_index])
            continue
        if not a_is_u8(node) or b is None or b.data_type != TensorProto.INT8:
            continue
        zero_name = node.input[zero_index] if len(node.input) > zero_index else ""
        zero = inits.get(zero_name) if zero_name else None
        if zero_name and (zero is None or zero.data_type != TensorProto.INT8):
            continue  # a computed zero point: leave the product as it is
        key = f"{b.name}|{zero_name}"
        if key not in made:
            b_u8 = _unsigned_copy(graph, b, f"{b.name}.u8.{len(made)}")
            if zero is not None:
                z = (numpy_helper.to_array(zero).astype(np.int16) + 128).astype(np.uint8)
            else:
                z = np.full(_columns(node, inits), 128, np.uint8)
            graph.initializer.append(numpy_helper.from_array(z, f"{b_u8}.zero"))
            made[key] = b_u8
        node.input[b_index] = made[key]
        while len(node.input) <= zero_index:
            node.input.append("")
        node.input[zero_index] = f"{made[key]}.zero"
    if not made and not fed:
        return None, external
    if fed:
        graph.initializer.append(numpy_helper.from_array(np.array(128, np.uint8), _FED_ZERO))
        for name in fed:
            signed_inputs[name].type.tensor_type.elem_type = TensorProto.UINT8
    _gathers_read_the_copy(model, inits, made)
    used = {name for g in _graphs(graph) for n in g.node for name in n.input}
    used |= {o.name for g in _graphs(graph) for o in g.output}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return model, external


def _unsigned_copy(graph, b, name: str) -> str:
    """A uint8 copy of the int8 initializer ``b`` (each value + 128), named ``name``."""
    from onnx import numpy_helper

    graph.initializer.append(numpy_helper.from_array(
        (numpy_helper.to_array(b).astype(np.int16) + 128).astype(np.uint8), name))
    return name


def _gathers_read_the_copy(model, inits: dict, made: dict[str, str]) -> None:
    """A tied table is also read row by row (``Gather``: the decoder's input embedding). Those
    readers take rows of the uint8 copy and subtract 128 again (exact), so the int8 table
    need not be kept beside its copy."""
    from onnx import TensorProto, helper

    copies = {key.split("|", 1)[0]: name for key, name in made.items()}
    added = []
    for g in _graphs(model.graph):
        for node in g.node:
            if node.op_type != "Gather" or node.input[0] not in copies:
                continue
            table, out = node.input[0], node.output[0]
            rows = f"{out}.u8"
            node.input[0], node.output[0] = copies[table], rows
            added.append((g, node, [
                helper.make_node("Cast", [rows], [f"{rows}.i16"], to=TensorProto.INT16),
                helper.make_node("Sub", [f"{rows}.i16", f"{copies[table]}.i16_128"],
                                 [f"{rows}.signed"]),
                helper.make_node("Cast", [f"{rows}.signed"], [out], to=TensorProto.INT8)]))
    if not added:
        return
    for name in {n.input[1] for _, _, nodes in added for n in nodes if n.op_type == "Sub"}:
        model.graph.initializer.append(helper.make_tensor(name, TensorProto.INT16, [], [128]))
    for g, gather, nodes in added:
        at = next(i for i, n in enumerate(g.node) if n is gather) + 1
        for k, n in enumerate(nodes):
            g.node.insert(at + k, n)


def _load_external(model, folder: Path) -> None:
    """Read the external weights into the graph. By hand rather than with onnx's loader, which
    refuses a data file that is a symbolic link (as a bundle's may be; onnxruntime follows
    them)."""
    from onnx import TensorProto

    files: dict[str, bytes] = {}
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        where = Path(info["location"])
        if where.is_absolute() or ".." in where.parts:
            raise ValueError(f"external data outside the graph's folder: {where}")
        if info["location"] not in files:
            files[info["location"]] = (folder / where).resolve().read_bytes()
        offset = int(info.get("offset", 0))
        data = files[info["location"]]
        length = int(info["length"]) if "length" in info else len(data) - offset
        t.raw_data = data[offset:offset + length]
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


def _uint8_values(graph, inits: dict) -> set[str]:
    """Names of values known to be uint8: initializers, graph inputs, DynamicQuantizeLinear's
    output and QuantizeLinear's output with a uint8 zero point (or none, uint8 by default)."""
    from onnx import TensorProto

    out = {n for n, t in inits.items() if t.data_type == TensorProto.UINT8}
    out |= {i.name for i in graph.input if i.type.tensor_type.elem_type == TensorProto.UINT8}
    for node in (n for g in _graphs(graph) for n in g.node):
        if node.op_type == "DynamicQuantizeLinear":
            out.add(node.output[0])
            out.add(node.output[2])
        elif node.op_type == "QuantizeLinear":
            zero = node.input[2] if len(node.input) > 2 and node.input[2] else None
            if zero is None or zero in out:
                out.add(node.output[0])
        elif node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to == TensorProto.UINT8:
                out.add(node.output[0])
    return out


def _columns(node, inits: dict) -> tuple[int, ...]:
    """The shape of B's zero point: one per column where B's scale is one per column."""
    from onnx import numpy_helper

    scale_index = {"MatMulIntegerToFloat": 3, "DynamicQuantizeMatMul": 2}.get(node.op_type)
    if scale_index is not None and len(node.input) > scale_index:
        scale = inits.get(node.input[scale_index])
        if scale is not None:
            return numpy_helper.to_array(scale).shape
    return ()


def _write_twin(model, folder: Path, stem: str, external: bool, source: Path) -> bool:
    """The twin (and its weights, as external data when the source kept them so) in
    ``folder``, with the source's path beside it (:func:`_prune`); the graph file is renamed
    into place last, so a half-written twin is never found."""
    import onnx

    if not _write_text(folder / f"{stem}.source", str(source.resolve())):
        return False
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".twin-") as tmp:
            name = f"{stem}.onnx"
            if external:
                _move_weights_out(model, Path(tmp) / f"{name}.data", f"{name}.data")
                onnx.save_model(model, str(Path(tmp) / name))
                os.replace(Path(tmp) / f"{name}.data", folder / f"{name}.data")
            else:
                onnx.save_model(model, str(Path(tmp) / name))
            os.replace(Path(tmp) / name, folder / name)
        return True
    except (OSError, ValueError):
        return False


def _move_weights_out(model, data: Path, location: str, threshold: int = 1024) -> None:
    """Every initializer of ``threshold`` bytes or more into the file ``data`` (named
    ``location`` in the graph), at 64-byte aligned offsets. By hand: onnx's own helper asks
    for a time-based UUID, which opens a network socket to read the machine's address."""
    from onnx import TensorProto

    with open(data, "wb") as f:
        for t in model.graph.initializer:
            if not t.HasField("raw_data") or len(t.raw_data) < threshold:
                continue
            offset = -(-f.tell() // 64) * 64
            f.write(b"\0" * (offset - f.tell()))
            f.write(t.raw_data)
            for key, value in (("location", location), ("offset", str(offset)),
                               ("length", str(len(t.raw_data)))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            t.data_location = TensorProto.EXTERNAL
            t.ClearField("raw_data")


def _write_text(path: Path, text: str) -> bool:
    """Written whole or not at all (a pruner in another process may read it at any moment)."""
    return write_replacing(path, lambda tmp: tmp.write_text(text))


def _prune(folder: Path, prefix: str, keep: str) -> None:
    """Twins of earlier versions of the same graph (a reconverted bundle) go, and twins and
    markers of graphs that are gone (a deleted model folder, a test's temporary one)."""
    now = time.time()

    def settled(f: Path) -> bool:  # not just written: another process may be about to load it
        try:
            return now - f.stat().st_mtime > PRUNE_AFTER_S
        except OSError:
            return False

    doomed = {old.name for old in folder.glob(f"{prefix}*")
              if not old.name.startswith(keep) and settled(old)}
    for note in [*folder.glob("*.source"), *folder.glob("*.same")]:
        try:
            gone = settled(note) and not Path(note.read_text()).exists()
        except OSError:
            continue
        if gone:
            stem = note.name.rsplit(".", 1)[0]
            doomed |= {f.name for f in folder.glob(f"{stem}.*")}
    for name in doomed:
        try:
            (folder / name).unlink()
        except OSError:
            pass
