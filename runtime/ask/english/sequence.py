"""Questions about the order of what is said, answered by reading the transcript's words.

A 270M model cannot count or index: asked for "the first digit" of "29340" it copies the whole
number, asked "which number is said twice in a row" it picks any line. These questions have
one answer that the transcript's words give directly, so they are read off, not scored:

* *the first / second / ... / last digit, number or word* said (a number said as one token,
  "29340", is its digits when digits are asked for);
* *which digit, number or word is said twice (in a row)*: the item repeated (next to itself);
* *how many X are named / does the speaker mention*: the distinct phrases that name X
  ("the epoch of belief, ... the epoch of incredulity": two), where no number says how many.

Each rule is about the question's shape and the transcript's words only; None means the rule
does not apply (the question is another kind, or the transcript lacks what it needs), and the
answer is found the usual way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from as2d.runtime.ask.english.kinds import said_by_someone_else
from as2d.runtime.ask.english.lexicon import ORDINALS
from as2d.runtime.ask.passages import NUMBER_WORDS, content_words, numbers_as_digits, stem
from as2d.runtime.ask.spans import Span

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_ORDINALS = {w: i for i, w in enumerate(ORDINALS[:5])} | {"last": -1, "final": -1}
# (one item: "the first word"; "the first words" are the opening clause, not read off here)
_ORDINAL_Q = re.compile(r"\b(first|second|third|fourth|fifth|last|final)\s+(digit|number|word)\b",
                        re.I)
_TWICE_Q = re.compile(r"\b(?:which|what)\s+(digit|number|word)\s+(?:is|was)\s+(?:said|repeated|"
                      r"spoken|read|called|heard)\s+(?:twice|two times)(\s+in a row)?\b", re.I)
# (naming and listing only: "how many children does he say he has" asks for a number he says)
_MENTIONS_Q = re.compile(r"\bhow many\s+([a-z]+)\s+(?:does|do|did|is|are|were|was)\s+"
                         r"(?:[a-z']+\s+){0,3}?(?:names?|named|mentions?|mentioned|lists?|listed)"
                         r"\b", re.I)
_SPELLED = {v: k for k, v in NUMBER_WORDS.items()}
# "the first digit *of the door code*": the digit of one number, not of the recording's words,
# so not read off the whole transcript (unless "of" names the recording itself).
_OF_THING = re.compile(r"^\s+(?:of|in)\s+(?!(?:the\s+|this\s+)?(?:recording|audio|clip|"
                       r"transcript|passage|text|reading|speech|talk)\b)", re.I)


def _words(spans: Sequence[Span]) -> list[tuple[str, int]]:
    """Every word of the transcript, lower case, number words merged into digits ("twenty
    two" → "22"), with its span's index."""
    out: list[tuple[str, int]] = []
    for i, s in enumerate(spans):
        out += [(w, i) for w in numbers_as_digits([t.split("'")[0] for t in
                                                   _WORD.findall(s.text.lower())])]
    return out


def _items(spans: Sequence[Span], unit: str) -> list[tuple[str, int]]:
    """The transcript as a sequence of ``unit`` ("digit", "number" or "word")."""
    words = _words(spans)
    if unit == "word":
        return words
    numbers = [(w, i) for w, i in words if w.isdigit()]
    if unit == "number":
        return numbers
    return [(d, i) for w, i in numbers for d in w]


def _say(item: str) -> str:
    text = _SPELLED.get(item, item) if item.isdigit() else item
    return text[0].upper() + text[1:] + "."


def sequence_answer(spans: Sequence[Span], question: str) -> tuple[str, list[int]] | None:
    """The answer read off the transcript's words and the spans that hold it, or None when the
    question is not about their order or the transcript lacks what it asks for."""
    m = _ORDINAL_Q.search(question)
    if m and not _OF_THING.match(question[m.end():]) \
            and not (m.group(2).lower() == "word"
                     and said_by_someone_else(question, m.start(), m.end())):
        items = _items(spans, m.group(2).lower())
        k = _ORDINALS[m.group(1).lower()]
        if not items or k >= len(items):
            return None
        item, span = items[k]
        return _say(item), [span]
    m = _TWICE_Q.search(question)
    if m:
        items = _items(spans, m.group(1).lower())
        if m.group(2):  # in a row: next to itself
            for (a, i), (b, j) in zip(items, items[1:]):
                if a == b:
                    return _say(a), sorted({i, j})
            return None
        seen = [w for w, _ in items]
        twice = [w for w in dict.fromkeys(seen) if seen.count(w) == 2]
        if len(twice) != 1:
            return None  # none, or several: not one answer
        return _say(twice[0]), sorted({i for w, i in items if w == twice[0]})
    m = _MENTIONS_Q.search(question)
    if m and m.group(1).lower() not in ("times", "time"):
        return _mentions(spans, stem(m.group(1).lower()))
    return None


def _mentions(spans: Sequence[Span], noun: str) -> tuple[str, list[int]] | None:
    """How many distinct phrases name ``noun`` (a stem): "the tower *of London*", "the epoch
    *of belief*" (the noun and "of" with the content words after it, up to two). None where
    the transcript never says it, a number before it says how many ("two epochs": that
    number answers), or it is once said without "of" ("the tower was tall, the tower was
    old" may be one tower said twice: its words do not tell how many)."""
    words = _words(spans)
    phrases, where = set(), set()
    for k, (w, i) in enumerate(words):
        if stem(w) != noun:
            continue
        if k > 0 and words[k - 1][0].isdigit():
            return None
        if k + 1 >= len(words) or words[k + 1][0] != "of":
            return None
        phrases.add(tuple(content_words(" ".join(v for v, _ in words[k + 1:k + 4]))[:2]))
        where.add(i)
    if not phrases:
        return None
    return _say(str(len(phrases))), sorted(where)
