"""Answers of the kind asked (:mod:`as2d.runtime.ask.english.kinds`): the question's kind from its
first wh-phrase, answers that fit it, add to the question and were said; otherwise none is
given."""

from __future__ import annotations

import pytest

from as2d.runtime.ask.english.kinds import (
    NOT_SAID,
    adds_to,
    fits,
    names_in,
    qualifies,
    question_kind,
)
from as2d.runtime.ask.question import question_error
from as2d.runtime.ask.spans import Span

SPANS = [Span(0.0, 4.0, "And Mr. John Dashwood had then leisure to consider how much there "
                        "might be in his power."),
         Span(4.0, 8.0, "He stayed twelve days in Lisbon and paid 3 dollars for the tram."),
         Span(8.0, 11.0, "When it rains, the stalls move inside the old town halls.")]


@pytest.mark.parametrize("question,kind", [
    ("Who had leisure to consider how much he could do for them?", "who"),  # first wh-phrase
    ("When did Mr. John Dashwood have leisure to consider how much ...?", "time"),
    ("Where do the stalls move when it rains?", "place"),
    ("How many dollars did he pay?", "count"),
    ("How long did he stay?", "duration"),
    ("What time does it open?", "time"),  # the more specific phrase
    ("Mary planted the roses, and what did Tom do?", "what"),
    ("Why do they walk slowly?", "reason"),
])
def test_the_kind_is_the_first_wh_phrases(question, kind):
    assert question_kind(question) == kind


def test_answers_fit_their_kind():
    names = names_in(SPANS)
    assert {"john", "dashwood", "lisbon"} <= names and "and" not in names and "he" not in names
    assert fits("who", "Mr. John Dashwood.", names)
    assert not fits("who", "12.", names)            # a number for a person
    assert not fits("who", "In his power.", names)   # no person in it
    assert fits("count", "3 dollars.", names) and fits("count", "Twelve.", names)
    assert not fits("count", "The tram.", names)
    assert fits("duration", "Twelve days.", names) and not fits("duration", "In Lisbon.", names)
    assert fits("time", "Then.", names) and fits("time", "When it rains.", names)
    assert not fits("time", "The old town halls.", names)
    assert fits("place", "Inside the old town halls.", names) and fits("place", "Lisbon.", names)
    assert not fits("place", "3 dollars.", names)


def test_a_restatement_adds_nothing_and_unsaid_words_are_not_given():
    q = "What did he pay for the tram?"
    assert not adds_to("He pays for the tram.", q)  # (regular inflections only)
    assert adds_to("3 dollars.", q) and adds_to("No.", q)
    assert qualifies("Three dollars.", q, SPANS)     # number words meet digits
    assert not qualifies("5 euros.", q, SPANS)      # never said
    assert qualifies("He stays twelve days.", "How long did he stay in Lisbon?", SPANS)
    assert NOT_SAID == "The recording does not say."


def test_an_instruction_models_first_qualifying_sentence_is_its_answer():
    from as2d.runtime.ask.english.kinds import first_qualifying, unframed

    q = "Who had leisure to consider how much there might be in his power?"
    assert unframed("The answer to this question is: \"3 dollars.\"") == "3 dollars."
    assert first_qualifying("Mr. John Dashwood. He was a wizard of Oz.", q, SPANS) == \
        "Mr. John Dashwood."                       # a title's full stop ends no sentence
    assert first_qualifying("The answer is: a wizard.", q, SPANS) is None
    assert first_qualifying("The speaker says it was Mr. John Dashwood.", q, SPANS)


@pytest.mark.parametrize("question,problem", [
    ("", "empty"), ("   ", "empty"), ("?", "no words"), (" ?! ", "no words"), ("...", "no words"),
    ("Who?", None), ("2+2?", None), ("¿Qué dice?", None), ("why " * 600, "too long"),
    ("Why?" + " " * 1996, None)])
def test_a_question_without_words_cannot_be_asked(question, problem):
    got = question_error(question)
    assert (got is None) if problem is None else (problem in got)
