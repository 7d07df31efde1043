"""Sentence-aligned passages of a long transcript (issue #46): the evidence of an answer read
from selected passages is whole sentences, ranked over the whole transcript.

Table-driven over real Whisper transcripts: the question set's clips as the bench keeps them
(``bench/results/ask-dev-after.json``), joined in order the way ``scripts/ask_long.py`` joins
them. No model: answers are built as the answerer finds them, then judged. The questions are
made from the transcript's own sentences, so nothing here pins an answer of the question set.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from as2d.runtime.ask.answer import Answer
from as2d.runtime.ask.answer_events import AnswerStats
from as2d.runtime.ask.english.lexicon import SENTENCE_ENDS
from as2d.runtime.ask.english.rules import ENGLISH_POLICY
from as2d.runtime.ask.judge import RERANK_TOP, judge
from as2d.runtime.ask.passages import (
    PASSAGE_WORDS,
    content_words,
    passage,
    passage_runs,
    rank_passages,
    sentence_runs,
)
from as2d.runtime.ask.spans import Span

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "ask-dev-after.json"


@pytest.fixture(scope="module")
def recording() -> list[Span]:
    """Every clip's real transcript, shifted to its place in one recording (0.6 s apart)."""
    clips = json.loads(RESULTS.read_text())["transcripts"]
    spans, at = [], 0.0
    for clip in clips.values():
        spans += [Span(s["start"] + at, s["end"] + at, s["text"]) for s in clip["spans"]]
        at += clip["duration"] + 0.6
    assert len(spans) > 200
    return spans


def _ends_sentence(text: str) -> bool:
    return text.rstrip().rstrip("\"')\u201d\u2019")[-1:] in tuple(SENTENCE_ENDS)


def test_sentence_runs_cover_the_transcript_in_order_and_end_sentences(recording):
    runs = sentence_runs(recording)
    assert runs[0][0] == 0 and runs[-1][1] == len(recording) - 1
    assert all(b + 1 == a2 for (_, b), (a2, _) in zip(runs, runs[1:]))  # no gap, no overlap
    for a, b in runs[:-1]:  # a sentence's end, or the word limit of unpunctuated text
        words = sum(len(recording[i].text.split()) for i in range(a, b + 2))
        assert _ends_sentence(recording[b].text) or words > PASSAGE_WORDS
    assert sum(_ends_sentence(recording[b].text) for _, b in runs) > 0.9 * len(runs)
    # a segment Whisper cut mid-sentence is read with the rest of its sentence
    cut = [i for i, s in enumerate(recording[:-1]) if not _ends_sentence(s.text)]
    assert cut
    for i in cut:
        a, b = next(r for r in runs if r[0] <= i <= r[1])
        words = sum(len(recording[j].text.split()) for j in range(a, i + 2))
        assert b > i or words > PASSAGE_WORDS


def test_passages_start_at_every_sentence_and_stay_readable(recording):
    runs = sentence_runs(recording)
    ps = passage_runs(recording)
    assert [a for a, _ in ps] == list(dict.fromkeys(a for a, _ in runs))
    for a, b in ps:
        first = next(r for r in runs if r[0] == a)
        words = sum(len(recording[i].text.split()) for i in range(a, b + 1))
        assert b == first[1] or words <= PASSAGE_WORDS  # one long sentence stays whole


@pytest.mark.parametrize("stride", [7, 11])
def test_a_sentence_asked_about_in_its_own_words_is_found_first(recording, stride):
    """A question made of the rarest content words of a sentence of the recording finds a
    passage that holds that sentence first."""
    runs = sentence_runs(recording)
    seen: dict[str, int] = {}
    for s in recording:
        for w in set(content_words(s.text)):
            seen[w] = seen.get(w, 0) + 1
    tried = found = 0
    for a, b in runs[::stride]:
        text = " ".join(recording[i].text for i in range(a, b + 1))
        rare = sorted(set(content_words(text)), key=lambda w: (seen.get(w, 0), w))[:3]
        if len(rare) < 3 or seen.get(rare[-1], 0) > 1:
            continue  # not a sentence its words single out
        tried += 1
        best = rank_passages(recording, "What about " + " ".join(rare) + "?")[0]
        found += best[0] <= a and b <= best[1]
    assert tried >= 5 and found == tried


def test_an_answer_from_selected_passages_shows_whole_sentences(recording):
    """Read from selected passages, the answer's evidence starts with the whole sentence its
    span belongs to; withheld, with the best passage over the whole transcript. Read whole,
    the same sentence (a Whisper segment may stop mid-sentence; the sentence is what a
    reader checks)."""
    runs = sentence_runs(recording)
    i = next(i for i, s in enumerate(recording[:-1]) if not _ends_sentence(s.text))
    a, b = next(r for r in runs if r[0] <= i <= r[1])
    question = "What about " + " ".join(content_words(recording[i].text)[:3]) + "?"
    found = Answer(question, "The recording does not say.", [], list(recording), True, None,
                   "extracted", AnswerStats(), None, "not said",
                   evidence=[recording[i]], abstained=True)
    withheld = judge(found, recording, question, ENGLISH_POLICY)
    ranked = rank_passages(recording, question)
    assert withheld.abstained and withheld.evidence[0] == passage(recording, ranked[0])
    # re-ranked by the model (here a rule that likes one passage): the passage it finds the
    # question likeliest after, among BM25's first RERANK_TOP, leads; an answer's own does not
    # move
    assert len(ranked) >= 2, "the re-ranker has a choice to make"
    liked = passage(recording, ranked[min(len(ranked), RERANK_TOP) - 1]).text

    def rerank(texts):
        return [float(t == liked) for t in texts]

    assert judge(found, recording, question, ENGLISH_POLICY, rerank=rerank).evidence[0].text \
        == liked
    kept = judge(Answer(question, recording[i].text, [], list(recording), True, None,
                        "extracted", AnswerStats(), None, "extracted",
                        evidence=[recording[i]]), recording, question, ENGLISH_POLICY)
    assert kept.evidence[0] == passage(recording, (a, b))
    assert judge(replace(found, text=recording[i].text, method="extracted", abstained=False),
                 recording, question, ENGLISH_POLICY, rerank=rerank).evidence[0] == \
        passage(recording, (a, b))
    assert kept.evidence[0].start == recording[a].start and kept.evidence[0].end >= \
        recording[i].end
    whole = judge(Answer(question, recording[i].text, [], list(recording), False, None,
                         "extracted", AnswerStats(), None, "extracted",
                         evidence=[recording[i]]), recording, question, ENGLISH_POLICY)
    assert whole.evidence[0] == passage(recording, (a, b))
