"""The answer policy is picked from the transcript's language (:mod:`as2d.runtime.ask.policies`):
the English rules for English (or a language not known), none for another language, where
the answer is the model's own and the answer's note says the rules were off. For English the
answer document is as it was: no key added, none changed."""

from __future__ import annotations

import pytest

from as2d.runtime.ask.english.rules import ENGLISH_POLICY, EnglishPolicy
from as2d.runtime.ask.policies import policy_for
from as2d.runtime.ask.policy import NoPolicy
from as2d.runtime.ask.spans import Span

SPANS = [Span(0.0, 3.0, "Ever tried. Ever failed."),
         Span(3.0, 6.0, "No matter. Try again. Fail again.")]
COUNT = "How many times does the speaker say 'again'?"


@pytest.mark.parametrize("language", [None, "en", "EN", "english"])
def test_english_or_unknown_gets_the_english_rules(language):
    assert policy_for(language) is ENGLISH_POLICY
    assert isinstance(policy_for(language), EnglishPolicy) and ENGLISH_POLICY.note is None


@pytest.mark.parametrize("language", ["fr", "de", "zh", "es"])
def test_another_language_gets_no_rules(language):
    policy = policy_for(language)
    assert isinstance(policy, NoPolicy) and policy.not_said is None
    assert language in policy.note
    # nothing read off the transcript, no span proposed, no clock question, the model's own
    # answer stands as generated
    assert policy.read(SPANS, COUNT) is None
    assert policy.candidates(SPANS, "What does the speaker say?") == []
    assert not policy.asks_about_time("When does the speaker say 'again'?")
    assert policy.fallback("Encore.", COUNT, SPANS, []) == "Encore."
    # the same question over an English transcript is read off it
    assert ENGLISH_POLICY.read(SPANS, COUNT) == ("counted", "Twice.", [1])


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from tiny_llm import export_tiny_decoder

    from as2d.runtime.llm.hf_lm import HFCausalLM

    folder = export_tiny_decoder(tmp_path_factory.mktemp("hf") / "exact",
                                 [" ".join(s.text for s in SPANS)] * 30, seed=1)
    return HFCausalLM(folder, threads=1)


def test_the_answerer_answers_from_the_model_alone_off_english(tiny_lm):
    from as2d.runtime.ask.answer import Answerer, AskOptions

    answerer = Answerer(tiny_lm, None, AskOptions(max_tokens=8))
    english = answerer.ask(SPANS, COUNT)
    assert answerer.ask(SPANS, COUNT, language="en").to_dict() == english.to_dict()
    assert english.method == "counted" and english.text == "Twice."
    doc = english.to_dict()
    assert list(doc) == ["question", "answer", "method", "abstained", "evidence", "context",
                         "stopped"]
    assert doc["context"]["note"] is None
    french = answerer.ask(SPANS, COUNT, language="fr")
    assert french.method == "generated" and french.tokens  # generated, not read off
    off = french.to_dict()
    assert off["method"] == "generated" and "answer rules off" in off["context"]["note"]
    assert "fr" in off["context"]["note"]
