"""Speaker embeddings: CAM++ over an onnxruntime session, fbank computed here in numpy.

The graph (written by ``as2d.models.campplus_graph``) maps mean-normalised fbank features
``[batch, frames, 80]`` to ``[batch, 192]``. Clips are embedded independently: features are
never padded (padding would change the utterance and segment means the network pools over), so
a batch holds only clips of the same number of frames; ``embed_many`` groups them so, which is
where a diarizer's many equal-length crops gain (and ``embed_fbanks`` takes crops as rows of one
fbank of the whole recording, computed once).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from as2d.runtime.speakers.fbank import FRAME_LENGTH, FRAME_SHIFT, N_MELS, fbank

# The shortest clip embedded: 3 frames (two after the network halves time, as the standard
# deviation it pools needs). Anything near it is a poor sample of a voice; callers should keep
# clips of a second or more.
MIN_FRAMES = 3
MIN_SAMPLES = FRAME_LENGTH + (MIN_FRAMES - 1) * FRAME_SHIFT
# Frames per run: a few crops together gain a little; a large batch loses (its 2-D head's
# activations, 32 channels × 80 bins × frames, leave the cache): about 4 crops of 1.5 s.
MAX_BATCH_FRAMES = 600


class SpeakerEmbedder:
    """CAM++ speaker embeddings of 16-kHz mono float32 clips."""

    def __init__(self, path: str | Path, threads: int = 2) -> None:
        from as2d.runtime.sessions import make_session

        self.path = Path(path)
        self.session = make_session(self.path, threads)
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self._trunk: FrameTrunk | None = None
        self._threads = threads

    @property
    def trunk(self) -> FrameTrunk:
        """The same graph cut before its pooling (made on first use)."""
        if self._trunk is None:
            self._trunk = FrameTrunk(self.path, self._threads)
        return self._trunk

    def _run(self, feats: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"feats": feats})[0]

    def embed(self, samples: np.ndarray) -> np.ndarray:
        """The embedding ``(dim,)`` float32 of one clip."""
        return self.embed_many([samples])[0]

    def embed_many(self, clips: list[np.ndarray]) -> np.ndarray:
        """Embeddings ``(len(clips), dim)`` float32, in order; clips of equal length share runs.
        A clip shorter than :data:`MIN_SAMPLES` is a ValueError."""
        feats = []
        for clip in clips:
            clip = np.asarray(clip, dtype=np.float32).reshape(-1)
            if clip.size < MIN_SAMPLES:
                raise ValueError(f"a clip of {clip.size / 16000:.3f} s is too short for a "
                                 f"speaker embedding (at least {MIN_SAMPLES / 16000:.3f} s)")
            feats.append(fbank(clip))
        return self.embed_fbanks(feats)

    def embed_fbanks(self, feats: list[np.ndarray], stop=None) -> np.ndarray:
        """Embeddings of clips given as their :func:`fbank` ``[frames, 80]`` (mean not yet
        subtracted). A caller embedding many crops of one recording can compute the fbank once
        and slice it: frame ``i`` covers samples ``[160 i, 160 i + 400)``, so a crop starting
        at a multiple of 160 samples has exactly the rows of its own fbank. ``stop`` (a
        ``threading.Event``), once set, ends the work between runs."""
        from as2d.runtime.speakers.stop import check_stop

        out = np.zeros((len(feats), self.dim), dtype=np.float32)
        groups: dict[int, list[int]] = defaultdict(list)
        for i, f in enumerate(feats):
            if f.ndim != 2 or f.shape[1] != N_MELS or len(f) < MIN_FRAMES:
                raise ValueError(f"speaker features must be [frames >= {MIN_FRAMES}, {N_MELS}],"
                                 f" not {list(f.shape)}")
            groups[len(f)].append(i)
        for frames, members in groups.items():
            step = max(1, MAX_BATCH_FRAMES // frames)
            for start in range(0, len(members), step):
                check_stop(stop)
                part = members[start:start + step]
                batch = np.stack([feats[i] for i in part]).astype(np.float32)
                batch -= batch.mean(axis=1, keepdims=True)
                out[part] = self._run(batch)
        return out


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Cosine similarity of two embeddings (a float), or of every row of ``a`` with every row
    of ``b`` (a matrix) when either is 2-D."""
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    na = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    nb = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    if a.ndim == 1 and b.ndim == 1:
        return float(na @ nb)
    return np.atleast_2d(na) @ np.atleast_2d(nb).T


class FrameTrunk:
    """CAM++ cut before its statistics pooling: frame-level features of a whole recording,
    computed once in chunks, pooled afterwards over any choice of frames.

    A diarizer embeds every local speaker of every segmentation window; the windows overlap,
    so one forward pass per (window, speaker) reads most frames twice and pays the network's
    fixed cost per clip. Here the network runs once over the recording (chunks of ``chunk``
    fbank rows, each mean-normalised on its own), and a clip's embedding is the graph's own
    head (mean and unbiased standard deviation over the clip's frames, the dense layer with its
    batch norm folded in) applied to the clip's frames. It is an approximation: a frame's
    features now see its neighbours in the recording (the other speaker's speech across a turn
    change, the chunk's mean as utterance context) where a clip saw only its own speech;
    ``bench/diarization.py --cost-sweep`` measures what it does to DER on the dev files.

    The session is the installed graph with one more output, the pooling's input, added in
    memory (the file on disk is not changed)."""

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        model = onnx.load(str(path))
        graph = model.graph
        means = [n for n in graph.node if n.op_type == "ReduceMean"]
        if not means:
            raise ValueError(f"{path} has no statistics pooling to cut before")
        pooled = means[-1].input[0]  # the last mean over time is the statistics pooling's
        inits = {t.name: t for t in graph.initializer}
        self.weight = numpy_helper.to_array(inits["dense.w"]).astype(np.float64)  # [2C, dim]
        self.bias = numpy_helper.to_array(inits["dense.b"]).astype(np.float64)
        graph.output.append(onnx.helper.make_tensor_value_info(pooled, onnx.TensorProto.FLOAT,
                                                               None))
        self.output = pooled
        so = ort.SessionOptions()
        so.intra_op_num_threads = max(1, threads)
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), so,
                                            providers=["CPUExecutionProvider"])
        self.dim = self.weight.shape[1]

    def frames(self, feats: np.ndarray, chunk: int, needed: np.ndarray | None = None,
               stop=None) -> np.ndarray:
        """Frame features ``[ceil(rows / 2), C]`` of a recording's fbank ``[rows, 80]`` (the
        network halves time: feature ``j`` is centred on row ``2 j``); ``chunk`` (even) rows
        per run; chunks holding no ``needed`` row (a bool per row) are left zero."""
        from as2d.runtime.speakers.stop import check_stop

        chunk += chunk % 2
        rows = len(feats)
        out = None
        for a in range(0, rows, chunk):
            part = feats[a:a + chunk]
            if len(part) < MIN_FRAMES or (needed is not None and not needed[a:a + chunk].any()):
                continue
            check_stop(stop)
            x = (part - part.mean(axis=0, keepdims=True))[None].astype(np.float32)
            y = self.session.run([self.output], {"feats": x})[0][0].T  # [frames, C]
            if out is None:
                out = np.zeros(((rows + 1) // 2, y.shape[1]), dtype=np.float32)
            out[a // 2:a // 2 + len(y)] = y
        return out if out is not None else np.zeros(((rows + 1) // 2, 1), dtype=np.float32)

    def pool(self, frames: np.ndarray, rows_of_clips: list[np.ndarray]) -> np.ndarray:
        """Embeddings ``[clips, dim]`` of clips given as fbank rows of the recording."""
        out = np.zeros((len(rows_of_clips), self.dim))
        for i, rows in enumerate(rows_of_clips):
            f = frames[np.unique(np.asarray(rows) // 2)].astype(np.float64)
            std = f.std(axis=0, ddof=1) if len(f) > 1 else np.zeros(f.shape[1])
            out[i] = np.concatenate([f.mean(axis=0), std]) @ self.weight + self.bias
        return out
