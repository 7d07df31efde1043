"""Candidate answers as one tree: scored in one pass, and a drafter for the generated answer.

Scoring a short list of transcript spans as answers (:mod:`as2d.runtime.ask.english.extract`)
used to take one pass of the answering model per branch of their prefix trie, ~20 ms each
whatever its length (the pass is bound by reading the weights). The Gemma graph also takes each
token's position and what it sees (:mod:`as2d.models.gemma_graph`), so the whole trie runs as
one pass whose rows attend only to their own ancestors: :func:`score`. A graph without those
inputs (a bundle from before them, a Hugging Face export) is scored branch by branch as before.

The same rows say where the model's greedy answer goes while it follows a candidate, which is
what :class:`TreeSource` proposes to the generator. A tree pass is not bit-identical to a
sequence pass, so its guesses are verified like any candidate and commit nothing by
themselves: the answer stays token-identical to plain greedy generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


@dataclass(frozen=True)
class Row:
    """What is kept of one row of logits (a full row is 1 MB): the greedy token, the
    log-probabilities of the tokens the tree goes on with, and of ending there (any stop id)."""

    best: int
    next_lp: dict[int, float]
    stop_lp: float


class Summarizer:
    """Rows to :class:`Row`, with one float32 scratch row for the exponentials, reused: a
    fresh 1-MB array a row is fresh pages the kernel zeroes and faults in, which took two
    thirds of the time of the hundred-odd rows an answer's candidates are scored with. The
    same operations in the same order as on a fresh array: the same bits."""

    def __init__(self, stops: np.ndarray) -> None:
        self.stops = stops
        self.scratch = np.empty(0, np.float32)

    def __call__(self, logits: np.ndarray, nexts: Iterable[int]) -> Row:
        row = np.asarray(logits, dtype=np.float32)
        if self.scratch.shape != row.shape:
            self.scratch = np.empty(row.shape, np.float32)
        m = row.max()
        np.subtract(row, m, out=self.scratch)
        np.exp(self.scratch, out=self.scratch)
        lse = float(m) + float(np.log(self.scratch.sum(dtype=np.float64)))
        stops = self.stops
        stop_lp = float("-inf")
        if len(stops):
            e = row[stops].astype(np.float64)
            stop_lp = float(e.max() + np.log(np.exp(e - e.max()).sum())) - lse
        return Row(int(np.argmax(row)), {int(t): float(row[t]) - lse for t in nexts}, stop_lp)


@dataclass
class ScoredTree:
    """The model's rows over a trie of continuations, summarized (:class:`Row`); ``first`` is
    the row before the first token."""

    trie: Trie
    first: Row
    rows: dict[int, Row]

    def greedy_path(self, after: Sequence[int]) -> list[int]:
        """The model's greedy continuation of ``after`` (tokens from the root) while it stays
        in the tree, plus its next token: [] when ``after`` leaves the tree."""
        node = -1
        for t in after:
            kids = self.trie.root if node < 0 else self.trie.children[node]
            node = kids.get(int(t), -2)
            if node == -2 or node not in self.rows:
                return []
        out = []
        while True:
            best = (self.first if node < 0 else self.rows[node]).best
            out.append(best)
            kids = self.trie.root if node < 0 else self.trie.children[node]
            node = kids.get(best, -2)
            if node == -2 or node not in self.rows:
                return out


def score(state, first_logits: np.ndarray | None, seqs: Sequence[Sequence[int]],
          stop_ids: frozenset[int], prefix: Sequence[int] = ()) -> tuple[list[float],
                                                                         ScoredTree | None]:
    """Log-likelihood of each sequence as the continuation of the cache (after ``prefix``,
    run in the same pass; ``first_logits`` are the row before the first token, None with a
    ``prefix``), with the probability of ending there (any of ``stop_ids``) added; an empty
    sequence scores -inf.

    One tree pass per :data:`MAX_ROWS` nodes where the state offers tree passes and the
    longest sequence fits (the cache is left as it was), else one sequence pass per trie
    branch (the cache is left at its length then too). The :class:`ScoredTree` (None without a
    tree pass, or with a ``prefix``) is what :class:`TreeSource` proposes from."""
    if first_logits is None and not prefix:
        raise ValueError("the row before the first token is needed without a prefix")
    stops = np.fromiter(sorted(stop_ids), dtype=np.int64)
    trie = Trie.of(seqs)

    def nexts(node: int) -> Iterable[int]:
        return (trie.root if node < 0 else trie.children[node]).keys()

    rows: dict[int, Row] = {}
    firsts: dict[int, Row] = {}  # sequence → the row before its first token
    summarize = Summarizer(stops)
    first = summarize(first_logits, nexts(-1)) if first_logits is not None else None
    budget = min(MAX_ROWS, state.capacity - state.length) - len(prefix)
    trees = state.trees and budget >= max(map(len, seqs), default=0)
    if trees:
        for group in _groups(seqs, budget):
            sub = Trie()
            head = sub.add(prefix)
            lead = head[-1] if head else -1
            paths = {i: sub.add(seqs[i], lead) for i in group}
            if not sub.tokens:
                continue
            logits = state.forward_tree(sub.tokens, sub.parents)
            if head:  # each group's own pass gives its sequences their first row
                first = summarize(logits[lead], nexts(-1))
            for i, path in paths.items():
                firsts[i] = first
                for node, sub_node in zip(trie.paths[i], path):
                    if node not in rows:
                        rows[node] = summarize(logits[sub_node], nexts(node))
    else:
        lead = _sequence_rows(state, trie, seqs, rows, prefix, summarize)
        first = lead or first
    out = []
    for i, seq in enumerate(seqs):
        path = trie.paths[i]
        if not path:
            out.append(float("-inf"))
            continue
        before = firsts.get(i, first)
        lp = 0.0
        for node, t in zip(path, seq):
            lp += before.next_lp[int(t)]
            before = rows[node]
        out.append(lp + before.stop_lp)
    tree = ScoredTree(trie, first, rows) if trees and not prefix else None
    return out, tree


def _sequence_rows(state, trie: Trie, seqs: Sequence[Sequence[int]], rows: dict[int, Row],
                   prefix: Sequence[int], summarize: Summarizer) -> Row | None:
    """The trie's rows by sequence passes, one per branch (a common prefix runs once), after
    ``prefix`` (whose last row is returned). The cache ends where it began."""
    start = state.length
    lead = None
    try:
        if prefix:
            lead = summarize(state.forward(list(prefix), logit_rows=1)[-1], trie.root.keys())
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
                    if node not in rows:
                        rows[node] = summarize(row, trie.children[node].keys())
                fed += new
    finally:
        state.truncate(start)
    return lead


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
                self.last = Proposal(ANSWERS)  # (no n-gram match: match length 0)
                return path
        if self.fallback is None:
            return []
        cands = self.fallback.propose(context, room)
        self.last = self.fallback.last
        return cands

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        if self.fallback is None:
            return
        if self._from_tree:
            # The answer moved on without the look-ups: where their copies stood is stale.
            for lookup in self.fallback.lookups:
                lookup.cursor = None
        else:
            self.fallback.observe(offered, verdict)

    def finish(self, context: Sequence[int]) -> None:
        if self.fallback is not None:
            self.fallback.finish(context)
