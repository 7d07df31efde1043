"""Passages re-ranked by the answering model: how likely the question is, given the passage.

Ranking passages by the question's words (BM25, :mod:`~as2d.runtime.ask.passages`) finds the
passage that *repeats* the question, not always the one that answers it: a question may name
its subject with other words than the speaker ("Which way should you go?" for "Go forward 10
meters."), and in a recording of many topics the same word comes back in several of them. The
answering model reads the passage and then the question; the log-likelihood of the question's
tokens (a reader who has just heard this passage would ask this) ranks the passages BM25
found. One sequence pass per passage, after a short head that is prefilled once; the
question's rows are the only logits read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The frame a passage and its question are read in (the answering prompt's own labels).
HEAD = "Transcript:\n"
ASK = "\nQuestion:"


def question_likelihoods(model, codec, passages: Sequence[str], question: str) -> list[float]:
    """Log-likelihood (nats) of ``question`` after each of ``passages`` under ``model``."""
    head = ([codec.bos] if codec.bos is not None else []) + codec.markup(HEAD)
    ask = codec.markup(ASK)
    q = codec.text(" " + question.strip())
    state = model.state()
    try:
        model.prefill(state, head)
        base = state.length
        out = []
        room = max(0, state.capacity - base - len(ask) - len(q) - 1)
        for text in passages:
            body = codec.text(text.strip())[:room]  # (a passage longer than the context)
            state.truncate(base)
            # rows of the last token of ``ask`` and of every question token but the last
            logits = state.forward(body + ask + q, logit_rows=len(q) + 1)[:-1]
            out.append(_log_probs(logits, q))
        return out
    finally:
        model.release(state)


def _log_probs(logits: np.ndarray, targets: Sequence[int]) -> float:
    x = np.asarray(logits, dtype=np.float32)
    m = x.max(axis=1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(x - m).sum(axis=1, dtype=np.float64))).astype(np.float64)
    return float(sum(x[i, t] - lse[i] for i, t in enumerate(targets)))
