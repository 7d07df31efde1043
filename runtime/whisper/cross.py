"""A window's cross-attention keys and values in the form a decoder graph reads them.

The encoder gives them in fp32 (keys ``cross_k_i [H, dh, S]``, values ``cross_v_i [H, S, dh]``).
int8 decoders (:class:`as2d.models.whisper_onnx.Cross`) read them as int8 with a scale per head
and frame (keys) or per head and channel (values), quantised here once per window rather than
in every pass: a pass then reads a quarter of the bytes, which were half of its time. Where
onnxruntime's uint8 × int8 kernel saturates (:mod:`as2d.runtime.int8_exact`), a twin graph reads
them as uint8 (zero point 128). The form is read off the loaded session's inputs. The quantiser
is a small onnxruntime graph (8.5 ms for base's twelve tensors, 18 ms in numpy) kept as bytes:
importing onnx to build it would cost every process a second (a test checks the bytes).
"""

from __future__ import annotations

import base64
import threading
import zlib
from enum import Enum

import numpy as np


class CrossForm(Enum):
    FP32 = "fp32"
    INT8 = "int8"
    UINT8 = "uint8"  # the int8 values + 128 (a twin's input on a saturating CPU)

    @classmethod
    def of(cls, session) -> CrossForm:
        """The form in which ``session`` (an onnxruntime decoder session) reads the window: its
        keys' and values' (ValueError where they differ: no as2d graph reads them apart)."""
        kinds = {i.name: i.type for i in session.get_inputs()}
        keys, values = ({"tensor(int8)": cls.INT8, "tensor(uint8)": cls.UINT8}.get(
            kinds.get(name), cls.FP32) for name in ("cross_k_0", "cross_v_0"))
        if keys is not values:
            raise ValueError(f"a decoder graph that reads the audio's keys as {keys.value} "
                             f"and its values as {values.value}; reinstall the model")
        return keys


def quantiser_model() -> bytes:
    """The quantiser's graph, built with onnx: ``x [a, b, c]`` (fp32) → ``q`` (int8, ``x``
    over its scale, rounded half to even) and ``scale [a, 1, c]`` (each slice's largest
    magnitude over 127, at least 1e-12) along axis 1: a key's frame, a value's channel."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(1.0 / 127.0, np.float32), "step"),
             numpy_helper.from_array(np.array(1e-12, np.float32), "floor")]
    nodes = [helper.make_node("Abs", ["x"], ["magnitude"]),
             helper.make_node("ReduceMax", ["magnitude"], ["peak"], axes=[1], keepdims=1),
             helper.make_node("Mul", ["peak", "step"], ["unfloored"]),
             helper.make_node("Max", ["unfloored", "floor"], ["scale"]),
             helper.make_node("Div", ["x", "scale"], ["steps"]),
             helper.make_node("Round", ["steps"], ["rounded"]),
             helper.make_node("Cast", ["rounded"], ["q"], to=TensorProto.INT8)]
    graph = helper.make_graph(
        nodes, "as2d_cross_quantiser",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b", "c"])],
        [helper.make_tensor_value_info("q", TensorProto.INT8, ["a", "b", "c"]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["a", 1, "c"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="as2d")
    model.ir_version = 8
    return model.SerializeToString()


_QUANTISER = (
    "eNplkE1OwzAQhXHsqMlDaopboEKURZZhx7JiAYVVpW66ZFM5sUFR0/w5Rj1ED8FBOAJX4Q44iaou2Ixmvqd582zP"
    "40zoBzn/dTAG2XN/Jz7ytDFShfQ51pjjRDgrldiG/lpJk6iV2EfnYGKv9BP5IoMogLdVqpTpTk8tcHCLbgFMN6rk"
    "vsnfs6KolQzpymS4w4nA7Rru6kRk9rL1xpWNgx5Ybh10SF/TT1yjn/igLkwurZ27bhvMcCScVCF7EbqJfDhNMaU2"
    "DZ+079wkdaH1pjIib1Kt6mg4Iosu35IxhzxGgZ37MEv28324f7tpf+USY4/wAJQT0Za4LUlstarT6H9tdsw+Abe7"
    "w153PNLJC4az0cUf6X5big==")


class CrossQuantiser:
    """A window's fp32 keys and values → the form a decoder reads (:meth:`__call__`); one per
    model, its session made on first use with the model's threads."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, int(threads))
        self._session = None
        self._lock = threading.Lock()

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if self._session is None:
                import onnxruntime as ort

                so = ort.SessionOptions()
                so.intra_op_num_threads = self.threads
                so.inter_op_num_threads = 1
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                so.log_severity_level = 3
                from as2d.runtime.sessions import shared_arena

                so.enable_mem_pattern = False  # see as2d.runtime.sessions.shared_arena
                if shared_arena():  # the process's one arena
                    so.add_session_config_entry("session.use_env_allocators", "1")
                self._session = ort.InferenceSession(
                    zlib.decompress(base64.b64decode(_QUANTISER)), so,
                    providers=["CPUExecutionProvider"])
        q, scale = self._session.run(None, {"x": np.ascontiguousarray(x, dtype=np.float32)})
        return q, scale

    def __call__(self, cross: dict[str, np.ndarray], form: CrossForm) -> dict[str, np.ndarray]:
        """The encoder's ``cross`` (fp32 ``cross_k_i``/``cross_v_i``) in ``form``: as it is for
        fp32, else each tensor as integers in [-127, 127] (int8, or + 128 as uint8) with its
        ``cross_k_scale_i`` (one per head and frame) or ``cross_v_scale_i`` (one per head and
        channel)."""
        if form is CrossForm.FP32:
            return cross
        out: dict[str, np.ndarray] = {}
        for name, x in cross.items():
            kind, _, layer = name.removeprefix("cross_").partition("_")
            if not name.startswith("cross_") or kind not in ("k", "v"):
                out[name] = x
                continue
            q, scale = self._run(x)
            if form is CrossForm.UINT8:  # the same integers + 128: flip the sign bit
                q = q.view(np.uint8) ^ np.uint8(0x80)
            out[name] = q
            out[f"cross_{kind}_scale_{layer}"] = scale
        return out
