"""Candidate answers as one tree: scored in one pass, and a drafter for the generated answer.

Scoring a short list of transcript spans as answers (:mod:`as2d.runtime.ask.extract`) used to
take one pass of the answering model per branch of their prefix trie, ~20 ms each whatever its
length (the pass is bound by reading the weights). The Gemma graph also takes each token's
position and what it sees (:mod:`as2d.models.gemma_graph`), so the whole trie runs as one pass
whose rows attend only to their own ancestors: :func:`score`. A graph without those inputs (a
bundle from before them, a Hugging Face export) is scored branch by branch as before.

The same rows say where the model's greedy answer goes while it follows a candidate, which is
what :class:`TreeSource` proposes to the generator. A tree pass is not bit-identical to a
sequence pass, so its guesses are verified like any candidate and commit nothing by
themselves: the answer stays token-identical to plain greedy generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.lookup import NOTHING, LookupSource, Proposal
from as2d.runtime.speculative.verify import Verdict

# Rows per tree pass: a pass's cost grows slowly up to ~50 rows (6 rows 23 ms, 48 rows 68 ms
# at a 400-token context on two threads) and steeply after (72 rows 125 ms).
MAX_ROWS = 56


@dataclass
class Trie:
    """Token sequences as a prefix tree: node ``i`` is ``tokens[i]``, a child of
    ``parents[i]`` (-1: of the root, the text before); ``paths[s]`` are the nodes of
    sequence ``s``."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    paths: list[list[int]] = field(default_factory=list)
    children: list[dict[int, int]] = field(default_factory=list)
    root: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, seqs: Sequence[Sequence[int]]) -> Trie:
        trie = cls()
        for seq in seqs:
            trie.paths.append(trie.add(seq))
        return trie

    def add(self, seq: Sequence[int], under: int = -1) -> list[int]:
        path, node = [], under
        for t in seq:
            kids = self.root if node < 0 else self.children[node]
            nxt = kids.get(int(t))
            if nxt is None:
                nxt = kids[int(t)] = len(self.tokens)
                self.tokens.append(int(t))
                self.parents.append(node)
                self.children.append({})
            path.append(nxt)
            node = nxt
        return path


def _groups(seqs: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
    """Sequence indices in trie order, cut into groups whose tries fit ``budget`` nodes."""
    order = sorted(range(len(seqs)), key=lambda i: list(seqs[i]))
    groups: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for i in order:
        prefixes = {tuple(seqs[i][:j + 1]) for j in range(len(seqs[i]))}
        if groups and len(seen | prefixes) <= budget:
            groups[-1].append(i)
            seen |= prefixes
        else:
            groups.append([i])
            seen = prefixes
    return groups


@dataclass
class ScoredTree:
    """The model's rows over a trie of continuations: for each node, its log-softmax row
    (as ``(logits, log-sum-exp)``); ``first`` is the row before the first token."""

    trie: Trie
    first: tuple[np.ndarray, float]
    rows: dict[int, tuple[np.ndarray, float]]

    def row(self, node: int) -> tuple[np.ndarray, float]:
        return self.first if node < 0 else self.rows[node]

    def greedy_path(self, after: Sequence[int]) -> list[int]:
        """The model's greedy continuation of ``after`` (tokens from the root) while it stays
        in the tree, plus its next token: [] when ``after`` leaves the tree."""
        node = -1
        for t in after:
            kids = self.trie.root if node < 0 else self.trie.children[node]
            node = kids.get(int(t), -2)
            if node == -2 or (node >= 0 and node not in self.rows):
                return []
        out = []
        while True:
            logits, _ = self.row(node)
            best = int(np.argmax(logits))
            out.append(best)
            kids = self.trie.root if node < 0 else self.trie.children[node]
            node = kids.get(best, -2)
            if node == -2 or node not in self.rows:
                return out


def score(state, first_logits: np.ndarray | None, seqs: Sequence[Sequence[int]],
          stop_ids: frozenset[int], prefix: Sequence[int] = ()) -> tuple[list[float],
                                                                         ScoredTree | None]:
    """Log-likelihood of each sequence as the continuation of the cache (after ``prefix``,
    run in the same pass; ``first_logits`` are the row before the first token; None with a
    ``prefix``), with the probability of ending there (any of ``stop_ids``) added.

    One tree pass per :data:`MAX_ROWS` nodes where the state offers tree passes (the cache is
    left as it was), else one sequence pass per trie branch (the cache is left at its length
    then too). The :class:`ScoredTree` (None without a tree pass, or with a ``prefix``) holds
    the rows for :class:`TreeSource`."""
    stops = np.fromiter(sorted(stop_ids), dtype=np.int64)
    trie = Trie.of(seqs)
    rows: dict[int, tuple[np.ndarray, float]] = {}
    first = _log_softmax(first_logits) if first_logits is not None else None
    budget = min(MAX_ROWS, state.capacity - state.length) - len(prefix)
    trees = getattr(state, "trees", False) and budget >= max(map(len, seqs), default=0)
    if trees:
        for group in _groups(seqs, budget):
            sub = Trie()
            if prefix:
                head = sub.add(prefix)
            lead = head[-1] if prefix else -1
            paths = {i: sub.add(seqs[i], lead) for i in group}
            logits = state.forward_tree(sub.tokens, sub.parents)
            if prefix:
                first = _log_softmax(logits[head[-1]])
            for i, path in paths.items():
                for node, sub_node in zip(trie.paths[i], path):
                    if node not in rows:
                        rows[node] = _log_softmax(logits[sub_node])
    else:
        _sequence_rows(state, trie, seqs, rows, prefix)
        if prefix:
            first = rows.pop(-1)
    out = []
    for i, seq in enumerate(seqs):
        path = trie.paths[i]
        if not path:
            out.append(float("-inf"))
            continue
        lp = 0.0
        before = first
        for node, t in zip(path, seq):
            logits, lse = before
            lp += float(logits[t]) - lse
            before = rows[node]
        end, lse = before
        if len(stops):
            e = end[stops].astype(np.float64)
            lp += float(e.max() + np.log(np.exp(e - e.max()).sum())) - lse
        out.append(lp)
    tree = ScoredTree(trie, first, rows) if trees and not prefix else None
    return out, tree


def _sequence_rows(state, trie: Trie, seqs: Sequence[Sequence[int]],
                   rows: dict[int, tuple[np.ndarray, float]], prefix: Sequence[int]) -> None:
    """The trie's rows by sequence passes, one per branch (a common prefix runs once); the
    ``prefix`` is run first and its last row stored under -1. The cache ends where it began."""
    start = state.length
    try:
        if prefix:
            rows[-1] = _log_softmax(state.forward(list(prefix), logit_rows=1)[-1])
        base = state.length
        fed: list[int] = []
        for i in sorted(range(len(seqs)), key=lambda i: list(seqs[i])):
            seq = list(seqs[i])
            if not seq:
                continue
            lcp = 0
            while lcp < min(len(fed), len(seq)) and fed[lcp] == seq[lcp]:
                lcp += 1
            if lcp < len(fed):
                state.truncate(base + lcp)
                fed = fed[:lcp]
            new = seq[lcp:]
            if new:
                logits = state.forward(new)
                for node, row in zip(trie.paths[i][lcp:], np.asarray(logits)):
                    rows.setdefault(node, _log_softmax(row))
                fed += new
    finally:
        state.truncate(start)


def _log_softmax(row: np.ndarray) -> tuple[np.ndarray, float]:
    """A logits row and its log-sum-exp (a log-probability is ``row[t] - lse``)."""
    row = np.array(row, dtype=np.float32)  # a copy: the session may reuse its buffer
    m = float(row.max())
    return row, m + float(np.log(np.exp(row - m, dtype=np.float32).sum(dtype=np.float64)))


class _Answers:
    """Stands where a :class:`~as2d.runtime.speculative.lookup.Lookup` would in a proposal,
    so that reports name the source."""

    name = "answers"


ANSWERS = _Answers()


class TreeSource(CandidateSource):
    """Proposes the greedy continuation the scored candidates' tree predicts, and falls back
    to n-gram look-ups (``fallback``) where the answer has left the tree.

    ``prompt_len`` tokens of the context are the prompt; the tree's root follows them. The
    tree may be set after the source is made (:attr:`tree`), when the candidates are scored.
    """

    name = "answers"

    def __init__(self, prompt_len: int, fallback: LookupSource | None = None) -> None:
        self.prompt_len = prompt_len
        self.fallback = fallback
        self.tree: ScoredTree | None = None
        self.last: Proposal = NOTHING
        self._from_tree = False

    @property
    def names(self) -> tuple[str, ...]:
        return ("answers",) + (self.fallback.names if self.fallback else ())

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        self._from_tree = False
        self.last = NOTHING
        if room <= 0:
            return []
        if self.tree is not None:
            path = self.tree.greedy_path(context[self.prompt_len:])[:room]
            if path:
                self._from_tree = True
                self.last = Proposal(ANSWERS, len(path))
                return path
        if self.fallback is None:
            return []
        cands = self.fallback.propose(context, room)
        self.last = self.fallback.last
        return cands

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        if not self._from_tree and self.fallback is not None:
            self.fallback.observe(offered, verdict)

    def finish(self, context: Sequence[int]) -> None:
        if self.fallback is not None:
            self.fallback.finish(context)
