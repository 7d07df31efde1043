"""The int8 copy of the CAM++ graph that diarization embeds with, made at install from the float
graph and a table of activation ranges kept in the repository.

Static int8 (onnxruntime's QDQ format): the convolutions' weights in int8 per output channel,
their input and output activations in uint8 with ranges fixed in advance; everything else (the
BN-ReLU affine steps, the masking gates' sigmoid, the statistics pooling) stays float. Weights
and activations use 7 bits of range (``reduce_range``): AVX2's u8×s8 multiply-add saturates its
16-bit sums with full-range operands, and the EPYC machines this was measured on have no VNNI.

The activation ranges (``campplus_int8_ranges.json``, keyed by the float graph's tensor names)
were computed once by ``scripts/bench_speaker_graph.py --ranges`` on the local-speaker clips
the diarizer embeds in one dev conversation of ``bench/diarization.py``'s set (min/max
calibration; the recipe is in the table). Shipping them means an install needs no audio and
gives the same graph on every machine; a float graph whose tensors the table does not cover
(the graph changed) is an error that says to compute the table again.

Measured (``bench/results/speaker-graph-cpu.json``): 0.71× the float graph's CPU, cosine 0.98
to the float embeddings, the same dev DER and speaker counts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

RANGES_FILE = Path(__file__).with_name("campplus_int8_ranges.json")
OP_TYPES = ["Conv"]


def ranges_digest() -> str:
    """sha256 of the shipped range table: an installed int8 graph made from another table is
    made again."""
    return hashlib.sha256(RANGES_FILE.read_bytes()).hexdigest()


def calibrate(float_graph: Path, feats: list[np.ndarray], work: Path) -> dict[str, list[float]]:
    """Min/max of every input and output of the graph's convolutions over ``feats`` (each a
    model input ``[1, frames, 80]``), by onnxruntime's calibrator; ``work``: a scratch folder."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feats)

        def get_next(self):
            v = next(self.it, None)
            return None if v is None else {"feats": v}

    cal = create_calibrator(float_graph, OP_TYPES, augmented_model_path=work / "augmented.onnx",
                            calibrate_method=CalibrationMethod.MinMax)
    cal.collect_data(Reader())
    data = cal.compute_data()
    return {name: [float(np.ravel(t.range_value[0])[0]), float(np.ravel(t.range_value[1])[0])]
            for name, t in sorted(data.items())}


def quantize(float_graph: Path, dest: Path, ranges: dict[str, list[float]] | None = None) -> None:
    """``dest``: the int8 copy of ``float_graph`` with the given activation ranges (default: the
    shipped table). A ValueError (one line) if the table lacks a tensor the graph quantizes."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantType
    from onnxruntime.quantization.calibrate import TensorData, TensorsData
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer

    if ranges is None:
        ranges = json.loads(RANGES_FILE.read_text())["ranges"]
    model = load_model_with_shape_infer(Path(float_graph))
    weights = {i.name for i in model.graph.initializer}
    needed = {t for n in model.graph.node if n.op_type in OP_TYPES
              for t in (*n.input, *n.output) if t and t not in weights}
    missing = sorted(needed - set(ranges))
    if missing:
        raise ValueError(f"the CAM++ int8 range table has no range for {len(missing)} of the "
                         f"graph's tensors ({missing[0]}, ...): the graph changed; compute the "
                         "table again (scripts/bench_speaker_graph.py --ranges)")
    data = TensorsData(CalibrationMethod.MinMax, {
        k: TensorData(lowest=np.float32(lo), highest=np.float32(hi))
        for k, (lo, hi) in ranges.items() if k in needed})
    q = QDQQuantizer(model, True, True, QuantType.QInt8, QuantType.QUInt8, data, [], [],
                     OP_TYPES, {})
    q.quantize_model()
    onnx.save_model(q.model.model, str(dest))
