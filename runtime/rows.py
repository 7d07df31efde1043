"""Row-exactness: the one check that keeps speculation lossless, for every kind of model.

Verifying ``k`` candidates in one pass is only lossless if the pass computes each row exactly as
``k`` single-token passes would: same bits, not merely close (a near-tie decided differently
changes the text). as2d's own graphs are built for it, but it is onnxruntime that computes them,
and a new version or CPU could round differently; a graph as2d did not write (a Hugging Face
export) may not be built for it at all. So every model is probed the same way before
speculation is allowed on it: a short token sequence run one token at a time, all at once (a
pass wider than the adaptive budget's widest verification), and in blocks after a truncation,
compared bit for bit, in the one session every pass of the model runs in.

A model offers the probe through :class:`RowProbe` (how to make a decoding state and which
tokens to feed); :func:`rows_exact` runs it, once per model object, and remembers the verdict in
the model's own folder keyed by its graph and this runtime (:func:`runtime_identity`), so a new
onnxruntime or machine is checked again, once. Whisper targets (as2d bundles and Hugging Face
exports) and the answering LLMs all come here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from as2d.runtime.files import write_replacing

MEMO_FILE = ".row-checks.json"  # in the models folder: graph|runtime identity → verdict


class PassState(Protocol):
    """A decoding state that takes passes of any number of tokens and can be cut back."""

    def forward(self, tokens: Sequence[int]) -> np.ndarray: ...

    def truncate(self, length: int) -> None: ...


@runtime_checkable
class RowProbe(Protocol):
    """What a model offers the row check.

    ``row_probe()`` returns a factory of fresh decoding states (each already holding whatever
    the model needs before its first token: Whisper's audio context), the tokens to feed, and
    a release for each state. ``row_memo`` is where the verdict may be remembered: ``(folder,
    graph key)``, or None to check on every load (a folder as2d did not make)."""

    name: str
    threads: int  # its own sessions' intra-op threads (the single steps run there)
    row_check: dict | None  # the verdict, kept on the model once checked

    def row_probe(self) -> tuple[Callable[[], PassState], list[int],
                                 Callable[[PassState], None]]: ...

    @property
    def row_memo(self) -> tuple[Path, str] | None: ...


def probe(model: RowProbe) -> dict:
    """Run the probe: single steps against one pass of all tokens, against blocks after a
    truncation (how verification uses the cache) and against a one-row pass after another.
    Returns the verdict and the largest difference seen, for the record."""
    new, tokens, release = model.row_probe()
    if not tokens:  # nothing to compare with: no speculation on a model that cannot be probed
        return {"exact": False, "tokens": 0, "max_abs_diff": float("nan")}
    if len(tokens) < 6:
        tokens = (list(tokens) * 6)[:max(6, len(tokens))]
    a = new()
    try:
        single = np.concatenate([a.forward([t]) for t in tokens])
    finally:
        release(a)
    b = new()
    try:
        together = b.forward(tokens)
        b.truncate(2)
        blocks = np.concatenate([b.forward(tokens[2:5]), b.forward(tokens[5:])])
        b.truncate(len(tokens) - 1)
        last = b.forward(tokens[-1:])
    finally:
        release(b)
    exact = bool(np.array_equal(single, together) and np.array_equal(single[2:], blocks)
                 and np.array_equal(single[-1:], last))
    diff = float(np.max(np.abs(single.astype(np.float64) - together))) if single.size else 0.0
    return {"exact": exact, "tokens": len(tokens), "max_abs_diff": diff}


def rows_exact(model: RowProbe) -> bool:
    """Does ``model`` compute each row the same whatever the rows beside it in a pass?

    Checked once per model object (the verdict is kept on it as ``row_check``) and remembered
    across processes in the model's folder when it has one (:attr:`RowProbe.row_memo`), under
    the model's thread count (its one session's)."""
    if model.row_check is None:
        model.row_check = _checked(model, model.row_memo, _kind("rows3", model), probe)
    return bool(model.row_check["exact"])


def _kind(name: str, model) -> str:
    """A memo key's prefix: the check and the model's threads."""
    return f"{name}|t{model.threads}|"


def _checked(model, memo: tuple[Path, str] | None, kind: str, run) -> dict:
    """``run(model)``'s verdict, remembered in the models folder under ``kind``, the graph and
    this runtime (a new onnxruntime or CPU checks again, once)."""
    key = path = None
    if memo is not None:
        from as2d.runtime.sessions import runtime_identity

        folder, graph = memo
        path, key = Path(folder) / MEMO_FILE, f"{kind}{graph}|{runtime_identity()}"
        remembered = _read(path).get(key)
        if isinstance(remembered, bool):
            return {"exact": remembered, "remembered": True}
    result = run(model)
    if path is not None:
        data = _read(path)
        data[key] = result["exact"]
        write_replacing(path, lambda tmp: tmp.write_text(json.dumps(data, indent=0,
                                                                    sort_keys=True)))
    return result


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class BeamProbe(RowProbe, Protocol):
    """A model that also decodes several hypotheses in one pass (beam search)."""

    beam_check: dict | None

    def beam_probe(self) -> Callable[[int], object]:
        """A factory of fresh batched states (``slots`` hypotheses, one empty to start: a
        ``forward(rows)``, ``reorder(sources)``, ``truncate(length)`` state), released as the
        row probe's are; their audio context is the row probe's."""
        ...

    @property
    def beam_memo(self) -> tuple[Path, str] | None: ...


def probe_beams(model: BeamProbe) -> dict:
    """Beam search's shapes against single-hypothesis passes: the prompt run as one hypothesis,
    forked into five (a beam of 5, or ``best_of`` 5 samples side by side), a step of one token
    each, a reorder that drops one and forks another, a block of two tokens each, a truncation
    and a step again, a rotation and blocks of three and four (speculative passes: up to 20
    rows). Every row must equal, bit for bit, the row a one-hypothesis state computes for the
    same sequence one token at a time."""
    new, tokens, release = model.row_probe()
    new_beams = model.beam_probe()
    tokens = list(tokens)
    if len(tokens) < 8:
        tokens = (tokens * 8)[:8]
    p = len(tokens) - 4
    prompt, rest = tokens[:p], tokens[p:]
    memo: dict[tuple, np.ndarray] = {}

    def ref(seq: list[int]) -> np.ndarray:  # rows of seq, one token per pass
        key = tuple(seq)
        if key not in memo:
            s = new()
            try:
                memo[key] = np.concatenate([s.forward([t]) for t in seq])
            finally:
                release(s)
        return memo[key]

    conts = [rest, rest[::-1], rest[1:] + rest[:1], rest[2:] + rest[:2], rest[3:] + rest[:3]]
    n = len(conts)
    worst = 0.0
    exact = True

    def compare(rows: np.ndarray, seq: list[int], count: int) -> None:
        nonlocal exact, worst
        want = ref(seq)[len(seq) - count:]
        exact = exact and bool(np.array_equal(rows, want))
        worst = max(worst, float(np.max(np.abs(rows.astype(np.float64) - want))))

    def block(b, seqs: list[list[int]], width: int) -> None:
        rows = b.forward([seq[-width:] for seq in seqs])
        for j, seq in enumerate(seqs):
            compare(rows[j], seq, width)

    b = new_beams(n)
    try:
        compare(b.forward([prompt])[0], prompt, len(prompt))
        b.reorder([0] * n)
        seqs = [prompt + [c[0]] for c in conts]
        block(b, seqs, 1)
        src = [2, 0, 0, 4, 3]  # the second hypothesis dropped, the first forked
        b.reorder(src)
        # The fork's two copies go different ways.
        seqs = [seqs[s] + conts[(s + (j == 2)) % n][1:3] for j, s in enumerate(src)]
        block(b, seqs, 2)
        b.truncate(b.length - 1)
        seqs = [seq[:-1] + [rest[-1]] for seq in seqs]
        block(b, seqs, 1)
        rot = [1, 2, 3, 4, 0]  # a rotation, then blocks as wide as speculative passes
        b.reorder(rot)
        seqs = [seqs[s] + tokens[:3] for s in rot]
        block(b, seqs, 3)
        seqs = [seq + conts[j][:4] for j, seq in enumerate(seqs)]
        block(b, seqs, 4)
    finally:
        release(b)

    return {"exact": exact, "max_abs_diff": worst}


def beams_exact(model: BeamProbe) -> bool:
    """Does the batched (beam) decoder compute each hypothesis's rows as single passes do?
    Checked once per model object, remembered in the models folder like :func:`rows_exact`."""
    if model.beam_check is None:
        model.beam_check = _checked(model, model.beam_memo, _kind("beams5", model), probe_beams)
    return bool(model.beam_check["exact"])
