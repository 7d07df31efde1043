"""Whether an answer stands, and the passages it rests on.

A 270M model and hand-written rules give *an* answer to nearly every question, right or not;
people outside the team found half of them wrong and many of them fragments. So every answer
is judged after it is found, the same way whatever found it (a reading, a scored span, the
model's own words):

* **evidence**: whole sentences of the transcript (:func:`passages`), best first — the
  sentence of the span it was taken from, then the passages that share the most content words
  with the question over the whole transcript; an answer that is withheld keeps the same
  passages (the one its guess came from first), so the user sees where the recording comes
  closest (read from selected passages of a long transcript: of BM25's best passages over the
  whole transcript, the one the model finds the question likeliest after first).
  A Whisper segment may stop mid-sentence, and the sentence is what a reader checks: on the
  dev split the first passage then holds the answer (or the answer is right) for 172 of 195
  answerable questions, against 169 with the segment (``scripts/ask_evidence.py``:
  ``bench/results/ask-evidence-dev.json``);
* **likelihood**: a span the model chose among candidates stands only when the model itself
  finds it a likely answer: its log-likelihood as the answer under the question's prompt (the
  same number the candidates were scored with, no extra pass) must reach
  :data:`LIKELIHOOD_BELOW`. On the dev split this one number separated right from wrong
  better than the pair it replaces (the share of the question's words said around the
  passage and the score's margin over the next candidate); chosen on one half of the dev clips
  and scored on the other it held 95 % (``scripts/ask_calibrate.py``:
  bench/results/ask-calibration-dev-likelihood.json). On the test split, scored once on one
  machine, it gave 79.3 % against the pair's 78.4 % with fewer answers
  (bench/results/ask-test-likelihood.json, ask-test-before-epyc.json): one constant instead of
  two, but not the precision a bar needs; confident wrong fragments pass it. The
  model's own answer, which has no rival span, is withheld when its passage says less than
  :data:`GENERATED_BELOW` of the question's content words (:func:`support`);
* **kind**: the answer must be of the kind asked (the policy's :meth:`valid`: a who-question
  a person, how-many a number, a yes/no question "Yes" or "No" with the deciding passage);
  a yes/no question the rules did not read is decided here (the policy's ``yes_no``) or
  withheld.

A withheld answer is ``abstained``: its text is the policy's "does not say" and its
evidence the closest passages; the answer that was withheld is kept (``withheld``) for
``--json`` and the bench.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from as2d.runtime.ask.passages import (
    content_words,
    passage,
    rank_passages,
    rank_spans,
    sentence_runs,
    without_answer_type,
)
from as2d.runtime.ask.spans import Span

# How many passages an answer shows (its own first).
EVIDENCE = 3
# A span the model chose is withheld when its log-likelihood as the answer (nats, its end
# included) is below LIKELIHOOD_BELOW: the least strict bar whose dev precision, less its
# statistical error (a one-sided 95 % Wilson bound over the dev answers), still reaches 0.90
# (``scripts/ask_calibrate.py`` over a dev run that withholds none for it:
# bench/results/ask-calibration-dev-likelihood.json). The model's own answer is withheld when
# its support (the share of the question's content words said in its passage and its
# neighbours) is below GENERATED_BELOW.
LIKELIHOOD_BELOW = -5.75
GENERATED_BELOW = 0.5
# Readings that are held to the question's words by their own rules (a count of the quoted
# phrase, an item in order, a clause that says every word of a yes/no question) are not
# judged on support; everything else is.
READ_METHODS = frozenset({"counted", "read", "confirmed"})
# How many of BM25's best passages the model re-ranks (``passages``' ``rerank``). Chosen on
# the dev questions asked of one 10-minute recording (scripts/ask_rerank.py:
# bench/results/ask-rerank-dev.json): the first passage held the answer of 79 of the 87
# findable questions with 6 against 74 by BM25 alone (2-4: 75; 8: 78); test, scored once:
# 83/106 against 78/106 (bench/results/ask-long-test-rerank.json).
RERANK_TOP = 6

# The model's log-likelihood of the question after each of some passages' texts.
Rerank = Callable[[list[str]], list[float]]


def retrieve(spans: Sequence[Span], question: str, k: int = EVIDENCE) -> list[int]:
    """Indices of the ``k`` spans that share the most (BM25-weighted) content words with the
    question, best first, over the whole transcript; none that shares no word."""
    return [i for sc, i in rank_spans(spans, question) if sc > 0][:k]


def question_words(question: str) -> set[str]:
    """The question's content words that an answer's passage should say (not the noun that
    names the answer's kind: "In what *year* ..." is not said where the year is)."""
    return set(content_words(without_answer_type(question)))


def support(question: str, spans: Sequence[Span], where: Sequence[int]) -> float:
    """The share of the question's content words said in the spans ``where`` and their
    neighbours (a Whisper segment may cut a sentence); 1.0 for a question with none."""
    asked = question_words(question)
    if not asked:
        return 1.0
    near = {j for i in where for j in (i - 1, i, i + 1) if 0 <= j < len(spans)}
    said = set()
    for j in near:
        said.update(content_words(spans[j].text))
    return len(asked & said) / len(asked)


def likelihood(answer) -> float | None:
    """The model's log-likelihood of the chosen span as the answer (None: the answer is no
    scored span)."""
    mine = [c.likelihood for c in answer.candidates
            if c.text == answer.text and c.likelihood == c.likelihood]
    if answer.method != "extracted" or not mine:
        return None
    return float(max(mine))


def indices(spans: Sequence[Span], chosen: Sequence[Span]) -> list[int]:
    """Where the spans ``chosen`` (an answer's evidence) stand in ``spans``."""
    at = {s: i for i, s in enumerate(spans)}
    return [at[s] for s in chosen if s in at]


def passages(spans: Sequence[Span], question: str, lead: Sequence[int], k: int = EVIDENCE,
             rerank: Rerank | None = None):
    """The evidence of an answer: whole sentences, not segments. The sentences of the spans
    ``lead`` (the answer's own) first, then the sentence-aligned passages that share the most
    with the question over the whole transcript
    (:func:`~as2d.runtime.ask.passages.rank_passages`), none overlapping another.
    On the dev questions asked of one 10-minute recording of their clips the first passage
    then holds the answer more often (``scripts/ask_retrieval.py``, ``scripts/ask_long.py``:
    bench/results/ask-retrieval-dev.json, ask-long-dev-after.json).

    With no span of its own to lead (an answer withheld from selected passages of a long
    transcript), the first passage is the one the model finds the question likeliest after
    (``rerank``, :mod:`~as2d.runtime.ask.rerank`) among the :data:`RERANK_TOP` that BM25
    found."""
    runs = sentence_runs(spans)
    order: list[tuple[int, int]] = []
    for i in lead:
        run = next(r for r in runs if r[0] <= i <= r[1])
        if run not in order:
            order.append(run)
    ranked = rank_passages(spans, question, runs)
    if rerank is not None and not order and len(ranked) > 1:
        top = ranked[:RERANK_TOP]
        likely = rerank([passage(spans, r).text for r in top])
        ranked = [top[j] for j in sorted(range(len(top)), key=lambda j: -likely[j])] \
            + ranked[RERANK_TOP:]
    for run in ranked:
        if len(order) >= k:
            break
        if not any(run[0] <= b and a <= run[1] for a, b in order):
            order.append(run)
    return [passage(spans, r) for r in order[:k]]


def _lead(own: list[int], order: list[int]) -> list[int]:
    """The spans whose sentences lead the evidence: every span the answer was taken from (a
    count cites each mention), else the passage that shares most with the question."""
    return own[:EVIDENCE] or order[:1]


def judge(answer, spans: Sequence[Span], question: str, policy,
          below: float = LIKELIHOOD_BELOW, rerank: Rerank | None = None):
    """``answer`` (an :class:`~as2d.runtime.ask.answer.Answer`) with its evidence ordered,
    its ``confidence`` (support) and ``likelihood`` set, and withheld (``abstained``) when it
    does not stand; see the module's docstring. A chosen span whose likelihood is below
    ``below`` is withheld (``-inf``: none for its likelihood). ``rerank``: see
    :func:`passages`."""
    top = retrieve(spans, question)
    own = indices(spans, answer.evidence)
    if policy.not_said is None:  # no rules: the model's answer stands as generated
        order = own + [i for i in top if i not in own]
        return replace(answer, evidence=[spans[i] for i in order[:EVIDENCE]])
    text, method, why = answer.text, answer.method, None
    if answer.abstained:
        why = "no answer of the kind asked"
    elif policy.is_yes_no(question) and method != "confirmed":
        decided = policy.yes_no(spans, question, top)
        if decided is None:
            why = "the recording does not decide the yes/no question"
        else:
            text, where = decided
            method, own = "confirmed", where
    elif method not in READ_METHODS | {"located", "attributed"} and \
            not policy.valid(text, question, spans):
        why = f"not an answer of the kind asked ({policy.kind(question)})"
    score = support(question, spans, own or top[:1])
    # (a yes/no question answered from its deciding clause is no longer the span)
    lik = likelihood(answer) if method == "extracted" else None
    if why is None and lik is not None and lik < below:
        why = f"a span the model gives a log-likelihood of {lik:.1f} as the answer"
    elif why is None and method == "generated" and score < GENERATED_BELOW:
        why = f"the model's own answer, from a passage that says {score:.0%} of the question"
    if why is not None:
        # Read whole, the passage the withheld answer came from first (where the recording
        # comes closest: on dev its first passage then holds the answer for 0.88 of the
        # answerable questions, against 0.84 with the question's best-matching passages
        # first). Read from selected passages of a long transcript, the guess saw only part
        # of the recording: the best of BM25's passages over the whole transcript, re-ranked by
        # the model (:func:`passages`), first.
        order = own + [i for i in top if i not in own]
        shown = passages(spans, question, [] if answer.selected else _lead(own, order),
                         rerank=rerank)
        return replace(answer, text=policy.not_said, method="not said", abstained=True,
                       evidence=shown or [spans[i] for i in order[:EVIDENCE]], confidence=score,
                       likelihood=lik, withheld=None if answer.abstained else answer.text,
                       reason=why)
    order = own + [i for i in top if i not in own]
    changed = text != answer.text
    shown = passages(spans, question, _lead(own, order)) if order else []
    return replace(answer, text=text, method=method, confidence=score, likelihood=lik,
                   evidence=shown,
                   withheld=answer.text if changed else None)
