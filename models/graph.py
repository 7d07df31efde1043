"""A small helper for writing ONNX graphs by hand with ``onnx.helper``.

Our converters build the Whisper and LLM graphs node by node rather than exporting from a
framework: that keeps torch out of the install and lets us choose the exact op pattern that
onnxruntime runs fast and, for decoders, *row-independently* (see :meth:`Graph.linear`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
MS_DOMAIN = "com.microsoft"


@dataclass
class Graph:
    """Accumulates nodes, initializers and graph inputs/outputs."""

    name: str
    scope: str = ""  # prefix of generated value names (graphs that end up nested in one model)
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    _ids: count = field(default_factory=count)
    _consts: dict = field(default_factory=dict)
    _quantized: set = field(default_factory=set)
    # Weights streamed to this file as they are made (ONNX external data): the graph then holds
    # names and offsets only, so building a large-v3 graph never holds its weights twice, and a
    # graph past protobuf's 2 GB limit can be written at all. None: weights inside the graph.
    data_path: Path | None = None
    _data: object = None
    _data_size: int = 0

    # -- naming -------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        return f"{self.scope}{hint}_{next(self._ids)}"

    # -- values -------------------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, value: str, name: str, elem_type: int, shape: list) -> str:
        if value != name:
            self.op("Identity", value, out=name)
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def weight(self, name: str, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        if self.data_path is None or array.nbytes < 1024:
            self.initializers.append(numpy_helper.from_array(array, name))
            return name
        if self._data is None:
            self._data = open(self.data_path, "wb")
        pad = -self._data_size % 64  # aligned, so that onnxruntime can map the file
        self._data.write(b"\0" * pad + array.tobytes())
        offset, self._data_size = self._data_size + pad, self._data_size + pad + array.nbytes
        t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                        dims=array.shape, data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.data_path.name), ("offset", str(offset)),
                           ("length", str(array.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.initializers.append(t)
        return name

    def const(self, value, dtype=np.int64) -> str:
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            self._consts[key] = self.weight(self.fresh("const"), arr)
        return self._consts[key]

    # -- nodes --------------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: str, out: str | None = None, n_out: int = 1,
           domain: str = "", **attrs):
        outs = [out or self.fresh(op_type.lower())] if n_out == 1 else [
            self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, domain=domain or None,
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    # -- building blocks ----------------------------------------------------------------------
    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray, prefix: str,
                   eps: float = 1e-5) -> str:
        g = self.weight(f"{prefix}.gamma", gamma.astype(np.float32))
        b = self.weight(f"{prefix}.beta", beta.astype(np.float32))
        return self.op("LayerNormalization", x, g, b, axis=-1, epsilon=eps)

    def gelu(self, x: str) -> str:
        # Exact erf GELU as Whisper uses; onnxruntime fuses this pattern into one Gelu kernel.
        half = self.const(0.5, np.float32)
        one = self.const(1.0, np.float32)
        inv_sqrt2 = self.const(1.0 / np.sqrt(2.0), np.float32)
        e = self.op("Erf", self.op("Mul", x, inv_sqrt2))
        return self.op("Mul", self.op("Mul", x, half), self.op("Add", e, one))

    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray | None, prefix: str,
               quant: str = "fp32") -> str:
        """``x @ weight.T + bias`` for a 2-D ``x`` and ``weight`` shaped ``[out, in]``.

        ``quant="int8"`` stores the weight as int8 with one scale per output column and
        quantises the activations **per row** (symmetric, one scale per token). Every row is
        then computed independently of the other rows in the call, bit for bit: a verification
        pass over ``k`` tokens yields exactly the logits that ``k`` single-token steps would.
        onnxruntime's own dynamic quantisation uses one scale for the whole tensor, which would
        make speculative verification disagree with plain decoding. The integer product runs
        in onnxruntime's u8s8 kernel: activations are shifted by 128 into uint8 and the
        kernel's zero point takes the shift back out.
        """
        w = np.asarray(weight, dtype=np.float32)
        if quant == "fp32":
            y = self.op("MatMul", x, self.weight(f"{prefix}.weight", w.T))
        elif quant == "int8":
            y = self._linear_int8(x, w, prefix)
        elif quant == "int8-weights":
            # The same int8 weights and column scales as ``int8``, dequantised in the graph:
            # OpenVINO's CPU plugin keeps such weights in int8 and quantises the activations
            # itself, in groups along each row (``OpenVINOEncoder``, precision ``int8``).
            # onnxruntime would run it in float; only OpenVINO reads this form.
            wq, scale = self.quantized_weight(w, prefix)
            y = self.op("MatMul", x, self.op("DequantizeLinear", wq, scale, axis=1))
        elif quant == "int8-tensor":
            # One activation scale for the whole tensor, quantisation fused into the kernel:
            # rows then depend on each other. Only for graphs whose rows need not be exact
            # (drafters); measured no faster than the per-row form for our encoders.
            wq, scale = self.quantized_weight(w, prefix)
            return self.op("DynamicQuantizeMatMul", x, wq, scale, "",
                           self.weight(f"{prefix}.bias", bias.astype(np.float32))
                           if bias is not None and np.any(bias) else "",
                           domain=MS_DOMAIN)
        else:
            raise ValueError(f"unknown quantisation {quant!r}")
        if bias is not None and np.any(bias):
            y = self.op("Add", y, self.weight(f"{prefix}.bias", bias.astype(np.float32)))
        return y

    def quantized_weight(self, w: np.ndarray, prefix: str) -> tuple[str, str]:
        """int8 copy of ``w [out, in]``, stored once per prefix as ``[in, out]``.

        Returns the names of the int8 weight and its per-output scale, so that another consumer
        (the tied embedding lookup) can read the same tensors.
        """
        names = (f"{prefix}.weight_q", f"{prefix}.weight_scale")
        if names[0] in self._quantized:
            return names
        self._quantized.add(names[0])
        wt = np.asarray(w, dtype=np.float32).T  # [in, out]
        col_scale = np.abs(wt).max(axis=0) / 127.0
        col_scale[col_scale == 0] = 1.0
        wq = np.clip(np.rint(wt / col_scale), -127, 127).astype(np.int8)
        self.weight(names[0], wq)
        self.weight(names[1], col_scale.astype(np.float32))
        return names

    def embed_int8(self, emb: np.ndarray, tokens: str, prefix: str) -> str:
        """Rows of a tied embedding ``emb [vocab, d]`` for ``tokens``, read from the int8 copy
        the output projection uses (so the table is stored once)."""
        wq, scale = self.quantized_weight(emb, prefix)
        cols = self.op("Cast", self.op("Gather", wq, tokens, axis=1), to=TensorProto.FLOAT)
        return self.op("Mul", self.op("Transpose", cols, perm=[1, 0]),  # [d, T] -> [T, d]
                       self.op("Unsqueeze", self.op("Gather", scale, tokens, axis=0),
                               self.const([1])))

    def _linear_int8(self, x: str, w: np.ndarray, prefix: str) -> str:
        wq_name, scale_name = self.quantized_weight(w, prefix)
        # One scale per row (x is 2-D, [rows, in]): max|x| / 127.
        row_max = self.op("ReduceMax", self.op("Abs", x), axes=[-1], keepdims=1)
        row_scale = self.op("Max", self.op("Mul", row_max, self.const(1.0 / 127.0, np.float32)),
                            self.const(1e-12, np.float32))
        # QuantizeLinear takes a 1-D per-axis scale and a zero point of the same shape.
        flat_scale = self.op("Reshape", row_scale, self.const([-1]))
        zero_point = self.op("Cast", self.op("Add", self.op("Mul", flat_scale,
                                                             self.const(0.0, np.float32)),
                                              self.const(128.0, np.float32)),
                             to=TensorProto.UINT8)
        xq = self.op("QuantizeLinear", x, flat_scale, zero_point, axis=0)
        # (xq - 128) · wq, exact in int32, converted and scaled per column in one kernel (its
        # A-scale is a scalar 1: the per-row scale follows, element by element, so each row
        # stays independent of the others). Written out on purpose: onnxruntime would fuse a
        # MatMulInteger → Cast → Mul(row ⊗ column scale) chain into this op and then read the
        # per-row scale as a scalar.
        y = self.op("MatMulIntegerToFloat", xq, wq_name, self.const(1.0, np.float32),
                    scale_name, self.const(128, np.uint8), domain=MS_DOMAIN)
        return self.op("Mul", y, row_scale)

    # -- finish -------------------------------------------------------------------------------
    def model(self, opsets: tuple = ((("", OPSET)), (MS_DOMAIN, 1)), producer: str = "as2d"
              ) -> onnx.ModelProto:
        if self._data is not None:  # every weight is written: the data file is complete
            self._data.close()
            self._data = None
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                        for d, v in opsets],
                                  producer_name=producer)
        model.ir_version = 8
        return model


def save_model(model: onnx.ModelProto, path, external_data: bool = False) -> None:
    """Write a graph; ``external_data``: its weights in ``<name>.data`` beside it (needed past
    protobuf's 2 GB limit; onnxruntime also builds a session faster from such a file)."""
    if external_data:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{path.name}.data", size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
