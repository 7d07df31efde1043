"""Diarization error rate, NIST's way: a collar around reference boundaries, overlap counted.

Scored on a 10-ms grid. Per frame with ``R`` reference and ``S`` system speakers, of whom ``C``
agree under the best one-to-one mapping of labels (the Hungarian assignment maximising the time
both talk together): missed = max(0, R - S), false alarm = max(0, S - R), confusion =
min(R, S) - C; DER = their sums over the reference speech time (the sum of R). Frames within
``collar`` seconds of a reference turn's start or end are not scored (NIST md-eval's 0.25 s).
Written here because the usual scorers (pyannote.metrics) pull pandas and sympy into the
benchmark for one formula; ``tests/test_diarize.py`` checks it on hand-worked cases.
"""

from __future__ import annotations

import numpy as np

STEP = 0.01


def _grid(turns, labels: list[str], n: int) -> np.ndarray:
    m = np.zeros((n, max(1, len(labels))), dtype=bool)
    for start, end, who in turns:
        a, b = int(round(start / STEP)), int(round(end / STEP))
        m[max(0, a):max(0, min(n, b)), labels.index(who)] = True
    return m


def der(reference, system, collar: float = 0.25) -> dict:
    """``reference`` and ``system``: lists of (start, end, speaker). Returns the DER and its
    parts (seconds), and the mapping of system labels to reference labels."""
    from scipy.optimize import linear_sum_assignment

    ref_labels = sorted({t[2] for t in reference})
    sys_labels = sorted({t[2] for t in system})
    end = max([t[1] for t in reference] + [t[1] for t in system] + [0.0])
    n = int(np.ceil(end / STEP)) + 1
    ref = _grid(reference, ref_labels, n)
    hyp = _grid(system, sys_labels, n)
    scored = np.ones(n, dtype=bool)
    c = int(round(collar / STEP))
    if c:
        for start, stop, _who in reference:
            for t in (start, stop):
                k = int(round(t / STEP))
                scored[max(0, k - c):k + c] = False
    ref, hyp = ref[scored], hyp[scored]
    overlap = ref.T.astype(np.int64) @ hyp.astype(np.int64)  # (ref, sys) frames together
    rows, cols = linear_sum_assignment(-overlap)
    mapping = {sys_labels[j]: ref_labels[i] for i, j in zip(rows, cols)
               if i < len(ref_labels) and j < len(sys_labels)}
    correct = np.zeros(len(ref), dtype=np.int64)
    for i, j in zip(rows, cols):
        if i < len(ref_labels) and j < len(sys_labels):
            correct += ref[:, i] & hyp[:, j]
    r, s = ref.sum(1), hyp.sum(1)
    missed = np.maximum(0, r - s).sum() * STEP
    false_alarm = np.maximum(0, s - r).sum() * STEP
    confusion = (np.minimum(r, s) - correct).sum() * STEP
    total = r.sum() * STEP
    return {"der": float((missed + false_alarm + confusion) / total) if total else 0.0,
            "missed": float(missed), "false_alarm": float(false_alarm),
            "confusion": float(confusion), "total": float(total), "mapping": mapping}
