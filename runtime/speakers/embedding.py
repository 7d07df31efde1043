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
