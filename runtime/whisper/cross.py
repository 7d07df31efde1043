"""A window's cross-attention keys and values in the form a decoder graph reads them.

The encoder gives them in fp32: keys ``cross_k_i [H, dh, S]``, values ``cross_v_i [H, S, dh]``.
int8 decoders (:class:`as2d.models.whisper_onnx.Cross`) read them as int8 with a scale per head
and frame (keys, ``cross_k_scale_i [H, 1, S]``) or per head and channel (values,
``cross_v_scale_i [H, 1, dh]``), quantised here once per window rather than in every pass: a
decoder pass then reads a quarter of the bytes it read, which was half of its time.

Where onnxruntime's uint8 × int8 kernel saturates (:mod:`as2d.runtime.int8_exact`), a graph is
loaded as a twin that reads them as uint8 (each value + 128, zero point 128): the same integers
in the exact kernel. The form is read off the loaded session's inputs, so the feed always
matches the graph that runs.
"""

from __future__ import annotations

from enum import Enum

import numpy as np


class CrossForm(Enum):
    FP32 = "fp32"
    INT8 = "int8"
    UINT8 = "uint8"  # the int8 values + 128 (a twin's input on a saturating CPU)

    @classmethod
    def of(cls, session) -> CrossForm:
        """The form ``session`` (an onnxruntime decoder session) reads: its ``cross_k_0``."""
        kind = {i.name: i.type for i in session.get_inputs()}.get("cross_k_0")
        return {"tensor(int8)": cls.INT8, "tensor(uint8)": cls.UINT8}.get(kind, cls.FP32)


_STEPS = np.float32(127.0)
_TINY = np.float32(1e-12)


def _quantise(x: np.ndarray, axis: int, form: CrossForm) -> tuple[np.ndarray, np.ndarray]:
    """``x`` as integers in [-127, 127] times a scale per slice along ``axis`` (the largest
    magnitude of each slice maps to 127); the integers as int8, or + 128 as uint8."""
    peak = np.maximum(x.max(axis=axis, keepdims=True), -x.min(axis=axis, keepdims=True))
    scale = np.maximum(peak / _STEPS, _TINY).astype(np.float32)
    q = np.divide(x, scale)
    np.rint(q, out=q)
    if form is CrossForm.UINT8:
        q += np.float32(128.0)
        return q.astype(np.uint8), scale
    return q.astype(np.int8), scale


def to_form(cross: dict[str, np.ndarray], form: CrossForm) -> dict[str, np.ndarray]:
    """The encoder's ``cross`` (fp32 ``cross_k_i``/``cross_v_i``) in ``form``: as it is for
    fp32, else each tensor quantised with its ``cross_k_scale_i``/``cross_v_scale_i``."""
    if form is CrossForm.FP32:
        return cross
    out: dict[str, np.ndarray] = {}
    for name, x in cross.items():
        x = np.asarray(x, dtype=np.float32)
        if name.startswith("cross_k_"):
            layer = name[len("cross_k_"):]
            out[name], out[f"cross_k_scale_{layer}"] = _quantise(x, 1, form)  # per frame
        elif name.startswith("cross_v_"):
            layer = name[len("cross_v_"):]
            out[name], out[f"cross_v_scale_{layer}"] = _quantise(x, 1, form)  # per channel
        else:
            out[name] = x
    return out
