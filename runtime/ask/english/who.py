"""Questions that ask *who said* something ("Who said 'it was the best of times'?", "Which
speaker asked about the rent?"): answered with the speaker of the passage that says the
words, when the recording was diarized (:mod:`as2d.runtime.ask.attribution`).

Only the speaking verb right after the asking word makes one: "Who did the reader say was
ill-disposed?" asks about a person *mentioned* (the content), and "Who is Mr. Dashwood?"
about a person, not a voice.
"""

from __future__ import annotations

import re

from as2d.runtime.ask.english.lexicon import ORDINALS, STOP_WORDS

# Words that order or rank the speakers ("Who spoke first?", "Who talked the most?"): they ask
# about the turns, not about words that were said, so such a question is not a who-said one.
_ORDER = frozenset(ORDINALS) | frozenset("""last next most least more less longest shortest
loudest quietest earliest latest earlier later often again before after""".split())

_VERBS = (r"sa(?:y|ys|id|ying)|spo?ke|speaks?|speaking|ask(?:s|ed|ing)?|mention(?:s|ed|ing)?|"
          r"tell(?:s|ing)?|told|reads?|reading|talk(?:s|ed|ing)?|stat(?:es|ed|ing)|"
          r"utter(?:s|ed|ing)?|remark(?:s|ed|ing)?|repl(?:y|ies|ied|ying)|"
          r"answer(?:s|ed|ing)?|exclaim(?:s|ed|ing)?|describ(?:es|ed|ing)|quot(?:es|ed|ing)|"
          r"announc(?:es|ed|ing)|promis(?:es|ed|ing)|complain(?:s|ed|ing)?")
_WHO_SAID = re.compile(
    r"^\W*(?:who|whose\s+voice|(?:which|what)\s+(?:speaker|person|voice|reader|narrator|"
    r"one|of\s+(?:them|the\s+(?:speakers|two|people|readers))))\s+"
    r"(?:(?:also|first|then|else|actually|really|just|later|finally)\s+)?"
    r"(?:(?:is|was|were|are)\s+(?:the\s+one\s+)?(?:(?:who|that)\s+)?)?(?:" + _VERBS + r")\b"
    r"(?:\s+(?:that|the\s+words?|the\s+line|the\s+sentence|this|these\s+words|out\s+loud|"
    r"aloud)\b)*", re.I)


def who_said(question: str) -> str | None:
    """The words whose speaker ``question`` asks for ("Who said 'the best of times'?" →
    "'the best of times'?"), or None when it asks nothing of the kind."""
    m = _WHO_SAID.match(" ".join(question.split()))
    if m is None:
        return None
    said = " ".join(question.split())[m.end():].strip()
    words = re.findall(r"[a-z0-9]+(?:'[a-z]+)?", said.lower())
    if not [w for w in words if w not in STOP_WORDS and w not in _ORDER]:
        return None  # nothing said is named ("Who spoke first?"): the model answers
    return said
