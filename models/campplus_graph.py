"""CAM++ (3D-Speaker's speaker-verification network) written as an ONNX graph from its weights.

The network, as its state dict lays it out (80 log-mel bins in, 192-dim embedding out):

- **FCM head** (2-D): conv 3×3 → BN-ReLU, two stages of two residual blocks (3×3 convs; the
  first block of each stage strides 2 along frequency and has a 1×1 conv shortcut), conv 3×3
  striding 2 along frequency → BN-ReLU. 80 bins become 10, 32 channels × 10 = 320 channels.
- **TDNN**: conv1d k5 stride 2 (time halves) → BN-ReLU, 128 channels.
- Three **CAM-dense blocks** (12, 24, 16 layers; dilation 1, 2, 2), each followed by a
  **transit** layer (BN-ReLU → 1×1 conv halving the channels). A layer: BN-ReLU → 1×1 conv to
  128 → BN-ReLU → the context-aware masking layer, whose output (32 channels) is appended to its
  input (dense connectivity). Masking: a k3 dilated conv, multiplied by a sigmoid gate computed
  from the utterance mean plus the mean of the 100-frame segment each frame lies in, through a
  1×1 conv → ReLU → 1×1 conv.
- BN-ReLU, **statistics pooling** (mean and unbiased standard deviation over time), a 1×1
  "dense" layer and a BatchNorm without affine → the embedding.

Folding: a BatchNorm that follows a conv is folded into it (weights and a bias, in float64,
then cast); one that precedes a ReLU feeding a conv stays a per-channel Mul+Add. The gate of a
masking layer is a function of segment-level means only, so its two 1×1 convs run once per
100-frame segment (not per frame) and the gate is then repeated over its segment's frames: the
same numbers, a hundredth of the work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from as2d.models.graph import Graph, save_model

EPS = 1e-5  # torch BatchNorm's default
SEG_LEN = 100  # frames per context segment of a masking layer
BLOCKS = ((12, 1), (24, 2), (16, 2))  # (layers, dilation) of the three dense blocks


class CamPlusWeights:
    """The state dict, read by name, with BatchNorm statistics turned into scale and shift."""

    def __init__(self, state: dict[str, np.ndarray]) -> None:
        self.state = state

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.state[name].astype(np.float64)
        except KeyError:
            raise ValueError(f"not a CAM++ state dict: no {name}") from None

    def bn(self, prefix: str) -> tuple[np.ndarray, np.ndarray]:
        """``(scale, shift)`` of ``BatchNorm(prefix)`` in inference mode (affine optional)."""
        inv = 1.0 / np.sqrt(self[f"{prefix}.running_var"] + EPS)
        gamma = self[f"{prefix}.weight"] if f"{prefix}.weight" in self.state else 1.0
        beta = self[f"{prefix}.bias"] if f"{prefix}.bias" in self.state else 0.0
        scale = gamma * inv
        return scale, beta - self[f"{prefix}.running_mean"] * scale


class _Builder:
    def __init__(self, w: CamPlusWeights) -> None:
        self.w = w
        self.g = Graph("campplus")

    def f32(self, name: str, array: np.ndarray) -> str:
        return self.g.weight(name, np.asarray(array, dtype=np.float32))

    def conv_bn(self, x: str, conv: str, bn: str, relu: bool = True, **attrs) -> str:
        """conv (no bias) followed by BatchNorm, folded into one conv with a bias."""
        scale, shift = self.w.bn(bn)
        weight = self.w[f"{conv}.weight"]
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        y = self.g.op("Conv", x, self.f32(f"{conv}.w", weight), self.f32(f"{conv}.b", shift),
                      **attrs)
        return self.g.op("Relu", y) if relu else y

    def bn_relu(self, x: str, bn: str, rank: int = 3) -> str:
        """BatchNorm → ReLU as a per-channel Mul+Add (channels on axis 1)."""
        scale, shift = self.w.bn(bn)
        shape = (-1,) + (1,) * (rank - 2)
        y = self.g.op("Mul", x, self.f32(f"{bn}.scale", scale.reshape(shape)))
        y = self.g.op("Add", y, self.f32(f"{bn}.shift", shift.reshape(shape)))
        return self.g.op("Relu", y)

    def conv(self, x: str, name: str, bias: bool = False, **attrs) -> str:
        inputs = [x, self.f32(f"{name}.w", self.w[f"{name}.weight"])]
        if bias:
            inputs.append(self.f32(f"{name}.b", self.w[f"{name}.bias"]))
        return self.g.op("Conv", *inputs, **attrs)

    # -- the FCM head ---------------------------------------------------------------------------
    def res_block(self, x: str, p: str, stride: int) -> str:
        out = self.conv_bn(x, f"{p}.conv1", f"{p}.bn1", kernel_shape=[3, 3],
                           strides=[stride, 1], pads=[1, 1, 1, 1])
        out = self.conv_bn(out, f"{p}.conv2", f"{p}.bn2", relu=False, kernel_shape=[3, 3],
                           pads=[1, 1, 1, 1])
        if f"{p}.shortcut.0.weight" in self.w.state:
            x = self.conv_bn(x, f"{p}.shortcut.0", f"{p}.shortcut.1", relu=False,
                             kernel_shape=[1, 1], strides=[stride, 1])
        return self.g.op("Relu", self.g.op("Add", out, x))

    def head(self, feats: str) -> str:
        g = self.g
        x = g.op("Unsqueeze", g.op("Transpose", feats, perm=[0, 2, 1]), g.const([1]))
        x = self.conv_bn(x, "head.conv1", "head.bn1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        for layer in ("head.layer1", "head.layer2"):
            x = self.res_block(x, f"{layer}.0", 2)
            x = self.res_block(x, f"{layer}.1", 1)
        x = self.conv_bn(x, "head.conv2", "head.bn2", kernel_shape=[3, 3], strides=[2, 1],
                         pads=[1, 1, 1, 1])
        channels = self.w.state["head.conv2.weight"].shape[0] * 10  # 80 bins /8 → 10
        return g.op("Reshape", x, g.const([0, channels, -1]))  # [B, C, F, T] → [B, C·F, T]

    # -- the dense blocks -----------------------------------------------------------------------
    def cam_layer(self, x: str, p: str, dilation: int, frames: str) -> str:
        g = self.g
        y = self.conv(x, f"{p}.linear_local", kernel_shape=[3], dilations=[dilation],
                      pads=[dilation, dilation])
        # The gate from (utterance mean + segment mean): per segment, then repeated per frame.
        seg = g.op("AveragePool", x, kernel_shape=[SEG_LEN], strides=[SEG_LEN], ceil_mode=1)
        ctx = g.op("Add", seg, g.op("ReduceMean", x, axes=[2], keepdims=1))
        ctx = g.op("Relu", self.conv(ctx, f"{p}.linear1", bias=True))
        gate = g.op("Sigmoid", self.conv(ctx, f"{p}.linear2", bias=True))
        gate = g.op("Expand", g.op("Unsqueeze", gate, g.const([3])), g.const([1, 1, 1, SEG_LEN]))
        gate = g.op("Reshape", gate, g.const([0, 0, -1]))
        gate = g.op("Slice", gate, g.const([0]), frames, g.const([2]))
        return g.op("Mul", y, gate)

    def dense_layer(self, x: str, p: str, dilation: int, frames: str) -> str:
        h = self.bn_relu(x, f"{p}.nonlinear1.batchnorm")
        h = self.conv_bn(h, f"{p}.linear1", f"{p}.nonlinear2.batchnorm", kernel_shape=[1])
        return self.cam_layer(h, f"{p}.cam_layer", dilation, frames)

    def xvector(self, x: str) -> str:
        g = self.g
        x = self.conv_bn(x, "xvector.tdnn.linear", "xvector.tdnn.nonlinear.batchnorm",
                         kernel_shape=[5], strides=[2], pads=[2, 2])
        frames = g.op("Slice", g.op("Shape", x), g.const([2]), g.const([3]))
        for i, (layers, dilation) in enumerate(BLOCKS, start=1):
            for j in range(1, layers + 1):
                new = self.dense_layer(x, f"xvector.block{i}.tdnnd{j}", dilation, frames)
                x = g.op("Concat", x, new, axis=1)
            x = self.bn_relu(x, f"xvector.transit{i}.nonlinear.batchnorm")
            x = self.conv(x, f"xvector.transit{i}.linear", kernel_shape=[1])
        x = self.bn_relu(x, "xvector.out_nonlinear.batchnorm")
        # Statistics pooling: mean and unbiased standard deviation over time.
        mean = g.op("ReduceMean", x, axes=[2], keepdims=1)
        sq = g.op("ReduceSumSquare", g.op("Sub", x, mean), axes=[2], keepdims=0)
        n = g.op("Cast", frames, to=TensorProto.FLOAT)
        std = g.op("Sqrt", g.op("Div", sq, g.op("Sub", n, g.const([1.0], np.float32))))
        stats = g.op("Concat", g.op("Squeeze", mean, g.const([2])), std, axis=1)
        # Dense 1×1 layer + BatchNorm without affine, folded into one MatMul + Add.
        scale, shift = self.w.bn("xvector.dense.nonlinear.batchnorm")
        weight = self.w["xvector.dense.linear.weight"][:, :, 0] * scale[:, None]
        y = g.op("MatMul", stats, self.f32("dense.w", weight.T))
        return g.op("Add", y, self.f32("dense.b", shift))


def build_campplus(state: dict[str, np.ndarray]) -> tuple[onnx.ModelProto, int]:
    """The graph ``feats [batch, frames, 80] → embedding [batch, dim]`` and ``dim``."""
    b = _Builder(CamPlusWeights(state))
    feats = b.g.input("feats", TensorProto.FLOAT, ["batch", "frames", 80])
    emb = b.xvector(b.head(feats))
    dim = int(state["xvector.dense.linear.weight"].shape[0])
    b.g.output(emb, "embedding", TensorProto.FLOAT, ["batch", dim])
    return b.g.model(opsets=(("", 17),)), dim


def write_campplus(state_path: Path, dest: Path) -> int:
    """Read the torch state dict at ``state_path`` (without torch) and write the graph to
    ``dest``; returns the embedding's dimension."""
    from as2d.models.source_packages import SourceError
    from as2d.models.torch_state import TorchStateError, load_state_dict

    try:
        model, dim = build_campplus(load_state_dict(state_path))
    except (TorchStateError, ValueError) as exc:
        raise SourceError(f"{state_path.name}: cannot convert the CAM++ weights ({exc})") from None
    save_model(model, dest)
    return dim
