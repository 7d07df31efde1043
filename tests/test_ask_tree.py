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
from as2d.runtime.ask.tree import Row, ScoredTree, Summarizer, TreeSource, Trie, _groups, score
from as2d.runtime.llm.lm import tree_layout
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


def _row(best: int) -> Row:
    return Row(best, {}, float("-inf"))


def test_a_row_keeps_the_greedy_token_and_the_trees_log_probabilities():
    logits = np.log(np.array([0.1, 0.6, 0.2, 0.1], np.float32))
    summarize = Summarizer(np.array([3]))
    row = summarize(logits, [2, 3])
    assert row.best == 1
    assert row.next_lp == pytest.approx({2: np.log(0.2), 3: np.log(0.1)}, abs=1e-6)
    assert row.stop_lp == pytest.approx(np.log(0.1), abs=1e-6)
    assert summarize(logits[::-1].copy(), [1]) == Summarizer(np.array([3]))(logits[::-1], [1])
    assert Summarizer(np.array([], np.int64))(logits, []).stop_lp == float("-inf")


def test_the_greedy_path_follows_the_tree_and_adds_the_next_token():
    trie = Trie.of([[1, 2, 3], [1, 4]])
    # first row → 1; after 1 → 4; after 1,4 → 7 (leaves the tree); after 1,2 → 3; after 1,2,3 → 6
    rows = {0: _row(4), 1: _row(3), 2: _row(6), 3: _row(7)}
    t = ScoredTree(trie, _row(1), rows)
    assert t.greedy_path([]) == [1, 4, 7]
    assert t.greedy_path([1]) == [4, 7]
    assert t.greedy_path([1, 2]) == [3, 6]
    assert t.greedy_path([5]) == []  # the answer left the tree


def test_the_tree_source_falls_back_to_look_ups_off_the_tree():
    trie = Trie.of([[1, 2]])
    rows = {0: _row(2), 1: _row(0)}
    look = LookupSource([Lookup("transcript", [9, 5, 6, 7])], {1: 0.9, 2: 0.9, 3: 0.9})
    src = TreeSource(prompt_len=3, fallback=look)
    prompt = [100, 101, 102]
    assert src.propose(prompt + [1], 8) == []  # no tree yet, no look-up match for 1
    src.tree = ScoredTree(trie, _row(1), rows)
    assert src.propose(prompt + [1], 8) == [2, 0] and src.last.lookup.name == "answers"
    assert src.propose(prompt + [1], 1) == [2]  # within the room
    got = src.propose(prompt + [5], 8)  # off the tree: the transcript's continuation
    assert got and got[0] == 6 and src.last.lookup.name == "transcript"
    assert src.names == ("answers", "transcript")


# -- on the real answering model ---------------------------------------------------------


@pytest.fixture(scope="module")
def lm(bundle):
    from as2d.runtime.llm.lm import CausalLM

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


def test_a_tree_pass_refuses_a_full_context_and_an_old_graph(lm, monkeypatch):
    state = lm.state()
    try:
        state.length = state.capacity - 1  # (rows left as they are: only the check runs)
        with pytest.raises(ValueError, match="full"):
            state.forward_tree([5, 6], [-1, 0])
        state.length = 0
        with pytest.raises(ValueError, match="parent"):
            state.forward_tree([5, 6], [-1])
        monkeypatch.setattr(lm, "trees", False)
        with pytest.raises(ValueError, match="predates"):
            state.forward_tree([5], [-1])
    finally:
        state.length = 0
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


def test_question_likelihood_after_each_passage_is_that_of_one_whole_pass(lm):
    """Re-ranking passages (``as2d.runtime.ask.rerank``): each passage is scored after the
    head alone, whatever was scored before it (the cache is cut back), and its number is the
    log-probability of the question's tokens in one plain pass over head, passage and
    question."""
    from as2d.runtime.ask.codec import Codec
    from as2d.runtime.ask.rerank import ASK, HEAD, question_likelihoods

    codec = Codec(lm.tokenizer)
    texts = ["It was the best of times, it was the worst of times.",
             "Turn left at the bridge and walk for ten minutes."]
    question = "Which way should you turn?"
    got = question_likelihoods(lm, codec, texts, question)
    assert question_likelihoods(lm, codec, texts[::-1], question) == pytest.approx(got[::-1],
                                                                                  abs=1e-3)
    q = codec.text(" " + question)
    for text, lp in zip(texts, got):
        ids = [codec.bos] + codec.markup(HEAD) + codec.text(text) + codec.markup(ASK) + q
        state = lm.state()
        try:
            rows = state.forward(ids)[-len(q) - 1:-1].astype(np.float64)
        finally:
            lm.release(state)
        rows -= rows.max(axis=1, keepdims=True)
        logp = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
        assert lp == pytest.approx(sum(logp[i, t] for i, t in enumerate(q)), abs=1e-2)


# -- a small random-weight Gemma graph, past its sliding window (no bundle needed) ------------


def _tiny_gemma(quant: str):
    import onnxruntime as ort

    from as2d.models.gemma_config import GemmaConfig
    from as2d.models.gemma_graph import build_decoder

    cfg = GemmaConfig(vocab_size=64, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=1,
                      head_dim=16, intermediate_size=48, rms_eps=1e-6, rope_global_base=1e6,
                      rope_local_base=1e4, rope_global_scale=1.0, sliding_window=5,
                      layer_types=("local", "local", "global", "local"), query_scale=0.25,
                      embed_scale=32 ** 0.5, trained_context=128)
    rng = np.random.default_rng(7)
    d, q, kv, f = cfg.hidden_size, cfg.q_dim, cfg.kv_dim, cfg.intermediate_size
    shapes = {"token_embd.weight": (cfg.vocab_size, d), "output_norm.weight": (d,)}
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (d,), p + "attn_q.weight": (q, d),
                       p + "attn_k.weight": (kv, d), p + "attn_v.weight": (kv, d),
                       p + "attn_q_norm.weight": (cfg.head_dim,),
                       p + "attn_k_norm.weight": (cfg.head_dim,),
                       p + "attn_output.weight": (d, q), p + "post_attention_norm.weight": (d,),
                       p + "ffn_norm.weight": (d,), p + "ffn_gate.weight": (f, d),
                       p + "ffn_up.weight": (f, d), p + "ffn_down.weight": (d, f),
                       p + "post_ffw_norm.weight": (d,)})
    weights = {k: (1.0 + 0.1 * rng.standard_normal(s) if len(s) == 1
                   else 0.3 * rng.standard_normal(s)).astype(np.float32)
               for k, s in shapes.items()}
    model = build_decoder(weights.__getitem__, cfg, quant, capacity=128)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return cfg, ort.InferenceSession(model.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])


class _TinyRunner:
    """A KV cache over the tiny graph, as :class:`as2d.runtime.llm.lm.LLMState` keeps one."""

    def __init__(self, cfg, session) -> None:
        self.cfg, self.session = cfg, session
        self.k = [np.zeros((0, cfg.kv_dim), np.float32) for _ in range(cfg.num_layers)]
        self.v = [np.zeros((0, cfg.kv_dim), np.float32) for _ in range(cfg.num_layers)]

    def run(self, tokens, positions=None, visible=None, keep=True):
        t, n = len(tokens), len(self.k[0])
        feed = {"tokens": np.asarray(tokens, np.int64),
                "positions": np.arange(n, n + t) if positions is None else np.asarray(positions),
                "visible": np.tri(t, dtype=bool) if visible is None else visible,
                "logit_rows": np.array([t], np.int64)}
        for i in range(self.cfg.num_layers):
            feed[f"past_k_{i}"], feed[f"past_v_{i}"] = self.k[i], self.v[i]
        names = [o.name for o in self.session.get_outputs()]
        out = dict(zip(names, self.session.run(names, feed)))
        if keep:
            for i in range(self.cfg.num_layers):
                self.k[i] = np.concatenate([self.k[i], out[f"new_k_{i}"]])
                self.v[i] = np.concatenate([self.v[i], out[f"new_v_{i}"]])
        return out["logits"]

    def truncate(self, n):
        self.k = [k[:n] for k in self.k]
        self.v = [v[:n] for v in self.v]


@pytest.mark.parametrize("quant", ["int8", "fp32"])
def test_sequence_passes_stay_row_exact_past_the_sliding_window(quant):
    cfg, session = _tiny_gemma(quant)
    ids = np.random.default_rng(1).integers(1, cfg.vocab_size, 40).tolist()
    steps = _TinyRunner(cfg, session)
    single = np.concatenate([steps.run([t]) for t in ids])
    chunks = _TinyRunner(cfg, session)
    chunked = np.concatenate([chunks.run(ids[a:a + 7]) for a in range(0, len(ids), 7)])
    assert np.array_equal(single, chunked)  # bit for bit: verification is lossless


@pytest.mark.parametrize("quant", ["int8", "fp32"])
def test_a_tree_pass_matches_its_branches_past_the_sliding_window(quant):
    cfg, session = _tiny_gemma(quant)
    rng = np.random.default_rng(2)
    context = rng.integers(1, cfg.vocab_size, 30).tolist()  # 6 windows of the local layers
    seqs = [rng.integers(1, cfg.vocab_size, k).tolist() for k in (7, 3, 6)]
    seqs.append(seqs[0][:4] + [5, 6, 7])  # shares a prefix with the first
    runner = _TinyRunner(cfg, session)
    runner.run(context)
    trie = Trie.of(seqs)
    depth, visible = tree_layout(trie.parents)
    tree = runner.run(trie.tokens, positions=depth + len(context), visible=visible, keep=False)
    for seq, path in zip(seqs, trie.paths):
        alone = runner.run(seq)
        runner.truncate(len(context))
        assert np.allclose(tree[path], alone, atol=1e-4, rtol=0)
