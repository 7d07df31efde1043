"""Yes/no questions: "Did Ellie pass her driving test?" is answered "Yes" or "No" with the
words that say so, not with a span scored as if it were a *what*.

A question that opens with an auxiliary ("did", "is", "can", ...; after a lead-in clause ending
in a comma at most) and asks no wh-word, no alternative ("... or ...") and no negation is a
yes/no question. Its answer is read off the clause of the transcript that says every content
word of the question (a name aside, which the clause may say as "I" or "she"; and none only
intended: "wants *to buy*"): "No" when the part of that clause that says most of them negates
its verb an odd number of times ("The museum is *not* open on Mondays"; not "no problem",
"not only", nor the other side of a "but"), else "Yes", followed by the clause itself as
evidence. Where clauses disagree, two parts say it equally, the only match is a question said
in the recording, or no clause says it all, there is no reading and the ordinary answer runs
(scored spans, which may still say "The recording does not say.").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from as2d.runtime.ask.english.lexicon import BE_FORMS, DO_FORMS, HAVE_FORMS, alternation
from as2d.runtime.ask.passages import content_words
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
_INTENDED = re.compile(r"\bto\s+([A-Za-z']+)", re.I)
_AUX_STEMS = frozenset(content_words(" ".join(sorted(_YES_NO_AUX))))


def is_yes_no(question: str) -> bool:
    """Whether ``question`` asks yes or no (see the module's docstring)."""
    return bool(_YES_NO.match(question)) and not _WH.search(question) \
        and not _NEGATED_QUESTION.search(question)


def yes_no_answer(spans: Sequence[Span], question: str) -> tuple[str, list[int]] | None:
    """``("Yes. “...”" or "No. “...”", [span index])`` for a yes/no question the transcript
    answers in one clause; None otherwise."""
    if not is_yes_no(question):
        return None
    asked = set(content_words(question)) - _AUX_STEMS
    if len(asked) < 2:
        return None  # "Is it raining?": one word is no statement to confirm
    # every asked word must be said in the clause, but a name, which the clause may say as
    # "I" or "she" ("Did Ellie pass?" over "I passed")
    tokens = question.split()
    names = {w for t in tokens[1:] if t[:1].isupper() for w in content_words(t)}
    need = asked - names
    if not need:
        return None
    found: list[tuple[int, str, bool]] = []
    for i, s in enumerate(spans):
        for clause in _CLAUSE.findall(s.text):
            said = set(content_words(clause))
            if clause.rstrip().endswith("?") or not need <= said:
                continue  # a question said in the recording confirms nothing
            if any(set(content_words(w)) & need for w in _INTENDED.findall(clause)):
                return None  # "Tom wants to buy a car": not that he did
            # the polarity of the part that says most of the question (a tie: no reading)
            parts = sorted(((len(asked & set(content_words(p))), p)
                            for p in _PARTS.split(clause)), key=lambda x: -x[0])
            if len(parts) > 1 and parts[0][0] == parts[1][0]:
                return None
            negated = len(_VERB_NEGATION.findall(parts[0][1])) % 2 == 1
            found.append((i, clause.strip(), negated))
    if not found or len({neg for _, _, neg in found}) > 1:
        return None
    i, clause, negated = found[0]
    quote = clause.rstrip(",;:")
    quote = quote[:1].upper() + quote[1:]
    return f"{'No' if negated else 'Yes'}. \u201c{quote}\u201d", [i]
