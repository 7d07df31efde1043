"""Yes/no questions: "Did Ellie pass her driving test?" is answered "Yes" or "No" with the
words that say so, not with a span scored as if it were a *what*.

A question that opens with an auxiliary ("did", "is", "can", ...; after a lead-in clause ending
in a comma at most) and asks no wh-word and no alternative ("... or ...") is a yes/no question.
Its answer is read off the clause of the transcript that says most of the question's content
words (all of them or all but one; the question must have two): "No" when that clause is
negated ("but I *didn't* enjoy it"), else "Yes", followed by the clause itself as evidence.
Where two clauses say it equally well with opposite polarity, or none says enough of it, there
is no reading and the ordinary answer runs (scored spans, which may still say "The recording
does not say.").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from as2d.runtime.ask.passages import content_words
from as2d.runtime.ask.spans import Span

_AUX = (r"(?:did|does|do|is|was|are|were|has|have|had|can|could|will|would|should|may|might|"
        r"must)")
# An auxiliary first (after a lead-in clause: "According to the speaker, does ...?"), not
# negated ("Didn't she ...?" asks the other way round: left to the ordinary answer).
_YES_NO = re.compile(r"^\W*(?:[^,?]{0,60},\s*)?" + _AUX + r"\b(?!n['\u2019]t)\s+(?!not\b)",
                     re.I)
_WH = re.compile(r"\b(?:who|whom|whose|what|which|when|where|why|how)\b|\bor\b", re.I)
_CLAUSE = re.compile(r"[^,;:.?!]+[,;:.?!]*")
_AUX_STEMS = frozenset(content_words("did does do is was are were has have had can could will "
                                     "would should may might must"))
_NEGATION = "not"  # content_words writes every negation ("not", "never", "n't", "no") so


def is_yes_no(question: str) -> bool:
    """Whether ``question`` asks yes or no (see the module's docstring)."""
    return bool(_YES_NO.match(question)) and not _WH.search(question)


def yes_no_answer(spans: Sequence[Span], question: str) -> tuple[str, list[int]] | None:
    """``("Yes. “...”" or "No. “...”", [span index])`` for a yes/no question the transcript
    answers in one clause; None otherwise."""
    if not is_yes_no(question):
        return None
    asked = set(content_words(question)) - _AUX_STEMS - {_NEGATION}
    if len(asked) < 2:
        return None  # "Is it raining?": one word is no statement to confirm
    need = max(1, len(asked) - 1)
    best: list[tuple[int, str, bool]] = []
    top = 0
    for i, s in enumerate(spans):
        for clause in _CLAUSE.findall(s.text):
            words = set(content_words(clause))
            n = len(asked & words)
            if n < need or n < top:
                continue
            if n > top:
                top, best = n, []
            best.append((i, clause.strip(), _NEGATION in words))
    if not best or len({neg for _, _, neg in best}) > 1:
        return None
    i, clause, negated = best[0]
    quote = clause.rstrip(",;:")
    quote = quote[:1].upper() + quote[1:]
    return f"{'No' if negated else 'Yes'}. \u201c{quote}\u201d", [i]
