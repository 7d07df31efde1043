"""Two reference forward passes of CAM++ for the tests, straight from the unfolded state dict.

Written apart from the ONNX builder (``as2d.models.campplus_graph``) and deliberately plain: no
BatchNorm folding, the masking gate computed per frame as the architecture states it (the
segment mean repeated over the segment's frames, then the two 1×1 convs), convolutions as
explicit sums over taps. :func:`forward_numpy` runs in float64; :func:`forward_torch` uses
torch's own layers (``conv2d``, ``batch_norm``, ``avg_pool1d`` with ``ceil_mode``) in float32,
so it also checks our reading of torch's semantics (the partial last segment, the unbiased
standard deviation).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5
BLOCKS = ((12, 1), (24, 2), (16, 2))


# -- numpy, float64 ------------------------------------------------------------------------------
def _bn(sd, p, x):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - sd[f"{p}.running_mean"].reshape(shape)) / np.sqrt(
        sd[f"{p}.running_var"].reshape(shape) + EPS)
    if f"{p}.weight" in sd:
        y = y * sd[f"{p}.weight"].reshape(shape) + sd[f"{p}.bias"].reshape(shape)
    return y


def _conv2d(x, w, stride_h):
    """3×3 (padding 1) or 1×1 (no padding) conv, stride ``stride_h`` along axis 2."""
    k = w.shape[-1]
    pad = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    h_out = (x.shape[2] + 2 * pad - k) // stride_h + 1
    out = np.zeros((x.shape[0], w.shape[0], h_out, x.shape[3]))
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i:i + stride_h * (h_out - 1) + 1:stride_h, j:j + x.shape[3]]
            out += np.einsum("bchw,oc->bohw", patch, w[:, :, i, j])
    return out


def _conv1d(x, w, stride=1, dilation=1, bias=None):
    k = w.shape[-1]
    pad = (k - 1) // 2 * dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    t_out = (x.shape[2] + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], t_out))
    for j in range(k):
        start = j * dilation
        patch = xp[:, :, start:start + stride * (t_out - 1) + 1:stride]
        out += np.einsum("bct,oc->bot", patch, w[:, :, j])
    if bias is not None:
        out += bias[None, :, None]
    return out


def _relu(x):
    return np.maximum(x, 0.0)


def forward_numpy(state: dict, feats: np.ndarray) -> np.ndarray:
    """``feats [B, T, 80]`` → embeddings ``[B, 192]``, in float64."""
    sd = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    x = np.asarray(feats, dtype=np.float64).transpose(0, 2, 1)[:, None]
    x = _relu(_bn(sd, "head.bn1", _conv2d(x, sd["head.conv1.weight"], 1)))
    for layer in ("head.layer1", "head.layer2"):
        for b, stride in ((0, 2), (1, 1)):
            p = f"{layer}.{b}"
            out = _relu(_bn(sd, f"{p}.bn1", _conv2d(x, sd[f"{p}.conv1.weight"], stride)))
            out = _bn(sd, f"{p}.bn2", _conv2d(out, sd[f"{p}.conv2.weight"], 1))
            short = x
            if f"{p}.shortcut.0.weight" in sd:
                short = _bn(sd, f"{p}.shortcut.1",
                            _conv2d(x, sd[f"{p}.shortcut.0.weight"], stride))
            x = _relu(out + short)
    x = _relu(_bn(sd, "head.bn2", _conv2d(x, sd["head.conv2.weight"], 2)))
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    x = _relu(_bn(sd, "xvector.tdnn.nonlinear.batchnorm",
                  _conv1d(x, sd["xvector.tdnn.linear.weight"], stride=2)))
    for i, (layers, dil) in enumerate(BLOCKS, start=1):
        for j in range(1, layers + 1):
            p = f"xvector.block{i}.tdnnd{j}"
            h = _relu(_bn(sd, f"{p}.nonlinear1.batchnorm", x))
            h = _relu(_bn(sd, f"{p}.nonlinear2.batchnorm",
                          _conv1d(h, sd[f"{p}.linear1.weight"])))
            c = f"{p}.cam_layer"
            y = _conv1d(h, sd[f"{c}.linear_local.weight"], dilation=dil)
            t = h.shape[-1]
            seg = np.empty_like(h)
            for s in range(0, t, 100):  # mean of each 100-frame segment, over its frames
                seg[:, :, s:s + 100] = h[:, :, s:s + 100].mean(axis=-1, keepdims=True)
            ctx = h.mean(axis=-1, keepdims=True) + seg
            ctx = _relu(_conv1d(ctx, sd[f"{c}.linear1.weight"], bias=sd[f"{c}.linear1.bias"]))
            gate = 1.0 / (1.0 + np.exp(-_conv1d(ctx, sd[f"{c}.linear2.weight"],
                                                bias=sd[f"{c}.linear2.bias"])))
            x = np.concatenate([x, y * gate], axis=1)
        x = _relu(_bn(sd, f"xvector.transit{i}.nonlinear.batchnorm", x))
        x = _conv1d(x, sd[f"xvector.transit{i}.linear.weight"])
    x = _relu(_bn(sd, "xvector.out_nonlinear.batchnorm", x))
    stats = np.concatenate([x.mean(axis=-1), x.std(axis=-1, ddof=1)], axis=1)
    y = stats @ sd["xvector.dense.linear.weight"][:, :, 0].T
    return _bn(sd, "xvector.dense.nonlinear.batchnorm", y)


# -- torch, float32 ------------------------------------------------------------------------------
def forward_torch(state: dict, feats: np.ndarray) -> np.ndarray:
    """The same network with torch's layers (``state``: tensors, as ``torch.load`` gives)."""
    import torch
    import torch.nn.functional as F

    sd = state

    def bn(p, x):
        return F.batch_norm(x, sd[f"{p}.running_mean"], sd[f"{p}.running_var"],
                            sd.get(f"{p}.weight"), sd.get(f"{p}.bias"), False, 0.0, EPS)

    with torch.no_grad():
        x = torch.from_numpy(np.asarray(feats, dtype=np.float32)).permute(0, 2, 1)[:, None]
        x = F.relu(bn("head.bn1", F.conv2d(x, sd["head.conv1.weight"], padding=1)))
        for layer in ("head.layer1", "head.layer2"):
            for b, stride in ((0, 2), (1, 1)):
                p = f"{layer}.{b}"
                out = F.relu(bn(f"{p}.bn1", F.conv2d(x, sd[f"{p}.conv1.weight"],
                                                     stride=(stride, 1), padding=1)))
                out = bn(f"{p}.bn2", F.conv2d(out, sd[f"{p}.conv2.weight"], padding=1))
                short = x
                if f"{p}.shortcut.0.weight" in sd:
                    short = bn(f"{p}.shortcut.1", F.conv2d(x, sd[f"{p}.shortcut.0.weight"],
                                                          stride=(stride, 1)))
                x = F.relu(out + short)
        x = F.relu(bn("head.bn2", F.conv2d(x, sd["head.conv2.weight"], stride=(2, 1),
                                           padding=1)))
        x = x.flatten(1, 2)
        x = F.relu(bn("xvector.tdnn.nonlinear.batchnorm",
                      F.conv1d(x, sd["xvector.tdnn.linear.weight"], stride=2, padding=2)))
        for i, (layers, dil) in enumerate(BLOCKS, start=1):
            for j in range(1, layers + 1):
                p = f"xvector.block{i}.tdnnd{j}"
                h = F.relu(bn(f"{p}.nonlinear1.batchnorm", x))
                h = F.relu(bn(f"{p}.nonlinear2.batchnorm", F.conv1d(h, sd[f"{p}.linear1.weight"])))
                c = f"{p}.cam_layer"
                y = F.conv1d(h, sd[f"{c}.linear_local.weight"], padding=dil, dilation=dil)
                seg = F.avg_pool1d(h, 100, 100, ceil_mode=True)
                seg = seg.repeat_interleave(100, dim=-1)[..., :h.shape[-1]]
                ctx = h.mean(-1, keepdim=True) + seg
                ctx = F.relu(F.conv1d(ctx, sd[f"{c}.linear1.weight"], sd[f"{c}.linear1.bias"]))
                gate = torch.sigmoid(F.conv1d(ctx, sd[f"{c}.linear2.weight"],
                                              sd[f"{c}.linear2.bias"]))
                x = torch.cat([x, y * gate], dim=1)
            x = F.relu(bn(f"xvector.transit{i}.nonlinear.batchnorm", x))
            x = F.conv1d(x, sd[f"xvector.transit{i}.linear.weight"])
        x = F.relu(bn("xvector.out_nonlinear.batchnorm", x))
        stats = torch.cat([x.mean(-1), x.std(-1, unbiased=True)], dim=1)
        y = F.conv1d(stats[..., None], sd["xvector.dense.linear.weight"])[..., 0]
        return bn("xvector.dense.nonlinear.batchnorm", y).numpy()
