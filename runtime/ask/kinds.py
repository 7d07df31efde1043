"""What kind of answer a question asks for, and whether an answer is of that kind and said.

A question's first words say what would answer it: *who* wants a person (a name, or a word for
a person), *how many / how much* a count, *how long / how old* a duration or an amount, *when*
a time, *where* a place; and any answer must add something to the question (an answer that
only restates the question's words says nothing). These checks are about classes of answers,
not about any question: they read the answer's words and the transcript's capitalisation only.

An answer is *grounded* when every content word it has (stop words aside) was said in the
transcript, allowing inflections (``-s``, ``-ed``, ``-ing``) and number words for digits.
An answer that is neither of the kind asked nor grounded is not given; when nothing
qualifies the answer is :data:`NOT_SAID`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from as2d.runtime.ask.passages import NUMBER_WORDS, content_words
from as2d.runtime.ask.spans import Span

NOT_SAID = "The recording does not say."

_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")

# The kind of answer a question asks for, by its leading words (after a short lead-in such as
# "And" or "So", or a clause ending in a comma: "Mary planted the roses, and what did ...").
_KINDS = (
    ("count", re.compile(r"\bhow (?:many|much)\b", re.I)),
    ("duration", re.compile(r"\bhow (?:long|old|far)\b", re.I)),
    ("time", re.compile(r"\b(?:when|what time|what year|what day|which year|which day)\b", re.I)),
    ("who", re.compile(r"\b(?:who|whom|whose)\b", re.I)),
    ("place", re.compile(r"\b(?:where|which (?:city|town|country|place))\b", re.I)),
    ("what", re.compile(r"\b(?:what|which)\b", re.I)),
)

_PERSON = frozenset("""
man men woman women boy boys girl girls child children baby lady ladies gentleman gentlemen
sir madam mister miss mrs mr ms dr doctor father mother brother sister son daughter husband
wife uncle aunt cousin nephew niece grandfather grandmother parent parents family friend
friends king queen prince princess lord duke captain officer soldier teacher student master
servant people person speaker narrator author writer everyone nobody somebody someone one
colonel general priest judge nurse neighbour neighbor stranger guest host owner driver
""".split())

_TIME = frozenset("""
morning evening night noon midnight afternoon dawn dusk today tonight yesterday tomorrow
then now later soon before after ago during while since until till once early late
year years month months week weeks day days hour hours minute minutes second seconds
century centuries decade season spring summer autumn fall winter christmas easter
monday tuesday wednesday thursday friday saturday sunday january february march april may
june july august september october november december o'clock am pm time age ages moment
always never sometimes first last next past recently eventually already instantly when
whenever
""".split())

_DURATION = frozenset("""
year years month months week weeks day days hour hours minute minutes second seconds
century centuries decade decades moment while long forever ages night nights time lifetime
mile miles meter meters metre metres kilometer kilometers kilometre kilometres foot feet
inch inches yard yards old age short half quarter
""".split())

_PLACE_WORDS = frozenset("""
in at on to from near by into onto under over across behind inside outside beside beyond
through here there home abroad away upstairs downstairs where somewhere anywhere everywhere
nowhere forward forwards backward backwards back left right up down ahead along around
house room street road city town village country church school garden park market station
shop store office sea river lake mountain hill field forest wood island beach coast harbour
harbor port world land kingdom north south east west hall kitchen bed door table window
""".split())

_COUNT_WORDS = frozenset("""
no none zero once twice several few many dozen dozens hundred hundreds thousand thousands
million millions pair couple both all half some
""".split())


# Words about the recording and the exchange itself ("The speaker says ...", "The answer is
# ..."): an instruction model frames its answer with them; they are not claims about what was
# said, so grounding and the restatement check look past them.
_META = frozenset("""
answer answers question questions recording recordings transcript transcripts segment
segments speaker speakers reader narrator say says said saying speak speaks speaking spoke
mention mentions mentioned mentioning talk talks talked talking tell tells told ask asks asked
""".split())

# Lead-ins that frame an answer: "The answer (to this question) is:", "Answer:", "Sure!".
_FRAME = re.compile(r"^\s*(?:(?:sure|okay|ok|yes)[,.!]\s*)?(?:(?:the\s+)?answer(?:\s+to\s+"
                    r"(?:the|this|your)\s+question)?\s*(?:is|would be)?\s*[:\-]?\s*)", re.I)


def unframed(answer: str) -> str:
    """The answer without a lead-in that only frames it ("The answer to this question is: 3
    dollars." → "3 dollars."), quotes around the whole answer dropped."""
    text = _FRAME.sub("", answer, count=1).strip()
    if len(text) > 2 and text[0] in "\"'“" and text.rstrip(".")[-1:] in "\"'”":
        text = text[1:].rstrip(".")[:-1].strip()
    return text or answer.strip()


def _claims(text: str) -> list[str]:
    """The content words of ``text`` that say something about the content (not the framing
    words of :data:`_META`, compared after the same light stemming)."""
    meta = set(content_words(" ".join(_META)))
    return [w for w in content_words(text) if w not in meta]


def question_kind(question: str) -> str:
    """``who``, ``count``, ``duration``, ``time``, ``place``, ``what`` or ``other`` (why,
    how, yes/no): the kind of the question's first wh-phrase ("Who had leisure to consider how
    much ...?" asks who), the more specific phrase where two start together ("What time ..."
    is a time, not a "what")."""
    found = []
    for order, (kind, pattern) in enumerate(_KINDS):
        m = pattern.search(question)
        if m:
            found.append((m.start(), order, kind))
    return min(found)[2] if found else "other"


def _lower_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _is_number(word: str) -> bool:
    return word.isdigit() or word in NUMBER_WORDS or bool(re.fullmatch(r"\d+(?:st|nd|rd|th)",
                                                                          word))


def names_in(spans: Iterable[Span]) -> set[str]:
    """Lower-cased words the transcript capitalises inside a sentence (names: "Dashwood",
    "Norland"); a sentence's or a segment's first word and "I" are not evidence."""
    out: set[str] = set()
    for s in spans:
        tokens = s.text.split()
        for i, t in enumerate(tokens):
            w = "".join(_WORD.findall(t))
            if not w or not w[0].isupper() or w == "I" or i == 0:
                continue
            if tokens[i - 1].rstrip("\"'”’)").endswith((".", "?", "!")) and \
                    not re.search(r"(?:Mr|Mrs|Ms|Dr|St)\.$", tokens[i - 1]):
                continue
            out.add(w.lower())
    return out


def fits(kind: str, answer: str, names: set[str]) -> bool:
    """Whether ``answer`` is of the kind a question of ``kind`` asks for."""
    words = _lower_words(answer)
    if not words:
        return False
    has_number = any(_is_number(w) for w in words)
    if kind == "who":
        if all(_is_number(w) for w in words):
            return False
        return any(w in names or w in _PERSON for w in words)
    if kind == "count":
        return has_number or any(w in _COUNT_WORDS for w in words)
    if kind == "duration":
        return has_number or any(w in _DURATION for w in words)
    if kind == "time":
        return has_number or any(w in _TIME for w in words)
    if kind == "place":
        return any(w in _PLACE_WORDS or w in names for w in words)
    return True


def adds_to(answer: str, question: str) -> bool:
    """Whether the answer says something the question does not: a content word or a number of
    its own, or, with no content word at all, a short reply ("No.", "Then.")."""
    mine = _claims(answer)
    if not mine:
        return not content_words(answer)  # small words only ("No."); framing alone is none
    return bool(set(mine) - set(content_words(question)))


def said(answer: str, spans: Sequence[Span]) -> bool:
    """Every content word of ``answer`` occurs in the transcript (inflections and number words
    for digits allowed, as :func:`as2d.runtime.ask.passages.content_words` normalises them)."""
    have: set[str] = set()
    for s in spans:
        have.update(content_words(s.text))
    return all(w in have for w in _claims(answer))


def qualifies(answer: str, question: str, spans: Sequence[Span], names: set[str] | None = None,
              kind: str | None = None) -> bool:
    """Of the kind asked, adding to the question, and said in the transcript."""
    if names is None:
        names = names_in(spans)
    kind = kind or question_kind(question)
    return fits(kind, answer, names) and adds_to(answer, question) and said(answer, spans)


# Sentence ends (not a title's full stop: "Mr. John Dashwood") and line breaks.
_SENTENCE = re.compile(r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)"
                       r"(?<=[.!?])\s+|\n+")


def first_qualifying(answer: str, question: str, spans: Sequence[Span],
                     names: set[str] | None = None, kind: str | None = None) -> str | None:
    """The generated answer, or failing that its first sentence (or line), unframed, that
    qualifies: an instruction model often answers in its first sentence and then goes on in
    words the recording never said. None when no part qualifies."""
    if names is None:
        names = names_in(spans)
    whole = unframed(answer)
    parts = [whole] + [unframed(p) for p in _SENTENCE.split(answer) if p.strip()]
    for part in parts:
        if part and qualifies(part, question, spans, names, kind):
            return part
    return None
