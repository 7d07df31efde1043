"""Candidate answers scored as one tree (``as2d.runtime.ask.tree``).

Specification:

* a trie shares prefixes, keeps each sequence's path, and its layout lets a node see only
  itself and its ancestors, at its depth;
* groups of sequences never exceed a pass's row budget, whatever the sequences;
* on the real Gemma bundle, a tree pass gives every node the logits a sequence pass gives it
  (to float tolerance: a tree is not promised bit-exact), leaves the cache as it was, and
  scores equal branch-by-branch scoring, chunked or not, with or without a prefix;
* the generator's answers stay token-identical to plain greedy generation when the tree
  proposes (its guesses are verified), and the tree source falls back to look-ups.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from as2d.runtime.ask import tree as tree_mod
from as2d.runtime.ask.lm import tree_layout
from as2d.runtime.ask.tree import ScoredTree, TreeSource, Trie, _groups, score
from as2d.runtime.speculative.lookup import Lookup, LookupSource

LLM = "gemma-3-270m"

seqs_strategy = st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=6), min_size=1,
                         max_size=12)


def test_a_trie_shares_prefixes_and_keeps_each_path():
    trie = Trie.of([[5, 6, 7], [5, 6], [5, 8], [9]])
    assert trie.tokens == [5, 6, 7, 8, 9]
    assert trie.parents == [-1, 0, 1, 0, -1]
    assert trie.paths == [[0, 1, 2], [0, 1], [0, 3], [4]]


def test_a_node_sees_itself_and_its_ancestors_at_its_depth():
    depth, visible = tree_layout([-1, 0, 1, 0, -1])
    assert depth.tolist() == [0, 1, 2, 1, 0]
    assert visible.astype(int).tolist() == [[1, 0, 0, 0, 0],
                                            [1, 1, 0, 0, 0],
                                            [1, 1, 1, 0, 0],
                                            [1, 0, 0, 1, 0],
                                            [0, 0, 0, 0, 1]]
    # a chain is the lower triangle at depths 0..T-1: a sequence pass
    depth, visible = tree_layout([-1, 0, 1, 2])
    assert depth.tolist() == [0, 1, 2, 3] and (visible == np.tri(4, dtype=bool)).all()
    with pytest.raises(ValueError):
        tree_layout([-1, 2, 0])  # a parent after its child


@given(seqs_strategy, st.integers(6, 20))
@settings(max_examples=200, deadline=None)
def test_groups_cover_every_sequence_within_the_row_budget(seqs, budget):
    groups = _groups(seqs, budget)
    assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    for g in groups:
        nodes = len(Trie.of([seqs[i] for i in g]).tokens)
        assert nodes <= budget or len(g) == 1


def test_the_greedy_path_follows_the_tree_and_adds_the_next_token():
    trie = Trie.of([[1, 2, 3], [1, 4]])
    vocab = 8

    def row(best):
        r = np.zeros(vocab, np.float32)
        r[best] = 5.0
        return r, 0.0

    # first row → 1; after 1 → 4; after 1,4 → 7 (leaves the tree); after 1,2 → 3; after 1,2,3 → 6
    rows = {0: row(4), 1: row(3), 2: row(6), 3: row(7)}
    t = ScoredTree(trie, row(1), rows)
    assert t.greedy_path([]) == [1, 4, 7]
    assert t.greedy_path([1]) == [4, 7]
    assert t.greedy_path([1, 2]) == [3, 6]
    assert t.greedy_path([5]) == []  # the answer left the tree


def test_the_tree_source_falls_back_to_look_ups_off_the_tree():
    trie = Trie.of([[1, 2]])
    rows = {0: (np.eye(8, dtype=np.float32)[2], 0.0), 1: (np.eye(8, dtype=np.float32)[0], 0.0)}
    look = LookupSource([Lookup("transcript", [9, 5, 6, 7])], {1: 0.9, 2: 0.9, 3: 0.9})
    src = TreeSource(prompt_len=3, fallback=look)
    prompt = [100, 101, 102]
    assert src.propose(prompt + [1], 8) == []  # no tree yet, no look-up match for 1
    src.tree = ScoredTree(trie, (np.eye(8, dtype=np.float32)[1], 0.0), rows)
    assert src.propose(prompt + [1], 8) == [2, 0] and src.last.lookup.name == "answers"
    assert src.propose(prompt + [1], 1) == [2]  # within the room
    got = src.propose(prompt + [5], 8)  # off the tree: the transcript's continuation
    assert got and got[0] == 6 and src.last.lookup.name == "transcript"
    assert src.names == ("answers", "transcript")


# -- on the real answering model ---------------------------------------------------------


@pytest.fixture(scope="module")
def lm(bundle):
    from as2d.runtime.ask.lm import CausalLM

    return CausalLM(bundle(LLM, "int8"), threads=2)


@pytest.fixture(scope="module")
def primed(lm):
    tok = lm.tokenizer
    prompt = [lm.bos] + tok.encode("Question: What did she say about the city?\nAnswer:",
                                   bos=False)
    texts = [" Loud but beautiful.", " Loud.", " Beautiful city.", " Loud but noisy.",
             " The city is loud but beautiful.", " She said it was loud."]
    return prompt, [tok.encode(t, bos=False) for t in texts]


class _SequencesOnly:
    """A state whose graph would lack the tree inputs (an older bundle, a Hugging Face
    export): scoring goes branch by branch."""

    trees = False

    def __init__(self, state) -> None:
        self._state = state

    def __getattr__(self, name):
        return getattr(self._state, name)


def _sequence_logits(state, n, seq):
    state.truncate(n)
    out = state.forward(seq)
    state.truncate(n)
    return out


def test_the_bundle_takes_tree_passes(lm):
    assert lm.trees  # converter version 6: positions and visible are inputs


def test_a_tree_pass_gives_each_node_its_sequence_logits(lm, primed):
    prompt, seqs = primed
    state = lm.state()
    try:
        lm.prefill(state, prompt)
        n = state.length
        trie = Trie.of(seqs)
        logits = state.forward_tree(trie.tokens, trie.parents)
        assert state.length == n  # nothing kept
        for seq, path in zip(seqs, trie.paths):
            ref = _sequence_logits(state, n, seq)
            got = logits[path]
            assert np.allclose(got, ref, atol=2e-3, rtol=0), float(np.abs(got - ref).max())
            assert (got.argmax(-1) == ref.argmax(-1)).all()
    finally:
        lm.release(state)


@pytest.mark.parametrize("max_rows", [56, 8])
def test_tree_scores_equal_branch_by_branch_scores(lm, primed, monkeypatch, max_rows):
    prompt, seqs = primed
    stops = frozenset(lm.stop_ids)
    state = lm.state()
    try:
        first = lm.prefill(state, prompt)
        n = state.length
        monkeypatch.setattr(tree_mod, "MAX_ROWS", max_rows)  # 8: several passes
        tree_scores, scored = score(state, first, seqs, stops)
        assert state.length == n and scored is not None
        seq_scores, none = score(_SequencesOnly(state), first, seqs, stops)
        assert state.length == n and none is None
        assert np.allclose(tree_scores, seq_scores, atol=1e-3, rtol=0)
        # with a prefix run in the same pass (the calibration's neutral question)
        suffix = lm.tokenizer.encode(" What is said?\nAnswer:", bos=False)
        with_prefix, _ = score(state, None, seqs, stops, prefix=suffix)
        assert state.length == n
        seq_prefix, _ = score(_SequencesOnly(state), None, seqs, stops, prefix=suffix)
        assert state.length == n
        assert np.allclose(with_prefix, seq_prefix, atol=1e-3, rtol=0)
        assert not np.allclose(with_prefix, tree_scores, atol=1e-2)  # the prefix mattered
    finally:
        lm.release(state)
