"""Yes/no questions: "Did Ellie pass her driving test?" is answered "Yes" or "No" with the
clause that decides it, not with a span scored as if it were a *what* ("Give.").

A question that opens with an auxiliary ("did", "is", "can", ...; after a lead-in clause ending
in a comma at most) and asks no wh-word, no alternative ("... or ...") and no negation is a
yes/no question. It is decided by the clause of the transcript (read across segment breaks)
that says the largest share of its content words, when that share is at least
:data:`DECIDE_AT` (a name counts as said where the clause says "I" or "she"; none of
them only intended: "wants *to buy*"): "No" when the part of that clause that says most of
them negates its verb an odd number of times ("The museum is *not* open on Mondays"; not "no
problem", "not only", nor the other side of a "but") or says a verb that denies ("the ferry
is *cancelled*"), else "Yes", followed by the clause itself as evidence. Where the best
clauses disagree, two parts say it equally, the only match is a question said in the
recording, or no clause says enough, it is not decided, and the answer is withheld
(:mod:`as2d.runtime.ask.judge`). On the dev split this one rule decides what a reading that
needed every word in one clause (its first form) and a scored span did, with fewer wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from as2d.runtime.ask.english.lexicon import BE_FORMS, DO_FORMS, HAVE_FORMS, alternation
from as2d.runtime.ask.passages import content_words, stem
from as2d.runtime.ask.spans import Span

# (not "might", "must", "may", "shall": "May I ...?" asks leave, not whether it is so)
_YES_NO_AUX = DO_FORMS | BE_FORMS | HAVE_FORMS | {"can", "could", "will", "would", "should"}
_AUX = alternation(_YES_NO_AUX)
# An auxiliary first (after a lead-in clause: "According to the speaker, does ...?"), not
# negated ("Didn't she ...?", "Did she say she would not come?": left to the ordinary answer).
_YES_NO = re.compile(r"^\W*(?:[^,?]{0,60},\s*)?" + _AUX + r"\b(?!n['\u2019]t)\s+", re.I)
_WH = re.compile(r"\b(?:who|whom|whose|what|which|when|where|why|how)\b|\bor\b", re.I)
_NEGATED_QUESTION = re.compile(r"\b(?:not|never|no)\b|n['\u2019]t\b", re.I)
_CLAUSE = re.compile(r"[^,;:.?!]+[,;:.?!]*")
# Where a clause's parts meet: a negation in one part does not deny the other ("Tom wants a
# car | but he has no money").
_PARTS = re.compile(r"\b(?:but|and|although|though|while|whereas|because|so|yet)\b", re.I)
# A negation of the verb ("not", "never", "n't"), not "no" before a noun ("no problem") nor
# "not only".
_VERB_NEGATION = re.compile(r"\b(?:not|never)\b(?!\s+only\b)|n['\u2019]t\b", re.I)
# "wants to buy", "is going to buy": a verb intended, not done.
_INTENDED = re.compile(r"\b(?:wants?|wanted|wanting|going|plans?|planned|hopes?|hoped|"
                       r"tr(?:y|ies|ied)|intends?|intended|would like|needs?|needed)"
                       r"\s+to\s+([A-Za-z']+)", re.I)
_AUX_STEMS = frozenset(content_words(" ".join(sorted(_YES_NO_AUX))))
_RAW = re.compile(r"[a-z]+")


def _pairs(text: str) -> list[tuple[str, str]]:
    """Adjacent content words of ``text`` (lower case), for compounds written apart or
    together; a stop word joins nothing ("to day" is not "today", nor "a jar" "ajar")."""
    raw = _RAW.findall(text.lower())
    return [(a, b) for a, b in zip(raw, raw[1:]) if content_words(a) and content_words(b)]


def _said(clause: str, question: str) -> set[str]:
    """The content words ``clause`` says, a compound counted however it is written: "foot
    bridge" says the question's "footbridge", "honeybees" its "honey bees" (Whisper and
    question writers split and join compounds differently)."""
    said = set(content_words(clause))
    said |= {stem(a + b) for a, b in _pairs(clause)}
    for a, b in _pairs(question):
        if stem(a + b) in said:
            said.update(content_words(f"{a} {b}"))
    return said


def is_yes_no(question: str) -> bool:
    """Whether ``question`` asks yes or no (see the module's docstring)."""
    return bool(_YES_NO.match(question)) and not _WH.search(question) \
        and not _NEGATED_QUESTION.search(question)


# The least share of the question's content words the deciding clause must say.
DECIDE_AT = 0.8
# Verbs that deny what they are said of as "not" does ("the ferry is cancelled on Sunday":
# you cannot take it), by their stems.
_DENYING = frozenset(content_words("cancelled canceled postponed refused failed unable "
                                   "forbidden banned prohibited"))
_PRONOUN = re.compile(r"\b(?:i|he|she|they|we)\b", re.I)


def _clauses(spans: Sequence[Span]) -> list[tuple[str, int]]:
    """The transcript's clauses over span boundaries (a Whisper segment may cut one), each
    with the span it starts in."""
    text, owner = "", []
    for i, s in enumerate(spans):
        piece = s.text.strip() + " "
        text += piece
        owner += [i] * len(piece)
    return [(m.group().strip(), owner[m.start() + len(m.group()) - len(m.group().lstrip())])
            for m in _CLAUSE.finditer(text) if m.group().strip()]


def _negated(clause: str, asked: set[str], question: str) -> bool | None:
    """Whether the part of ``clause`` that says most of ``asked`` (read as :func:`_said`
    reads it) is denied (None: two parts say it equally)."""
    parts = sorted(((len(asked & _said(p, question)), p) for p in _PARTS.split(clause)),
                   key=lambda x: -x[0])
    if len(parts) > 1 and parts[0][0] == parts[1][0]:
        return None
    part = parts[0][1]
    return (len(_VERB_NEGATION.findall(part)) + bool(_DENYING & set(content_words(part)))) \
        % 2 == 1


def yes_no_decision(spans: Sequence[Span], question: str) -> tuple[str, list[int]] | None:
    """``("Yes. “...”" | "No. “...”", [span index])`` for a yes/no question the transcript
    decides (see the module's docstring); None otherwise."""
    if not is_yes_no(question):
        return None
    asked = set(content_words(question)) - _AUX_STEMS
    if len(asked) < 2:
        return None  # "Is it raining?": one word is no statement to confirm
    names = {w for t in question.split()[1:] if t[:1].isupper() for w in content_words(t)}
    best: list[tuple[float, int, str]] = []
    for clause, i in _clauses(spans):
        if clause.endswith("?"):
            continue  # a question said in the recording confirms nothing
        said = _said(clause, question)
        if _PRONOUN.search(clause):
            said |= names
        best.append((len(asked & said) / len(asked), i, clause))
    top = max((b[0] for b in best), default=0.0)
    if top < DECIDE_AT:
        return None
    tied = [b for b in best if b[0] == top]
    verdicts = set()
    for _, _, clause in tied:
        if any(set(content_words(w)) & asked for w in _INTENDED.findall(clause)):
            return None  # "Tom wants to buy a car": not that he did
        verdicts.add(_negated(clause, asked, question))
    if len(verdicts) > 1 or None in verdicts:
        return None
    _, i, clause = tied[0]
    quote = clause.rstrip(",;:")
    quote = quote[:1].upper() + quote[1:]
    return f"{'No' if verdicts.pop() else 'Yes'}. \u201c{quote}\u201d", [i]
