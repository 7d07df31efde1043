"""Who spoke when: segmentation windows, embeddings of each local speaker, clustering.

The pipeline (the shape of pyannote's speaker-diarization-3.x, without torch):

1. :class:`~as2d.runtime.speakers.segmentation.Segmenter` runs 10-s windows every ``step``
   seconds and says, per 16.875-ms frame, which of up to three *local* speakers talk.
2. Each local speaker of each window gets a CAM++ embedding of its **clean** speech (the frames
   where it talks alone; all of its frames when it never does), so overlap does not blur it;
   only of the clean speech in the window's own part when that holds enough (the overlapping
   neighbours embed the rest).
3. The embeddings with enough clean speech are clustered across the recording (scipy's
   average-linkage hierarchical clustering on cosine distance): cut at a calibrated distance,
   or into the number of speakers asked for (``num``, or the cut clipped into ``min``..``max``).
   Clusters with too little speech fold into the nearest big one.
4. Within each window, local speakers are matched to clusters one to one (Hungarian
   assignment on cosine similarity to the centroids), so two voices of one window never merge.
5. Windows overlap: per global frame, each speaker's activity is averaged over the windows
   that saw it, the number of speakers talking is the rounded average of the windows' counts,
   and the most active that many speakers are on. Runs of frames are the turns; overlap stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from itertools import permutations

import numpy as np

from as2d.runtime.option_errors import OptionError
from as2d.runtime.speakers.segmentation import (
    FRAME_SPAN,
    FRAME_STEP,
    FRAMES,
    SAMPLE_RATE,
    WINDOW_SAMPLES,
    LocalActivity,
)
from as2d.runtime.speakers.stop import check_stop

FRAME_SAMPLES = 270


@dataclass(frozen=True)
class DiarizeParams:
    """The pipeline's settings; the defaults are calibrated by ``bench/diarization.py`` on its
    dev recordings (figures in bench/results/diarization-*.json)."""

    # Seconds between segmentation windows (10 s long, so a quarter overlaps). On the dev
    # files (2-5 speakers; bench/results/diarization-step-dev-sweep-cpu.json, one analysis
    # thread) every 7.5 s gives 9.8 % DER with 12 of 12 counts right for 76 % of the CPU
    # time of every 5 s (11.4 %, 11 of 12); 6 s: 10.7 %, 12 of 12; 8.5 and 10 s: 10 of 12
    # (pyannote uses 1 s). Cheaper embeddings cost counts there: at most 3 or 4 s of each
    # local speaker (10 of 12; earlier, at most 2 s: 10), CAM++'s frame-level trunk run once
    # over the recording and pooled per local speaker (8 of 12: a frame hears the other
    # speaker across a turn change).
    step: float = 7.5
    # cosine distance at which clusters stop merging: the middle of the dev files' plateau
    # (0.4-0.6 gave the same DER and counts at a 5-s step, 0.5-0.6 at 7.5 s:
    # bench/results/diarization-owned-dev-sweep-cpu.json, ...-step-dev-sweep-cpu.json; 0.7
    # merges speakers)
    threshold: float = 0.55
    min_clean: float = 1.0  # seconds of clean speech an embedding needs to be clustered
    # Seconds of clean speech in a window's own part (its frames nearer its centre than any
    # other window's) that suffice to embed a local speaker from that part alone; with less
    # it is embedded from all its clean speech in the window (0: always). The windows overlap,
    # so without it speech is embedded twice. On dev at a 5-s step
    # (bench/results/diarization-owned-dev-sweep-cpu.json) 3 s embeds a quarter less speech
    # and keeps 11 of 12 counts (DER 10.8 -> 11.4 %); 2 s embeds a third less but gives 10;
    # at 7.5 s, 2 and 4 s give 10.7 and 9.7 % DER, both 12 of 12.
    owned_only: float = 3.0
    min_active: float = 0.25  # seconds a local speaker needs to count at all
    min_cluster_speech: float = 2.0  # seconds of clustered speech a speaker needs
    min_gap: float = 0.15  # pauses of one speaker shorter than this are closed
    min_turn: float = 0.1  # turns shorter than this are dropped


@dataclass(frozen=True)
class Turn:
    """One stretch of one speaker's speech (seconds)."""

    start: float
    end: float
    speaker: str

    def to_dict(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3),
                "speaker": self.speaker}


@dataclass
class Diarization:
    """The turns of a recording, in time order; ``centroids`` are each speaker's mean
    embedding (unit length), used to name speakers from reference clips."""

    turns: list[Turn]
    duration: float
    centroids: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def speakers(self) -> list[str]:
        """Speaker labels in order of first speech."""
        seen: dict[str, None] = {}
        for t in self.turns:
            seen.setdefault(t.speaker, None)
        return list(seen)

    def speaking_time(self) -> dict[str, float]:
        total: dict[str, float] = {s: 0.0 for s in self.speakers}
        for t in self.turns:
            total[t.speaker] += t.end - t.start
        return {s: round(float(v), 3) for s, v in total.items()}

    def renamed(self, names: dict[str, str]) -> Diarization:
        """The same turns with labels renamed (``names`` maps old labels to new ones)."""
        return Diarization([Turn(t.start, t.end, names.get(t.speaker, t.speaker))
                            for t in self.turns], self.duration,
                           {names.get(k, k): v for k, v in self.centroids.items()})

    def to_dict(self) -> dict:
        return {"turns": [t.to_dict() for t in self.turns],
                "speakers": [{"speaker": s, "speaking_time": v}
                             for s, v in self.speaking_time().items()]}


class DiarizationError(ValueError):
    """Diarization cannot be done as asked (bad speaker counts, audio too short)."""


class TooShortError(OptionError, DiarizationError):
    """The recording itself is too short to diarize: the server names its ``file`` field, the
    command line says "the audio" (never a reference clip's field)."""

    def __init__(self, problem: str) -> None:
        super().__init__("file", problem, flags={"file": "the audio"})


class CountError(OptionError, DiarizationError):
    """A speaker count no diarization can honour (each face names its own flag)."""


def check_counts(num: int | None, low: int | None, high: int | None) -> None:
    """The one check of the speaker-count options, whatever the face."""
    for name, v in (("num_speakers", num), ("min_speakers", low), ("max_speakers", high)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CountError(name, f"must be a whole number of 1 or more, not {v!r}")
    if low is not None and high is not None and low > high:
        raise CountError("min_speakers", f"({low}) is more than {{0}} ({high})",
                         ("max_speakers",))
    if num is not None and (low is not None or high is not None):
        raise CountError("num_speakers", "cannot be given with {0} or {1}",
                         ("min_speakers", "max_speakers"))


# -- embeddings of local speakers -------------------------------------------------------------
FBANK_SHIFT, FBANK_LENGTH = 160, 400  # the speaker fbank's frames (10 ms hop, 25 ms long)
_CHUNK_ROWS = 3000  # fbank rows computed per piece of the recording (30 s)


def recording_fbank(samples: np.ndarray, stop=None) -> np.ndarray:
    """The speaker fbank of the whole recording, computed once in 30-s pieces (row ``j``
    covers samples ``[160 j, 160 j + 400)``): each local speaker's clip is a choice of its
    rows, where cutting the samples would compute the same frames again for every window."""
    from as2d.runtime.speakers.fbank import fbank

    n_rows = max(0, (len(samples) - FBANK_LENGTH) // FBANK_SHIFT + 1)
    parts = []
    for row in range(0, n_rows, _CHUNK_ROWS):
        check_stop(stop)
        rows = min(_CHUNK_ROWS, n_rows - row)
        a = row * FBANK_SHIFT
        parts.append(fbank(samples[a:a + (rows - 1) * FBANK_SHIFT + FBANK_LENGTH]))
    return np.concatenate(parts) if parts else np.zeros((0, 80), dtype=np.float32)


def _local_clips(n_samples: int, seg: LocalActivity, params: DiarizeParams):
    """(window, local speaker, clean?, fbank rows) of every local speaker active long
    enough: its clean frames (alone) in the window's own part where they last
    ``params.owned_only`` seconds, else all its clean frames, or all its frames where it is
    never alone long enough."""
    min_active = params.min_active / FRAME_STEP
    min_clean = params.min_clean / FRAME_STEP
    offset = (round(FRAME_SPAN * SAMPLE_RATE) - FRAME_SAMPLES) // 2
    n_rows = max(0, (n_samples - FBANK_LENGTH) // FBANK_SHIFT + 1)
    half = WINDOW_SAMPLES // 2
    for i, start in enumerate(seg.starts):
        act = seg.activity[i]
        alone = act.sum(axis=1) == 1
        # the fbank rows whose centre lies in this window, and the frame each falls in
        first = max(0, -(-(start + offset - FBANK_LENGTH // 2) // FBANK_SHIFT))
        rows = np.arange(first, n_rows)
        frame = (rows * FBANK_SHIFT + FBANK_LENGTH // 2 - start - offset) // FRAME_SAMPLES
        keep = (frame >= 0) & (frame < FRAMES)
        rows, frame = rows[keep], frame[keep]
        # the window's own part: the rows whose centre is nearer its centre than any other
        # window's (so each row is some window's, and one window's only)
        centre = rows * FBANK_SHIFT + FBANK_LENGTH // 2
        lo = (seg.starts[i - 1] + start) // 2 + half if i > 0 else 0
        hi = (start + seg.starts[i + 1]) // 2 + half if i + 1 < len(seg.starts) else n_samples
        owned = (centre >= lo) & (centre < hi)
        for k in range(act.shape[1]):
            active = act[:, k].astype(bool)
            if active.sum() < min_active:
                continue
            clean = active & alone
            own = clean[frame] & owned
            if params.owned_only and own.sum() * FBANK_SHIFT >= params.owned_only * SAMPLE_RATE:
                yield i, k, True, rows[own]
                continue
            use = clean if clean.sum() >= min(min_clean, active.sum()) else active
            chosen = rows[use[frame]]
            if len(chosen) < 3:
                continue
            yield i, k, bool(clean.sum() >= min_clean), chosen


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-9)


# -- clustering -------------------------------------------------------------------------------
def cluster(emb: np.ndarray, weights: np.ndarray, params: DiarizeParams,
            num: int | None = None, low: int | None = None, high: int | None = None
            ) -> np.ndarray:
    """Cluster labels 0..k-1 of unit embeddings ``emb`` (rows); ``weights`` are seconds of
    speech behind each. Number of clusters: ``num``, else the threshold cut clipped to
    ``low``..``high``, small clusters folded into big ones."""
    from scipy.cluster.hierarchy import fcluster, linkage

    m = len(emb)
    if m == 1:
        return np.zeros(1, dtype=int)
    tree = linkage(emb, method="average", metric="cosine")
    if num is not None:
        return fcluster(tree, min(num, m), criterion="maxclust") - 1
    labels = fcluster(tree, params.threshold, criterion="distance") - 1
    labels = _fold_small(emb, weights, labels, params.min_cluster_speech)
    k = labels.max() + 1
    if (low is not None and k < low) or (high is not None and k > high):
        target = min(max(k, low or 1), high or k, m)
        labels = fcluster(tree, target, criterion="maxclust") - 1
    return labels


def _fold_small(emb, weights, labels, min_speech) -> np.ndarray:
    speech = np.bincount(labels, weights=weights)
    big = np.flatnonzero(speech >= min_speech)
    if len(big) == 0:
        big = np.array([int(np.argmax(speech))])
    cents = _normalise(np.stack([emb[labels == c].mean(0) for c in big]))
    out = big[np.argmax(emb @ cents.T, axis=1)]
    out = np.where(np.isin(labels, big), labels, out)
    _, dense = np.unique(out, return_inverse=True)
    return dense


# -- the pipeline -----------------------------------------------------------------------------
def diarize_samples(samples: np.ndarray, segmenter, embedder, params: DiarizeParams | None = None,
                    num_speakers: int | None = None, min_speakers: int | None = None,
                    max_speakers: int | None = None, stop=None) -> Diarization:
    """Diarize 16-kHz mono ``samples`` with a segmenter and a speaker embedder (an object with
    ``embed_many(list of arrays) -> (n, dim)``). ``stop``: a ``threading.Event`` that, once
    set, ends the work between windows and chunks with :class:`DiarizationStopped`."""
    params = params or DiarizeParams()
    check_counts(num_speakers, min_speakers, max_speakers)
    return resolve(analyse(samples, segmenter, embedder, params, stop), params, num_speakers,
                   min_speakers, max_speakers)


@dataclass
class Analysis:
    """What the models say about a recording (steps 1-2); clustering it is cheap, so the
    benchmark tries thresholds on one analysis."""

    duration: float
    seg: LocalActivity
    clips: list
    emb: np.ndarray


def analyse(samples, segmenter, embedder, params: DiarizeParams, stop=None) -> Analysis:
    samples = np.asarray(samples, dtype=np.float32)
    seg = segmenter(samples, params.step, stop) if stop is not None else \
        segmenter(samples, params.step)
    check_stop(stop)
    clips = list(_local_clips(len(samples), seg, params))
    if not clips:
        return Analysis(len(samples) / SAMPLE_RATE, seg, [], np.zeros((0, 1)))
    feats = recording_fbank(samples, stop)
    fb = [feats[c[3]] for c in clips]
    emb = embedder.embed_fbanks(fb, stop) if stop is not None else embedder.embed_fbanks(fb)
    check_stop(stop)
    return Analysis(len(samples) / SAMPLE_RATE, seg, clips,
                    _normalise(np.asarray(emb, dtype=np.float64)))


def resolve(an: Analysis, params: DiarizeParams, num_speakers: int | None = None,
            min_speakers: int | None = None, max_speakers: int | None = None) -> Diarization:
    """Steps 3-5: cluster, match local speakers, aggregate the windows into turns."""
    duration, seg, clips, emb = an.duration, an.seg, an.clips, an.emb
    if not clips:
        return Diarization([], duration)
    seconds = np.array([len(c[3]) * FBANK_SHIFT / SAMPLE_RATE for c in clips])
    good = np.array([c[2] for c in clips])
    if not good.any():
        good = seconds >= seconds.max() * 0.5  # a short recording: take the longest clips
    labels = cluster(emb[good], seconds[good], params, num_speakers, min_speakers,
                     max_speakers)
    k = int(labels.max()) + 1
    cents = _normalise(np.stack([emb[good][labels == c].mean(0) for c in range(k)]))

    # Each window's local speakers -> distinct global speakers.
    n_windows = len(seg.starts)
    mapping = -np.ones((n_windows, seg.activity.shape[2]), dtype=int)
    by_window: dict[int, list[int]] = {}
    for j, (i, _k, _clean, _clip) in enumerate(clips):
        by_window.setdefault(i, []).append(j)
    for i, js in by_window.items():
        sim = emb[js] @ cents.T
        rows, cols = best_pairs(sim)
        for r, c in zip(rows, cols):
            mapping[i, clips[js[r]][1]] = c
        # more local speakers than clusters: the rest join their nearest cluster
        for r in set(range(len(js))) - set(rows):
            mapping[i, clips[js[r]][1]] = int(np.argmax(sim[r]))

    # Aggregate the overlapping windows on one frame grid.
    total = int(np.ceil(duration / FRAME_STEP)) + FRAMES
    score = np.zeros((total, k), dtype=np.float32)
    count = np.zeros(total, dtype=np.float32)
    cover = np.zeros(total, dtype=np.float32)
    for i, start in enumerate(seg.starts):
        g = int(round(start / SAMPLE_RATE / FRAME_STEP))
        act = seg.activity[i].astype(np.float32)
        kept = mapping[i] >= 0
        cover[g:g + FRAMES] += 1
        count[g:g + FRAMES] += act[:, kept].sum(axis=1)
        for local in np.flatnonzero(kept):
            c = mapping[i, local]
            score[g:g + FRAMES, c] += act[:, local]
    seen = cover > 0
    score[seen] /= cover[seen, None]
    speakers_on = np.rint(np.where(seen, count / np.maximum(cover, 1), 0)).astype(int)
    speakers_on = np.minimum(speakers_on, k)
    order = np.argsort(-score, axis=1)
    on = np.zeros_like(score, dtype=bool)
    for n in range(1, min(k, 3) + 1):
        rows = np.flatnonzero(speakers_on >= n)
        on[rows, order[rows, n - 1]] = True
    on &= score > 0
    n_frames = int(np.ceil(duration / FRAME_STEP))
    on = on[:n_frames]
    turns = _turns(on, params, duration)
    # Labels by first speech: SPEAKER_00 talks first.
    first = {}
    for t in turns:
        first.setdefault(t[2], len(first))
    name = {c: f"SPEAKER_{first[c]:02d}" for c in first}
    return Diarization([Turn(float(a), float(b), name[c]) for a, b, c in turns], duration,
                       {name[c]: cents[c].astype(np.float32) for c in first})


@lru_cache(maxsize=64)
def _injections(n: int, k: int) -> np.ndarray:
    """Every one-to-one choice of ``n`` of ``k`` columns, one per row: ``[ways, n]``."""
    ways = np.array(list(permutations(range(k), n)), dtype=np.intp).reshape(-1, n)
    ways.flags.writeable = False  # shared by every call
    return ways


def best_pairs(sim: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns of ``sim`` paired one to one for the largest total similarity
    (as many pairs as the shorter side has; rows ascending). An exhaustive search over the
    columns some row ranks among its ``n`` best (a row paired outside them could move to one
    of them that no other row takes): a window has at most three local speakers, so at most
    nine columns, whatever the number of speakers (an assignment solver's import would cost
    more than the search)."""
    n, k = sim.shape
    if not n or not k:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    if n > k:
        cols, rows = best_pairs(sim.T)
        order = np.argsort(rows)
        return rows[order], cols[order]
    keep = np.unique(np.argsort(-sim, axis=1, kind="stable")[:, :n])
    ways = _injections(n, len(keep))
    best = ways[np.argmax(sim[:, keep][np.arange(n), ways].sum(axis=1))]
    return np.arange(n), keep[best]


def _turns(on: np.ndarray, params: DiarizeParams, duration: float):
    """(start, end, cluster) runs of ``on`` (frames x clusters), gaps closed, blips dropped,
    sorted by start."""
    out = []
    centre = FRAME_SPAN / 2
    for c in range(on.shape[1]):
        col = np.concatenate([[False], on[:, c], [False]]).astype(np.int8)
        d = np.diff(col)
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
        runs: list[list[float]] = []
        for s, e in zip(starts, ends):
            a = max(0.0, s * FRAME_STEP + centre - FRAME_STEP / 2)
            b = min(duration, e * FRAME_STEP + centre + FRAME_STEP / 2)
            if runs and a - runs[-1][1] < params.min_gap:
                runs[-1][1] = b
            else:
                runs.append([a, b])
        out.extend((a, b, c) for a, b in runs if b - a >= params.min_turn)
    out.sort()
    return out
