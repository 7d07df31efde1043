"""The prompt head's KV rows kept between runs: loaded rows are the rows a whole prefill
computes, bit for bit, so answers do not change; a damaged, foreign or unwritable cache only
costs a whole prefill.

Real Gemma 3 270M, real prompts (``PromptBuilder`` over a transcript line); the cache files
the tests write go to temporary folders of their own (the answerer's tests: beside the model,
whose bundle is linked into a folder of its own, cleared of stored rows before each).
"""

from __future__ import annotations

import numpy as np
import pytest

from as2d.runtime.ask.answer import Answerer, AskOptions
from as2d.runtime.ask.codec import Codec
from as2d.runtime.ask.prompt import STYLES, PromptBuilder
from as2d.runtime.ask.spans import Span
from as2d.runtime.llm.prefix_cache import MIN_ROWS, PrefixCache
from tests.helpers import linked_bundle

pytestmark = pytest.mark.slow

SPANS = [Span(0.0, 3.2, " Ever tried. Ever failed. No matter."),
         Span(3.2, 6.8, " Try again. Fail again. Fail better.")]


@pytest.fixture(scope="module")
def linked(bundle, tmp_path_factory):
    """Gemma 3 270M int8's bundle linked into a folder of its own and loaded from there, once
    for the module (one session): the answerer's tests keep their stored rows beside it
    (:func:`unstored` clears them before each), the other tests in temporary folders."""
    from as2d.runtime.llm.lm import CausalLM

    folder = _linked_bundle(bundle("gemma-3-270m", "int8"),
                            tmp_path_factory.mktemp("linked") / "bundle")
    return folder, CausalLM(folder, threads=2)


@pytest.fixture(scope="module")
def lm(linked):
    return linked[1]


def plan(lm, question: str, style: str = "qa"):
    builder = PromptBuilder(Codec(lm.tokenizer), style, None, lm.stop_ids)
    return builder, builder.plan(SPANS, question, lm.capacity - 48)


def prefill_rows(lm, ids, cache: PrefixCache | None, static: int, context: int = 0):
    """Last-token logits and the cache's rows after prefilling ``ids``."""
    state = lm.state()
    try:
        if cache is None:
            logits = lm.prefill(state, ids)
        else:
            logits, _ = cache.prefill(lm, state, ids, static, context)
        n = state.length
        return (np.array(logits), [k[:n].copy() for k in state.k], [v[:n].copy() for v in state.v])
    finally:
        lm.release(state)


def _linked_bundle(src, dest):
    """The bundle's files linked into a folder of their own, with no stored head: what a copy
    gives the prefix cache (a folder it writes its one file into) without copying 300 MB of
    weights per test. The tokenizer's store comes along (building it again would cost seconds
    a test), the heads and transcripts' rows kept beside the bundle do not."""
    return linked_bundle(src, dest, skip=(".prefix-", ".context-"))


@pytest.fixture(scope="module")
def short(lm):
    """The first 48 ids of a real prompt, a head of 40 rows, and their whole prefill (no
    cache): what the tests of damaged and unwritable files are held to. A file is refused and
    its rows computed again whatever the head's length, and each time is a prefill: of 48 rows
    rather than the whole prompt's ~390 (the prompt's own head is held to a whole prefill,
    bit for bit, by the test of loaded rows)."""
    _, p = plan(lm, "What should you do after you fail?")
    ids = p.ids[:48]
    assert MIN_ROWS <= 40 < p.static
    return ids, 40, prefill_rows(lm, ids, None, 0)


def same(a, b) -> bool:
    return (np.array_equal(a[0], b[0]) and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))
            and all(np.array_equal(x, y) for x, y in zip(a[2], b[2])))


@pytest.mark.parametrize("style", [s for s in STYLES if s != "instruct"])
def test_the_static_head_is_the_same_ids_in_every_prompt_of_a_style(lm, style):
    builder, a = plan(lm, "What should you do after you fail?", style)
    _, b = plan(lm, "Who is speaking?", style)
    assert a.static >= MIN_ROWS
    assert a.ids[:a.static] == b.ids[:b.static]
    # ... whatever the transcript, and it ends where the transcript begins.
    other = builder.plan([Span(0.0, 2.0, " Something else entirely.")], "Who?", lm.capacity - 48)
    assert other.ids[:other.static] == a.ids[:a.static]
    assert lm.tokenizer.decode(a.ids[:a.static]).endswith("Transcript:\n")
    assert "Ever tried" in lm.tokenizer.decode(a.ids[a.static:])


def test_rows_loaded_from_the_cache_equal_a_whole_prefill_bit_for_bit(lm, tmp_path):
    _, p = plan(lm, "What should you do after you fail?")
    whole = prefill_rows(lm, p.ids, None, 0)
    cache = PrefixCache(tmp_path, "test")
    stored = prefill_rows(lm, p.ids, cache, p.static)  # computes, then stores the head
    assert list(tmp_path.glob(".prefix-*.npz"))
    state = lm.state()
    try:
        _, loaded = cache.prefill(lm, state, p.ids, p.static)
    finally:
        lm.release(state)
    assert loaded == p.static
    reused = prefill_rows(lm, p.ids, cache, p.static)
    assert same(whole, stored) and same(whole, reused)
    # Another question after the same head: loaded rows, the same logits as computing them.
    _, q = plan(lm, "Who is speaking?")
    assert same(prefill_rows(lm, q.ids, None, 0), prefill_rows(lm, q.ids, cache, q.static))
    # A transcript read whole keeps its rows after the head's: a follow-up question about it
    # prefills only the question, and its rows equal those computed after the stored head.
    spans = [Span(i * 3.0, i * 3.0 + 3.0, s.text) for i, s in enumerate(SPANS * 3)]
    builder = PromptBuilder(Codec(lm.tokenizer), "qa", None, lm.stop_ids)
    a, b = (builder.plan(spans, q, lm.capacity - 48) for q in ("Who tried?", "What next?"))
    assert a.ids[:a.question_at] == b.ids[:b.question_at]
    assert a.question_at - a.static >= MIN_ROWS
    prefill_rows(lm, a.ids, cache, a.static, a.question_at)  # computed, then stored
    assert len(list(tmp_path.glob(".context-*.npz"))) == 1
    state = lm.state()
    try:
        logits, loaded = cache.prefill(lm, state, b.ids, b.static, b.question_at)
        n = state.length
        got = (np.array(logits), [k[:n].copy() for k in state.k], [v[:n].copy() for v in state.v])
    finally:
        lm.release(state)
    assert loaded == b.question_at
    assert same(got, prefill_rows(lm, b.ids, cache, b.static))


def test_a_damaged_cache_file_is_recomputed_and_replaced(lm, tmp_path, short):
    ids, static, whole = short
    cache = PrefixCache(tmp_path, "test")
    prefill_rows(lm, ids, cache, static)
    (path,) = tmp_path.glob(".prefix-*.npz")
    with np.load(path) as f:
        rows, digest = f["rows"].copy(), f["digest"]
    rows[1, 3, 5, 7] += 1.0  # one value off: the digest no longer matches
    np.savez(path, rows=rows, digest=digest)
    state = lm.state()
    try:
        logits, loaded = cache.prefill(lm, state, ids, static)
    finally:
        lm.release(state)
    assert loaded == 0 and np.array_equal(logits, whole[0])
    path.write_bytes(b"not a numpy file")
    assert same(prefill_rows(lm, ids, cache, static), whole)
    assert same(prefill_rows(lm, ids, cache, static), whole)  # rewritten, and loaded
    # Bit rot in the file itself (the zip's own check fails first) and a truncated file.
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    path.write_bytes(bytes(raw))
    assert same(prefill_rows(lm, ids, cache, static), whole)
    path.write_bytes(path.read_bytes()[: len(raw) // 3])
    assert same(prefill_rows(lm, ids, cache, static), whole)
    state = lm.state()
    try:
        _, loaded = cache.prefill(lm, state, ids, static)
    finally:
        lm.release(state)
    assert loaded == static  # stored again after each


def test_a_read_only_folder_means_a_whole_prefill_every_time(lm, tmp_path, monkeypatch, short):
    import errno
    import os

    from as2d.runtime.llm import prefix_cache

    def refuse(*_args):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(prefix_cache.os, "replace", refuse)  # what a read-only mount says
    ids, static, whole = short
    cache = PrefixCache(tmp_path, "test")
    assert same(prefill_rows(lm, ids, cache, static), whole)
    assert same(prefill_rows(lm, ids, cache, static), whole)
    assert not list(tmp_path.iterdir())  # no cache, and no temporary file left behind


def test_a_model_whose_weights_change_gets_another_key(lm, tmp_path):
    """The graph file alone is not the model: its weights file, any file of the bundle and
    the converter version are in the key (a stale head would silently change answers)."""
    from types import SimpleNamespace

    from as2d.runtime.llm.prefix_cache import for_model

    manifest = {"files": {"decoder": "decoder.onnx", "decoder_data": "decoder.onnx.data"},
                "sha256": {"decoder.onnx": "a" * 64, "decoder.onnx.data": "b" * 64},
                "converter_version": 4}

    def key(**change):
        m = {**manifest, "sha256": {**manifest["sha256"], **change.pop("sha256", {})},
             **change}
        model = SimpleNamespace(manifest=m, path=tmp_path, threads=2, lossless=True)
        return for_model(model).path([1, 2, 3])

    base = key()
    assert key(sha256={"decoder.onnx.data": "c" * 64}) != base
    assert key(converter_version=5) != base
    assert key() == base
    assert for_model(SimpleNamespace(manifest=manifest, path=tmp_path, threads=1,
                                     lossless=True)).path(
        [1, 2, 3]) != base
    assert for_model(SimpleNamespace(manifest={"files": {}}, path=tmp_path, lossless=True)) is None


def test_the_key_holds_the_head_and_what_its_bits_depend_on(tmp_path):
    a, b = PrefixCache(tmp_path, "graph A|threads 2"), PrefixCache(tmp_path, "graph A|threads 1")
    head = list(range(40))
    assert a.path(head) != b.path(head)
    assert a.path(head) != a.path(head[:-1] + [99])
    assert a.path(head) == PrefixCache(tmp_path, "graph A|threads 2").path(head)


@pytest.fixture
def unstored(linked):
    """(folder, model) with no head and no transcript's rows stored beside the model."""
    folder, model = linked
    for f in [*folder.glob(".prefix-*"), *folder.glob(".context-*")]:
        f.unlink()
    return folder, model


def test_the_answerer_keeps_the_head_beside_the_model_reads_it_ahead_and_reports_it(
        unstored, monkeypatch):
    """The first answer stores the head beside the model; ``as2d ask`` reads it beside the
    transcription (:meth:`Answerer.warm`), and its prefill then reads nothing; read ahead for
    another question's head, it is read at the prefill, as without reading ahead; with the
    cache off, nothing is read. Every answer is the one a whole prefill gives, and each says
    how many rows it took from the cache. (The generator under the answerer is the one
    ``as2d ask`` runs, so this is also the check that answers are the same with the head from
    the cache.)"""
    folder, model = unstored
    question = "What should you do after you fail?"
    options = AskOptions(extract=False)  # the model's own answer: tokens to compare
    cold = Answerer(model, options=options)
    assert not cold.warm(question)  # nothing stored yet
    first = cold.ask(SPANS, question)
    assert first.stats.prefill_cached == 0
    assert cold.builder.head(question) == first.prompt.ids[:first.prompt.static]
    assert len(list(folder.glob(".prefix-*.npz"))) == 1
    warm = Answerer(model, options=options)
    assert warm.warm(question)
    reads = []
    monkeypatch.setattr(PrefixCache, "_load", lambda self, *a: reads.append(a))
    again = warm.ask(SPANS, question)
    assert reads == [] and again.stats.prefill_cached == again.prompt.static > 0
    assert again.tokens == first.tokens and again.text == first.text
    # read ahead for one question, asked another whose head differs: read then, as before
    timed = Answerer(model, options=options)
    timed.warm("When does the speaker say 'fail better'?")
    monkeypatch.undo()
    other = timed.ask(SPANS, question)
    assert other.tokens == first.tokens and other.stats.prefill_cached == other.prompt.static
    off = Answerer(model, options=AskOptions(extract=False, prefix_cache=False)).ask(SPANS,
                                                                                     question)
    assert off.tokens == first.tokens and off.stats.prefill_cached == 0
    assert len(list(folder.glob(".prefix-*.npz"))) == 1


def test_a_transcripts_rows_are_kept_only_where_transcripts_are(unstored):
    """A transcript read whole leaves its rows beside the model for the next question, unless
    no transcript may be kept (``keep_rows=False``, as the engine asks without a transcript
    cache): then none."""
    folder, model = unstored
    spans = [Span(s.start + 6.8 * k, s.end + 6.8 * k, s.text) for k in range(4) for s in SPANS]
    question = "What should you do after you fail?"
    off = Answerer(model, options=AskOptions(extract=False)).ask(spans, question,
                                                                 keep_rows=False)
    assert not list(folder.glob(".context-*.npz"))
    kept = Answerer(model, options=AskOptions(extract=False)).ask(spans, question)
    assert len(list(folder.glob(".context-*.npz"))) == 1
    assert kept.tokens == off.tokens
