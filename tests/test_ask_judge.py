"""The answer judge (issue #46): evidence ranked by the question, answers withheld when their
model finds them unlikely as the answer or they are not of the kind asked, and yes/no
questions decided by the clause that says them. No model: answers are built as the answerer
finds them, then judged."""

from __future__ import annotations

from dataclasses import replace

from as2d.runtime.ask.answer import Answer
from as2d.runtime.ask.answer_events import AnswerStats
from as2d.runtime.ask.english.rules import ENGLISH_POLICY
from as2d.runtime.ask.english.yesno import yes_no_decision
from as2d.runtime.ask.judge import LIKELIHOOD_BELOW, judge, retrieve, support
from as2d.runtime.ask.policy import Candidate
from as2d.runtime.ask.spans import Span

SPANS = [
    Span(0.0, 4.0, "Good evening, here is the local news."),
    Span(4.0, 9.5, "The old footbridge over the Carver River will close on Monday for repairs."),
    Span(9.5, 14.0, "The work is expected to take six weeks."),
    Span(14.0, 19.0, "The town engineer, Laura Jennings, said the planks had rotted."),
    Span(19.0, 24.0, "The morning ferry to Castle"),
    Span(24.0, 27.0, "Island is cancelled on Sunday. The bakery is not open on Mondays."),
]


def found(text: str, method: str = "extracted", where: tuple[int, ...] = ()) -> Answer:
    return Answer("", text, [], list(SPANS), False, None, "extracted", AnswerStats(), None,
                  method, evidence=[SPANS[i] for i in where],
                  abstained=method == "not said")


def test_retrieval_ranks_the_passage_that_says_the_question_first():
    assert retrieve(SPANS, "How long will the work on the footbridge take?")[:2] == [2, 1] or \
        retrieve(SPANS, "How long will the work on the footbridge take?")[0] in (1, 2)
    assert retrieve(SPANS, "Who said the planks had rotted?")[0] == 3
    assert retrieve(SPANS, "What is the price of bread?") == []


def test_an_answer_keeps_its_own_passage_first_then_the_closest():
    q = "Who said the planks had rotted?"
    a = judge(found("Laura Jennings.", where=(3,)), SPANS, q, ENGLISH_POLICY)
    assert not a.abstained and a.text == "Laura Jennings."
    assert a.evidence[0] == SPANS[3]
    assert a.confidence == support(q, SPANS, [3]) == 1.0


def test_a_span_the_model_finds_unlikely_as_the_answer_is_withheld():
    q = "What did the mayor promise the fishermen of the harbour?"
    rivals = [Candidate("Repairs.", "line", (1,), score=1.0, likelihood=LIKELIHOOD_BELOW - 1),
              Candidate("Six weeks.", "line", (2,), score=0.6, likelihood=-20.0)]
    a = judge(replace(found("Repairs.", where=(1,)), candidates=rivals), SPANS, q,
              ENGLISH_POLICY)
    assert a.abstained and a.method == "not said" and "likelihood" in a.reason
    assert a.text == ENGLISH_POLICY.not_said and a.withheld == "Repairs."
    assert a.likelihood == LIKELIHOOD_BELOW - 1 and a.evidence[0] == SPANS[1]
    # likely enough, or not scored at all (no candidates), it stands; the same text found
    # again in another span counts at its likeliest
    again = [Candidate("Repairs.", "line", (2,), score=0.9, likelihood=LIKELIHOOD_BELOW + 1)]
    b = judge(replace(found("Repairs.", where=(1,)), candidates=rivals + again), SPANS, q,
              ENGLISH_POLICY)
    assert not b.abstained and b.likelihood == LIKELIHOOD_BELOW + 1
    assert not judge(found("Repairs.", where=(1,)), SPANS, q, ENGLISH_POLICY).abstained
    # a bar of -inf withholds none for it (what the bar is calibrated on)
    assert not judge(replace(found("Repairs.", where=(1,)), candidates=rivals), SPANS, q,
                     ENGLISH_POLICY, float("-inf")).abstained


def test_the_models_own_answer_stands_only_on_a_passage_that_says_the_question():
    # no rival span to weigh it against: its passage must say half the question's words
    said = judge(found("On Monday.", "generated", (1,)), SPANS,
                 "When will the footbridge over the river close?", ENGLISH_POLICY)
    assert not said.abstained and said.text == "On Monday."
    unsaid = judge(found("On Monday.", "generated", (1,)), SPANS,
                   "When does the harbour festival open its gates to visitors?", ENGLISH_POLICY)
    assert unsaid.abstained and "own answer" in unsaid.reason
    assert unsaid.withheld == "On Monday."


def test_an_answer_not_of_the_kind_asked_is_withheld_with_the_closest_passage():
    q = "Who said the planks had rotted?"
    a = judge(found("Rotted.", where=(3,)), SPANS, q, ENGLISH_POLICY)
    assert a.abstained and "kind" in a.reason
    assert a.evidence[0] == SPANS[3]  # where the recording comes closest
    # a number for "how many", not a word of the passage
    b = judge(found("The planks.", where=(3,)), SPANS, "How many planks had rotted?",
              ENGLISH_POLICY)
    assert b.abstained
    c = judge(found("Well.", where=(0,)), SPANS, "What is the news?", ENGLISH_POLICY)
    assert c.abstained


def test_yes_no_is_decided_by_the_clause_that_says_it_over_segment_breaks():
    yes = yes_no_decision(SPANS, "Will the footbridge close on Monday?")
    assert yes is not None and yes[0].startswith("Yes.") and yes[1] == [1]
    no = yes_no_decision(SPANS, "Is the bakery open on Mondays?")
    assert no is not None and no[0].startswith("No.")
    # said across two segments, denied by its verb
    ferry = yes_no_decision(SPANS, "Can you take the morning ferry to Castle Island on Sunday?")
    assert ferry is not None and ferry[0].startswith("No.") and ferry[1] == [4]
    assert yes_no_decision(SPANS, "Did the engineer buy a new car?") is None
    # a compound however it is written: "foot bridge" (as Whisper may hear it) says
    # "footbridge", and "honeybees" says "honey bees"
    apart = [Span(0.0, 5.0, "The old foot bridge will close on Monday for repairs.")]
    assert yes_no_decision(apart, "Will the footbridge close on Monday for repairs?")[0] \
        .startswith("Yes.")
    joined = [Span(0.0, 5.0, "Amara studies honeybees in Bristol.")]
    assert yes_no_decision(joined, "Does Amara study honey bees?")[0].startswith("Yes.")
    # but a stop word joins nothing: "to day" is not "today", "a jar" not "ajar"
    day = [Span(0.0, 3.0, "The shop will open to day trippers in the summer.")]
    assert yes_no_decision(day, "Is the shop open today?") is None
    jar = [Span(0.0, 3.0, "At the end of the lane the gate was a jar of honey.")]
    assert yes_no_decision(jar, "Was the gate ajar?") is None


def test_a_yes_no_question_gets_yes_no_or_abstains_never_a_fragment():
    q = "Is the bakery open on Mondays?"
    unlikely = [Candidate("Mondays.", "line", (5,), score=0.0, likelihood=-30.0)]
    a = judge(replace(found("Mondays.", where=(5,)), candidates=unlikely), SPANS, q,
              ENGLISH_POLICY)  # (decided by its clause, not by the span's likelihood)
    assert a.text.startswith("No.") and a.method == "confirmed"
    # the whole sentence that decides it (it starts in the segment before)
    assert "bakery is not open" in a.evidence[0].text and a.evidence[0].start == SPANS[4].start
    b = judge(found("Give.", where=(0,)), SPANS, "Did the engineer give a speech?",
              ENGLISH_POLICY)
    assert b.abstained and b.withheld == "Give."


def test_a_withheld_guess_from_selected_passages_yields_to_the_best_passage_overall():
    """Read whole, the withheld guess's passage leads (where the recording comes closest);
    read from passages selected out of a long transcript, the guess saw only part of it, so
    the passage that shares the most with the question over the whole transcript leads."""
    q = "Who said the planks had rotted?"
    guess = found("Rotted.", where=(0,))  # withheld: not of the kind asked
    whole = judge(guess, SPANS, q, ENGLISH_POLICY)
    assert whole.abstained and whole.evidence[0] == SPANS[0]
    assert SPANS[3].text in whole.evidence[1].text
    part = judge(replace(guess, selected=True), SPANS, q, ENGLISH_POLICY)
    assert part.abstained and SPANS[3].text in part.evidence[0].text  # (whole sentences)
    # an answer that stands keeps its own passage first either way
    kept = judge(replace(found("Laura Jennings.", where=(3,)), selected=True), SPANS, q,
                 ENGLISH_POLICY)
    assert not kept.abstained and SPANS[3].text in kept.evidence[0].text


def test_a_found_abstention_shows_the_closest_passages():
    a = judge(found(ENGLISH_POLICY.not_said, "not said"), SPANS,
              "What colour is the old footbridge?", ENGLISH_POLICY)
    assert a.abstained and a.evidence and a.evidence[0] == SPANS[1]


def test_a_who_or_name_answer_names_someone_the_question_does_not():
    spans = [Span(0.0, 5.0, "But a physician named John Snow thought the illness came from "
                            "dirty drinking water.")]
    a = judge(Answer("", "John Snow thought.", [], spans, False, None, "extracted",
                     AnswerStats(), None, "extracted", evidence=spans), spans,
              "What was the name of John Snow's wife?", ENGLISH_POLICY)
    assert a.abstained and a.withheld == "John Snow thought."
    b = judge(Answer("", "John Snow.", [], spans, False, None, "extracted", AnswerStats(),
                     None, "extracted", evidence=spans), spans,
              "Who thought the illness came from the water?", ENGLISH_POLICY)
    assert not b.abstained and b.text == "John Snow."
