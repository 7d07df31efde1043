"""The answer policy: what the answering pipeline asks of hand-written language rules.

The pipeline (:mod:`as2d.runtime.ask.answer`) is language-blind: it prompts, scores and
generates. Everything that reads a question's or a transcript's *words* — which kind of answer
a question asks for, which spans of the transcript could answer it, whether an answer is of
that kind and said, counts, yes/no readings, questions about the recording's clock — is a rule
written for one language, and sits behind :class:`AnswerPolicy`. The pipeline picks the policy
from the transcript's language once per answer
(:func:`~as2d.runtime.ask.policies.policy_for`):

* English (or a language not known: as today, the rules were written for English
  transcripts): :class:`~as2d.runtime.ask.english.rules.EnglishPolicy`, the rules of
  :mod:`as2d.runtime.ask.english`;
* any other language: :class:`NoPolicy`, no rule at all — the answer is the model's own,
  generated from the transcript (``method: "generated"``), and the answer's context note says
  the rules were off (:data:`RULES_OFF`), so ``as2d ask --json`` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from as2d.runtime.ask.spans import Span


@dataclass
class Candidate:
    """A span of the transcript proposed as the answer (by a policy), then scored by the
    model."""

    text: str  # as an answer: capitalised, with an end mark
    origin: str  # "after" (follows the question's words), "line", "name", "position"
    spans: tuple[int, ...]  # transcript spans it comes from
    score: float = float("nan")  # what candidates are ranked by (higher is better)
    tokens: int = 0
    likelihood: float = float("nan")  # log-likelihood as the answer, its end included
    prior: float | None = None  # the same under a neutral question (when calibrated)
    # For "what ... after X" ("before X"): how many parts of a clause (cut at "and", "but",
    # "then") lie between this one and the part that says X, on the side asked (0: the next
    # part), None when it is not on that side or the question asks nothing of the kind.
    follows: int | None = None

    def to_dict(self, spans: Sequence[Span] | None = None) -> dict:
        d = {"text": self.text, "origin": self.origin, "score": round(float(self.score), 3),
             "likelihood": round(float(self.likelihood), 3), "tokens": self.tokens}
        if self.prior is not None:
            d["prior"] = round(float(self.prior), 3)
        if spans is not None:
            d["spans"] = [spans[i].to_dict() for i in self.spans]
        return d


# A reading off the transcript without the model: (method, answer text, span indices);
# the method is the answer's ``method`` ("counted", "read", "confirmed").
Reading = tuple[str, str, list[int]]


class AnswerPolicy(Protocol):
    """What the pipeline asks of a language's answer rules."""

    name: str  # "english", "none"
    # Said in the answer's context note (``--json``: ``context.note``) when not None.
    note: str | None
    # The answer when nothing qualifies (None: the policy checks nothing; the model answers).
    not_said: str | None

    def asks_about_time(self, question: str) -> bool:
        """Whether the question asks about the recording's clock (answered by locating the
        span that says its words)."""

    def who_said(self, question: str) -> str | None:
        """The words whose speaker the question asks for ("Who said X?" → X), or None (the
        answer is then the speaker of the passage that says them, when speakers are known)."""

    def read(self, spans: Sequence[Span], question: str) -> Reading | None:
        """An answer read off the transcript without the model (a count, an item in order, a
        yes/no), or None."""

    def candidates(self, spans: Sequence[Span], question: str) -> list[Candidate]:
        """Spans of the transcript that could answer, for the model to score."""

    def fitting(self, scored: Sequence[Candidate], question: str,
                spans: Sequence[Span]) -> list[Candidate]:
        """The scored candidates that are of the kind asked, add to the question and are
        said."""

    def choose(self, scored: Sequence[Candidate], spans: Sequence[Span], question: str,
               context: Sequence[Span] | None = None) -> Candidate | None:
        """The candidate to answer with (of ``scored``, best first), or None."""

    def fallback(self, generated: str, question: str, spans: Sequence[Span],
                 found: Sequence[Candidate]) -> str | None:
        """The model's own answer, or the part of it that qualifies, where no candidate did;
        None: no answer (:attr:`not_said`)."""


    def is_yes_no(self, question: str) -> bool:
        """Whether the question asks yes or no."""

    def yes_no(self, spans: Sequence[Span], question: str,
               top: Sequence[int] = ()) -> tuple[str, list[int]] | None:
        """``(text, span indices)``: "Yes"/"No" with the passage that decides, or None."""

    def valid(self, answer: str, question: str, spans: Sequence[Span]) -> bool:
        """Whether a found answer is an answer of the kind asked (not a fragment)."""

    def kind(self, question: str) -> str:
        """The kind of answer the question asks for (said when an answer is withheld)."""


RULES_OFF = ("answer rules off: they are written for English and the transcript is in "
             "{language}; the answer is the model's own")


class NoPolicy:
    """No rules: for a transcript in a language the rules were not written for. Nothing is
    read off the transcript, no span is proposed, every answer stands as generated."""

    name = "none"
    not_said = None

    def __init__(self, language: str | None = None) -> None:
        self.language = language
        self.note = RULES_OFF.format(language=language or "another language")

    def asks_about_time(self, question: str) -> bool:
        return False

    def who_said(self, question: str) -> str | None:
        return None

    def read(self, spans: Sequence[Span], question: str) -> Reading | None:
        return None

    def candidates(self, spans: Sequence[Span], question: str) -> list[Candidate]:
        return []

    def fitting(self, scored: Sequence[Candidate], question: str,
                spans: Sequence[Span]) -> list[Candidate]:
        return list(scored)

    def choose(self, scored: Sequence[Candidate], spans: Sequence[Span], question: str,
               context: Sequence[Span] | None = None) -> Candidate | None:
        return scored[0] if scored else None

    def fallback(self, generated: str, question: str, spans: Sequence[Span],
                 found: Sequence[Candidate]) -> str | None:
        return generated

    def is_yes_no(self, question: str) -> bool:
        return False

    def yes_no(self, spans, question, top=()):
        return None

    def valid(self, answer: str, question: str, spans: Sequence[Span]) -> bool:
        return True

    def kind(self, question: str) -> str:
        return "other"
