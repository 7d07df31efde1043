"""Candidate answers taken from the transcript, scored by the answering model.

A 270M base model copies well but chooses badly: of several similar lines it often copies the
wrong one ("the season of *light*" for "the season of what, besides light?"). Here the choice
is made over a short list of spans of the transcript instead:

* the words that *follow* the question's longest runs of words in the transcript (its quoted
  phrase first): every prefix and suffix of the rest of that clause, the next clause and the
  next sentence ("It was the winter of ___", "What does he say after 'Go forward'?");
* the words *between* two runs of the question's words, where its wh-word sits in the
  transcript's sentence ("When did X have leisure …?" over "X had *then* leisure …");
* the words *before* the question's words where its wh-word stands before them (the subject:
  "Who waited on the pier?" over "The old fisherman waited on the pier");
* the clauses and sentences of the spans that share the most words with the question (BM25);
* for a question about the first or last words, the first and last clause and sentence;
* the object of a preposition the question ends on ("What did they talk *about*?") and the item
  listed with X for "Besides X, what else ...?", the words in the wh-slot of "From whom do we
  ...?", the object of the verb "What should you (not) ask?" ends on (negated as asked), the
  item right after X in a list, the first or last clause for the first or last words: these
  are *pinned* (:func:`pinned`), the answer is one of them, not a phrase next to them; for
  "what ... after (before) X", the answer is in the nearest part of a clause after (before) X's,
  or, where the transcript says X with the question's own connective, in the clause that
  connective attaches X to ("Lock the door | before you leave", "Before you leave, | lock the
  door"); nothing said on that side means the recording does not say
  (:func:`said_nothing_beyond`).

Every candidate ends where a phrase can end (:func:`_closed`): at the speaker's clause mark, or
not after a determiner, preposition or auxiliary and not between a word and the word that
continues it ("The blue | boat", "Still | more respectable"), so no answer is cut before its
object.

Each candidate is written as the prompt's examples write answers (``" Despair."``) and scored by
the model's log-likelihood of it as the answer, line break included, under the same prompt (all
of them as one tree, in one pass after the prompt's cache: :mod:`as2d.runtime.ask.tree`). A
candidate that only repeats the question's content words is no answer and is dropped, unless
its small words stand alone (a whole clause or sentence: "No.", "Not now.") or fill a gap
between the question's words ("Then.").

"How many times ..." about a phrase that occurs in the transcript is counted, not generated
(:func:`count_answer`): the model cannot count.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from as2d.runtime.ask.english.kinds import (
    BESIDES,
    DESCRIBED_SIZES,
    is_person,
    order,
    question_kind,
    said_by_someone_else,
)
from as2d.runtime.ask.english.lexicon import (
    ARTICLES,
    AUXILIARIES,
    CLAUSE_ENDS,
    DEFINITE,
    DEMONSTRATIVES,
    DETERMINERS,
    DO_FORMS,
    MODALS,
    POSSESSIVES,
    PREPOSITIONS,
    SENTENCE_ENDS,
    SUBJECT_PRONOUNS,
    TITLE_END,
    alternation,
)
from as2d.runtime.ask.english.lexicon import STOP_WORDS as _STOPWORDS
from as2d.runtime.ask.passages import (
    NUMBER_WORDS,
    content_words,
    quoted,
    rank_spans,
    stem,
    without_answer_type,
)
from as2d.runtime.ask.policy import Candidate
from as2d.runtime.ask.spans import Span

_NUM = NUMBER_WORDS
_TOKEN = re.compile(r"\S+")
_NORM = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CLAUSE_END = re.compile(f"[{re.escape(CLAUSE_ENDS)}]$")
_SENTENCE_END = re.compile(f"[{re.escape(SENTENCE_ENDS)}]$")


def _norm(word: str) -> str:
    """A transcript or question word for matching: lower case, no punctuation, numbers as
    digits, lightly stemmed (so "failing" meets "failed" and "eight" meets "8")."""
    w = "".join(_NORM.findall(word.lower())).split("'")[0]
    w = _NUM.get(w, w)
    return stem(w) if w else w


@dataclass(frozen=True)
class TranscriptWord:
    text: str  # as the transcript writes it, punctuation included
    norm: str
    span: int  # index of its span


def words_of(spans: Sequence[Span]) -> list[TranscriptWord]:
    out = []
    for i, s in enumerate(spans):
        for t in _TOKEN.findall(s.text):
            n = _norm(t)
            if n:
                out.append(TranscriptWord(t, n, i))
    return out


def as_answer(words: Sequence[TranscriptWord]) -> str:
    text = " ".join(w.text for w in words).strip().rstrip(",;:")
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".?!" else text + "."


def _runs(words: Sequence[TranscriptWord], end: re.Pattern) -> list[tuple[int, int]]:
    """``[a, b)`` word ranges ended by punctuation matching ``end`` (a title's full stop,
    "Mr.", ends nothing)."""
    out, a = [], 0
    for i, w in enumerate(words):
        if end.search(w.text) and not _TITLE.match(w.text):
            out.append((a, i + 1))
            a = i + 1
    if a < len(words):
        out.append((a, len(words)))
    return out


def _question_runs(words: Sequence[TranscriptWord], q: Sequence[str]) -> list[tuple[int, int, int]]:
    """``(transcript start, question start, length)`` of every run of question words in the
    transcript, extended as far as both go (a run may sit inside a longer one that starts a
    word earlier in both)."""
    positions: dict[str, list[int]] = {}
    for j, w in enumerate(q):
        positions.setdefault(w, []).append(j)
    n, out = len(words), []
    for i in range(n):
        for j in positions.get(words[i].norm, ()):
            m = 1
            while i + m < n and j + m < len(q) and words[i + m].norm == q[j + m]:
                m += 1
            out.append((i, j, m))
    return out


def _gaps(words: Sequence[TranscriptWord], q: Sequence[str], content: set[str],
          sentences: list[tuple[int, int]], max_gap: int = 3, max_skip: int = 2,
          keep: int = 2) -> list[tuple[int, int]]:
    """``[a, b)`` word ranges of the transcript (1 to ``max_gap`` words) between two runs of
    question words that follow each other in the question (at most ``max_skip`` question words
    apart) within one sentence; a run is two words or more, or one content word. The ``keep``
    gaps between the longest runs."""
    n = len(words)
    sentence = [0] * n
    for k, (a, b) in enumerate(sentences):
        for i in range(a, b):
            sentence[i] = k
    starts: dict[int, list[tuple[int, int]]] = {}  # transcript start → (question start, length)
    for i, j, m in _question_runs(words, q):
        if i > 0 and j > 0 and words[i - 1].norm == q[j - 1]:
            continue  # inside a longer run
        if m >= 2 or words[i].norm in content:
            starts.setdefault(i, []).append((j, m))
    found: dict[tuple[int, int], int] = {}
    for i1, runs in starts.items():
        for j1, m1 in runs:
            a = i1 + m1
            for i2 in range(a + 1, min(a + max_gap, n - 1) + 1):
                if sentence[i2] != sentence[a - 1]:
                    break
                for j2, m2 in starts.get(i2, ()):
                    if 0 <= j2 - (j1 + m1) <= max_skip:
                        found[(a, i2)] = max(found.get((a, i2), 0), m1 + m2)
    best = sorted(found, key=lambda g: (-found[g], g))[:keep]
    return sorted(best)


def _containing(runs: list[tuple[int, int]], i: int) -> int:
    for k, (a, b) in enumerate(runs):
        if a <= i < b:
            return k
    return len(runs)


def _matches(words: Sequence[TranscriptWord], q: Sequence[str],
             content: set[str]) -> list[tuple[int, int]]:
    """``(length, end)`` of every maximal run of question words found in the transcript that
    ends at ``end`` (exclusive): at least two words, or one content word."""
    best: dict[int, int] = {}  # transcript start → its longest run
    for i, _j, m in _question_runs(words, q):
        best[i] = max(best.get(i, 0), m)
    out = [(m, i + m) for i, m in sorted(best.items())
           if m >= 2 or words[i].norm in content]
    # Keep a run only where it is not inside a longer one starting earlier.
    keep = []
    for m, e in out:
        if not any(m2 > m and e2 == e for m2, e2 in out):
            keep.append((m, e))
    return keep


@dataclass
class _Reading:
    """The transcript and the question as every candidate source reads them."""

    spans: Sequence[Span]
    question: str
    words: list[TranscriptWord]
    clauses: list[tuple[int, int]]  # [a, b) word ranges ended by any clause mark
    sentences: list[tuple[int, int]]
    qwords: list[str]  # the question's words, normalised, in order
    qnorms: set[str]  # the same, as a set
    qcontent: set[str]  # its content words
    ranked: list[int]  # the spans that share words with the question, most related first
    max_after: int  # runs of the question's words whose sequel is taken
    max_words: int  # words of a candidate taken from a longer phrase
    event: _EventPlace | None = None  # "what ... after (before) X": where X is said


@dataclass(frozen=True)
class _Found:
    """Words ``[a, b)`` of the transcript proposed as an answer by a source (``origin``)."""

    a: int
    b: int
    origin: str
    exact: bool = False  # the transcript's own words end it (not cut back to a phrase's end)
    pin: bool = False  # found by another source already or not, it is known by this origin


class _Collected:
    """The candidates found so far, unique by text, in the order found (the first source to
    find a text names it, unless a later one pins it)."""

    # Origins whose words end where the source says, not only at the transcript's clause marks.
    BOUNDED = ("gap", "before", "name", "kind", "slot")
    # Origins whose small words alone may be the answer inside a clause ("had *then* leisure").
    SMALL_WORDS_ANSWER = ("gap", "slot", "next")

    def __init__(self, r: _Reading) -> None:
        self.r = r
        self.whole = set(r.clauses) | set(r.sentences)
        self.out: dict[str, Candidate] = {}
        self.starts: dict[str, tuple[int, int]] = {}  # a candidate's words where first found

    def take(self, f: _Found) -> None:
        """Keep ``f`` unless its text is known already; a pinning source renames a text found
        before it (the answer is one of the pinned)."""
        if not f.pin:
            self._add(f.a, f.b, f.origin, f.exact)
            return
        text = as_answer(self.r.words[f.a:f.b])
        before = text.lower() in self.out
        self._add(f.a, f.b, f.origin, f.exact)
        if before:
            self.out[text.lower()].origin = f.origin

    def _add(self, a: int, b: int, origin: str, exact: bool) -> None:
        words = self.r.words
        # Cut back to where a phrase can end: never before its object ("He painted the");
        # ``exact``: the transcript's own words end it (an item in a clause said alike).
        bounded = exact or (a, b) in self.whole or origin in self.BOUNDED
        while b > a and not _closed(words, b, bounded):
            b -= 1
        if a >= b:
            return
        text = as_answer(words[a:b])
        key = text.lower()
        if not text or key in self.out:
            return
        new = set(content_words(text)) - self.r.qcontent
        if not new and not any(w.norm in _NUM.values() or w.norm.isdigit()
                               for w in words[a:b]):
            # Nothing but small words the question may lack: an answer only where they stand
            # alone (a whole clause or sentence: "No.", "Not now.") or stand between the
            # question's own words ("had *then* leisure"); never the question's words alone.
            if all(w.norm in self.r.qnorms for w in words[a:b]):
                return
            if (a, b) not in self.whole and origin not in self.SMALL_WORDS_ANSWER:
                return
        self.out[key] = Candidate(text, origin, tuple(sorted({w.span for w in words[a:b]})))
        self.starts[key] = a, b


def candidates(spans: Sequence[Span], question: str, max_after: int = 3, top_lines: int = 2,
               max_words: int = 6, limit: int = 24) -> list[Candidate]:
    """Candidate answers to ``question`` from the transcript (unique texts, in the order
    found), before scoring: what every source in :data:`_SOURCES` proposes, then, for "what
    ... after (before) X", how far each lies from X (:func:`_measure_follows`)."""
    words = words_of(spans)
    if not words:
        return []
    # the question's words to find in the transcript (not the noun that names the answer's
    # kind: "In what *year* did she die?" is not about "nine years")
    topic = without_answer_type(question)
    qwords = [w for w in (_norm(t) for t in _TOKEN.findall(topic)) if w]
    r = _Reading(spans, question, words, _runs(words, _CLAUSE_END),
                 _runs(words, _SENTENCE_END), qwords, set(qwords), set(content_words(topic)),
                 [i for sc, i in rank_spans(spans, question) if sc > 0][:top_lines],
                 max_after, max_words)
    r.event = _place_event(words, r.clauses, question)
    found = _Collected(r)
    for source in _SOURCES:
        for f in source(r):
            found.take(f)
    _measure_follows(r, found)
    found_all = list(found.out.values())
    if question_kind(question) == "who":  # a person's name or the subject first, whatever the limit
        found_all.sort(key=lambda c: c.origin not in ("signed", "name", "before"))
    # what the question's shape points at is kept whatever the limit (a long list's item)
    found_all.sort(key=lambda c: c.origin not in _PINNED and c.follows != 0)
    return found_all[:limit]


# -- the sources, in the order they are asked --------------------------------------------------

def _after_question(r: _Reading) -> Iterator[_Found]:
    """What follows the question's longest runs of words (a quoted phrase said in full counts
    twice as long, and pins the place: what follows a part of the question elsewhere, the list
    two lines on, is not what follows the quote): every prefix and suffix of the rest of that
    clause, the next clause and the next sentence."""
    words, clauses, sentences, n = r.words, r.clauses, r.sentences, r.max_words
    found = _matches(words, r.qwords, r.qcontent)
    plain = list(found)
    for phrase in quoted(r.question):
        pw = [w for w in (_norm(t) for t in _TOKEN.findall(phrase)) if w]
        for m, e in _matches(words, pw, set(pw)):
            if m == len(pw):
                found.append((2 * m + 1, e))
    quoted_runs = [f for f in found if f not in plain]
    found = quoted_runs or found
    found.sort(key=lambda x: (-x[0], x[1]))
    for _m, e in found[:r.max_after]:
        if e >= len(words):
            continue
        k = _containing(clauses, e - 1)
        a, end = e, clauses[k][1] if k < len(clauses) else len(words)
        b = min(end, a + n)
        for j in range(a + 1, b + 1):  # prefixes of the rest of the clause
            yield _Found(a, j, "after")
        for j in range(max(a + 1, end - n), end):  # its suffixes, to its end
            yield _Found(j, end, "after")
        if k + 1 < len(clauses):
            na, nb = clauses[k + 1]
            yield _Found(na, min(nb, na + n), "after")
        s = _containing(sentences, e - 1)
        if s + 1 < len(sentences):
            na, nb = sentences[s + 1]
            yield _Found(na, min(nb, na + 2 * n), "after")


def _between_question(r: _Reading) -> Iterator[_Found]:
    """The words between two runs of the question's words, where its wh-word sits in the
    transcript's sentence ("When did Mr. John Dashwood have leisure ...?" over "Mr. John
    Dashwood had *then* leisure ...")."""
    for a, b in _gaps(r.words, r.qwords, r.qcontent, r.sentences):
        for i in range(a, b):
            for j in range(i + 1, b + 1):
                yield _Found(i, j, "gap")


def _before_question(r: _Reading) -> Iterator[_Found]:
    """The words *before* the question's words where its wh-word stands before them ("Who
    waited on the pier?" over "The old fisherman waited on the pier"; "When did the son row
    out?" over "At dawn his son rowed out"): the subject, or what leads in; only what the
    question lacks ("Mr. John Dashwood *had then*" holds the question's own "had")."""
    words, qnorms = r.words, r.qnorms
    for i in _leading(words, r.question, r.qcontent):
        c = r.clauses[_containing(r.clauses, i)][0]
        for j in range(max(c, i - r.max_words // 2 - 1), i):
            if not any(w.norm in qnorms and _bare(w.text) not in _DETERMINERS
                       for w in words[j:i]):
                yield _Found(j, i, "before")


def _related_lines(r: _Reading) -> Iterator[_Found]:
    """The clauses and sentences of the spans most related to the question. (When none shares
    a word with it, taking every span of a short transcript instead fixed a misheard name on
    the test split but lost a card on dev: 27 -> 26/31; not kept.)"""
    for i in r.ranked:
        for a, b in r.clauses + r.sentences:
            if any(w.span == i for w in r.words[a:b]):
                yield _Found(a, min(b, a + 2 * r.max_words), "line")


def _names_and_amounts(r: _Reading) -> Iterator[_Found]:
    """Names (runs of capitalised words) and amounts (a number and the word after it, and what
    it is of: "2 cans of tomatoes") in the most related spans: the short answers who / how
    much questions want. A "who" question
    takes the names of every span up to the last related one (the related one often says only
    "he"), not after it: a later name is someone else ("Who is Robert's wife?" is not answered
    by the sailor met afterwards)."""
    words, ranked = r.words, r.ranked
    named = (range(max(ranked) + 1 if ranked else len(r.spans))
             if question_kind(r.question) == "who" else ranked)
    for i in named:
        idx = [k for k, w in enumerate(words) if w.span == i]
        k = 0
        while k < len(idx):
            if words[idx[k]].norm.isdigit():
                end = min(idx[k] + 2, idx[-1] + 1)
                if end <= idx[-1] and _bare(words[end].text) == "of" \
                        and not _CLAUSE_END.search(words[end - 1].text):
                    # "2 cans | of tomatoes": the amount of what, to where its phrase ends
                    # ("three cups of strong black coffee | and")
                    for e in range(end + 2, min(end + 6, idx[-1] + 2)):
                        if e > idx[-1] or _CLAUSE_END.search(words[e - 1].text) \
                                or _bare(words[e].text) in _STOPWORDS:
                            yield _Found(idx[k], e, "name")
                            break
                else:
                    yield _Found(idx[k], end, "name")
                yield _Found(idx[k], idx[k] + 1, "name")
            j = k
            while j < len(idx) and words[idx[j]].text[:1].isupper():
                w = idx[j]
                after_stop = w > 0 and bool(_SENTENCE_END.search(words[w - 1].text)
                                            and not _TITLE.match(words[w - 1].text))
                if after_stop:
                    break  # a name ends with its sentence, and a sentence's first word is none
                if j == k and (w == 0 or words[w].span != words[w - 1].span) \
                        and not content_words(words[w].text):
                    break  # Whisper capitalises a segment's first word: "And", "But", "She"
                j += 1
            if j > k:
                yield _Found(idx[k], idx[j - 1] + 1, "name")
                k = j
            else:
                k += 1


def _people(r: _Reading) -> Iterator[_Found]:
    """For "who" (and "how is X related to Y", "what is her job"): each word for a person the
    transcript says, with the words that lead up to it in its phrase ("an ill-disposed *young
    man*", "my *sister*"): a person need not be named ("Who is being described?" → "A young
    man.")."""
    if question_kind(r.question) not in ("who", "relation", "job"):
        return
    words = r.words
    for k, w in enumerate(words):
        if not is_person(_bare(w.text)):
            continue
        c0 = r.clauses[_containing(r.clauses, k)][0]
        a = k
        while a > max(c0, k - 2) and not _CLAUSE_END.search(words[a - 1].text) \
                and _bare(words[a - 1].text) not in _DETERMINERS:
            a -= 1
        for i in range(a, k if a < k else k + 1):  # the head alone only where it stands alone
            yield _Found(i, k + 1, "person")


_SAY_ABOUT = re.compile(r"\b(?:say|says|said|tell|tells|told|mention|mentions|mentioned)\s+"
                        r"(?:(?:us|you|them|him|her)\s+)?about\s+(.+?)\W*$", re.I)


def _said_about(r: _Reading) -> Iterator[_Found]:
    """"What does Maria say about the orange juice?": the sentences that say most of Y's words
    ("We are out of orange juice today"), and their clauses; pinned."""
    m = _SAY_ABOUT.search(r.question)
    if not m:
        return
    y = set(content_words(m.group(1)))
    if not y:
        return
    shared = [len(y & {n for w in r.words[a:b] for n in content_words(w.text)})
              for a, b in r.sentences]
    best = max(shared, default=0)
    if best < min(len(y), max(1, (len(y) + 2) // 2)):  # both of two words, 2 of 3, 3 of 5
        return
    for (a, b), n in zip(r.sentences, shared):
        if n == best:
            yield _Found(a, b, "about", pin=True)
            for c0, c1 in r.clauses:  # the clauses that say Y themselves
                if a <= c0 and c1 <= b and (c0, c1) != (a, b) and y & {
                        n for w in r.words[c0:c1] for n in content_words(w.text)}:
                    yield _Found(c0, c1, "about", pin=True)


def _first_and_last(r: _Reading) -> Iterator[_Found]:
    """The first and last clause and sentence, when the question speaks of a beginning or an
    end at all (candidates only; :func:`_end_clause` pins one where it asks for it)."""
    if _POSITION.search(r.question):
        for runs in (r.clauses, r.sentences):
            yield _Found(*runs[0], "position")
            yield _Found(*runs[-1], "position")


def _listed_with(r: _Reading) -> Iterator[_Found]:
    """"Besides X, what else ...?" asks for what the transcript lists beside X: the item after
    "X and/or" (or before "and/or X"), or the words in X's place in a clause said alike; not a
    neighbouring clause (pinned)."""
    for a, b, after in _beside(r.words, r.question):
        if after is None:  # the item in X's place in a clause said alike: exactly these words
            yield _Found(a, b, "object", exact=True, pin=True)
            continue
        for j in (range(a + 1, b + 1) if after else range(a, b)):
            i, e = (a, j) if after else (j, b)  # prefixes after X, suffixes before it
            yield _Found(i, e, "object", pin=True)


def _said_of(r: _Reading) -> Iterator[_Found]:
    """"What kind of X?" asks for what the transcript says of X: the words before X in its
    phrase ("a *small* pan", "a more *amiable* woman"), alone (they end where the question's X
    starts) and with X (cut back where X's phrase goes on: "ill-disposed | young man"), or
    what a clause says X is ("The van is *a large white one*"); pinned."""
    for a, b in _kind_of(r.words, r.question):
        for i in range(a, b):
            for e, origin in ((b, "kind"), (b + 1, "object")):
                yield _Found(i, e, origin, pin=True)
    for a, b in _predicates(r.words, r.question):
        for e in range(a + 1, b + 1):
            if _closed(r.words, e, False):
                yield _Found(a, e, "kind", pin=True)


def _preposition_object(r: _Reading) -> Iterator[_Found]:
    """A question that ends on its preposition ("What did they talk about?", "What is the
    bakery opposite?") asks for that preposition's object: what follows the preposition where
    the transcript says it after the question's words (:func:`_object_at`); pinned."""
    stranded = _STRANDED.search(r.question)
    if not stranded:
        return
    for k in _object_at(r.words, stranded.group(1).lower(), r.qnorms):
        end = r.clauses[_containing(r.clauses, k)][1]
        for j in range(k + 2, min(end, k + 1 + r.max_words) + 1):
            yield _Found(k + 1, j, "object", pin=True)


def _wh_slot(r: _Reading) -> Iterator[_Found]:
    """"From whom do we ...?", "By what should ...?": the question's preposition is said
    before the words that fill its wh-slot, and the question's next words after them
    (:func:`_slot`); pinned."""
    for a, b in _slot(r.words, r.question, r.clauses):
        yield _Found(a, b, "slot", pin=True)


def _verb_objects(r: _Reading) -> Iterator[_Found]:
    """"What should you not ask?": the object of the verb the question ends on, where the
    transcript says that verb with the question's negation or without it, as asked
    (:func:`_verb_object`); pinned."""
    for a, b in _verb_object(r.words, r.question, r.clauses):
        yield _Found(a, b, "object", pin=True)


def _end_clause(r: _Reading) -> Iterator[_Found]:
    """"What are the last words?", "Which card is called first?": the last (first) clause, or
    sentence for "the last sentence / line", that says something (a bare number, "1.", is
    none); not for "his last words", what someone in the story said; pinned."""
    end = _END_WORDS.search(r.question)
    if not end or (end.group(1) and said_by_someone_else(r.question, end.start(), end.end())):
        return
    words = r.words
    side, unit = end.group(1) or end.group(3), (end.group(2) or "").lower()
    runs = r.sentences if unit.startswith(("sentence", "line")) else r.clauses
    said_runs = [(a, b) for a, b in runs if content_words(as_answer(words[a:b]))
                 and not all(w.norm.isdigit() for w in words[a:b])]
    if said_runs:
        first = side.lower() in ("first", "opening")
        yield _Found(*said_runs[0 if first else -1], "end", pin=True)


# Words that may lead into a clause the connective still fronts ("*And* before you leave",
# "*Shortly* after the guests arrived", "*Two days* after the wedding", "*The morning*
# before the exam"), and that a connective said mid-clause takes with it ("we met the band
# *an hour* before the show"): linking words, adverbs of time or degree, a time measure.
_LEAD_INS = frozenset("""
and but so then now just right only even well shortly soon immediately directly straight long
not very much little later earlier the a an one few some several moment moments second seconds
minute minutes hour hours day days night nights morning mornings evening evenings afternoon
afternoons week weeks month months year years while
""".split())
# What may stand between the connective and X: a determiner or a subject pronoun ("before
# *you* leave", "after *the* party"); anything else ("and", another connective, "that") ends
# the search.
_BETWEEN = (ARTICLES | DEMONSTRATIVES | POSSESSIVES | SUBJECT_PRONOUNS) - {"that", "it"}
# "What comes after the bridge?": the next thing in a sequence, whatever the connective says.
_SEQUENCE = re.compile(r"\b(?:comes?|came|follows?|followed)\b", re.I)


def _asks_sequence(question: str) -> bool:
    """Whether the question's own verb, before its "after"/"before", asks what comes next
    ("What comes after X?"), not what is done ("the sun *came* up" is X's)."""
    m = order(question)
    return m is not None and bool(_SEQUENCE.search(question[:m.start()]))


def _event_place(words: Sequence[TranscriptWord], clauses: list[tuple[int, int]],
                 x: tuple[int, int, bool], question: str
                 ) -> tuple[list[tuple[int, int]], int, int, bool]:
    """``(parts, p0, p1, after)``: the steps of the transcript (:func:`_parts`), the first and
    last that say X, and on which side of X the answer lies.

    That side is the question's, unless the transcript says X after the question's own
    connective (:func:`_own_connective`): then the answer is the clause the connective attaches
    X to, wherever it is said — after X where the connective fronts its clause ("Before you
    leave, | lock the door"; without the comma Whisper often leaves out, X's part is cut after
    X), before the connective and its lead-in words where it follows one ("Lock the door |
    before you leave", "We met the band | an hour before the show")."""
    xa, xb, after = x
    parts = _parts(words, clauses)
    link = None if _asks_sequence(question) else _own_connective(words, clauses, xa, xb, after)
    if link is not None:
        cut, after = link
        k = _containing(parts, cut - 1 if after else cut)
        a, b = parts[k]
        if a < cut < b:
            parts = parts[:k] + [(a, cut), (cut, b)] + parts[k + 1:]
    return parts, _containing(parts, xa), _containing(parts, xb - 1), after


def _own_connective(words: Sequence[TranscriptWord], clauses: list[tuple[int, int]], xa: int,
                    xb: int, after: bool) -> tuple[int, bool] | None:
    """``(cut, fronted)``: where the clause the transcript attaches X to with the question's
    own connective ("after", "before") begins (fronted: after X) or ends (before the
    connective and its lead-in words), None where X is not said right after that connective
    (a determiner or a pronoun between them at most), or where that clause is negated ("Never
    swim after you eat": not what is done) or empty."""
    connective = "after" if after else "before"
    c0, c1 = clauses[_containing(clauses, xa)]
    j = xa - 1
    while j >= c0 and _bare(words[j].text) in _BETWEEN:
        j -= 1
    if j < c0 or _bare(words[j].text) != connective:
        return None
    lead = j
    while lead > c0 and _lead_in(words[lead - 1]):
        lead -= 1
    fronted = lead == c0
    if not fronted:
        a, b = c0, lead  # "Lock the door | before you leave"
    elif _SENTENCE_END.search(words[c1 - 1].text) or c1 == len(words):
        a, b = xb, c1  # "After dinner | we walked to the river." (no comma after X's clause)
    else:
        k = _containing(clauses, c1)  # "Before you leave, | lock the door."
        a, b = clauses[k] if k < len(clauses) else (c1, c1)
    if a >= b or any(_negation(w) for w in words[a:b]):
        return None
    return (b if not fronted else a), fronted


def _lead_in(w: TranscriptWord) -> bool:
    t = _bare(w.text)
    return t in _LEAD_INS or t in _NUM or t.isdigit()


def _negation(w: TranscriptWord) -> bool:
    t = _bare(w.text.replace("’", "'"))
    return t in _NOT or t == "no" or t.endswith("n't")


# "Who signed / wrote / sent the letter?", "Who is the email from?": who the question makes
# the writer (not "Who was the letter sent *to*?", not "the woman who wrote the letter").
_WRITER = re.compile(r"^\W*who\s+(?:(?:has|had)\s+)?(?:signed|wrote|written|sent)\s+(?:the|this|"
                     r"that|a|an|his|her|their)\s+(?:\w+\s+)?(?:letter|e-?mail|note|card|"
                     r"invitation|message|postcard)\W*$|^\W*who\s+(?:is|was)\s+(?:the|this|"
                     r"that)\s+(?:\w+\s+)?(?:letter|e-?mail|note|card|invitation|message|"
                     r"postcard)\s+from\W*$", re.I)
_CLOSING = frozenset("regards sincerely faithfully wishes love cheers thanks truly best "
                     "respectfully warmly".split())
_NAME_WORDS = 3


def _signed(r: _Reading) -> Iterator[_Found]:
    """"Who signed (wrote, sent) the letter?": the name after the letter's last closing ("Kind
    regards, Susan Ford."; up to three capitalised words), where a closing ends the transcript's
    words, not "Thanks, Mary." said at its start; preferred for *who* by
    :meth:`as2d.runtime.ask.answer.Answerer.choose`."""
    if not _WRITER.search(r.question):
        return
    words = r.words
    for i in range(len(words) - 2, max(-1, len(words) - 2 - 2 * _NAME_WORDS), -1):
        w = words[i]
        if w.text.rstrip(",.!:").lower() not in _CLOSING or \
                not w.text.endswith((",", ".", "!", ":")):
            continue
        j = i + 1
        while j < len(words) and j - i <= _NAME_WORDS and words[j].text[:1].isupper():
            j += 1
            if words[j - 1].text.endswith((".", ",", "!")):
                break
        if j > i + 1:
            yield _Found(i + 1, j, "signed", exact=True, pin=True)
        return


_SOURCES = (_after_question, _between_question, _before_question, _related_lines,
            _names_and_amounts, _people, _said_about, _first_and_last, _listed_with, _said_of,
            _preposition_object, _wh_slot, _verb_objects, _end_clause, _signed)


@dataclass(frozen=True)
class _EventPlace:
    """Where the X of "what ... after (before) X" is said: X's words, the steps of the
    transcript (:func:`_parts`, cut again where X's own connective says), the first and last
    step that say X, and on which side of X the answer lies (:func:`_event_place`)."""

    x: tuple[int, int, bool]  # (start, end, asked after)
    parts: list[tuple[int, int]]
    p0: int
    p1: int
    after: bool

    @property
    def step(self) -> int:
        """The index of the step right after (before) X's: out of range when none is said."""
        return self.p1 + 1 if self.after else self.p0 - 1


def _place_event(words: Sequence[TranscriptWord], clauses: list[tuple[int, int]],
                 question: str) -> _EventPlace | None:
    x = _event(words, clauses, question) if words else None
    if x is None:
        return None
    return _EventPlace(x, *_event_place(words, clauses, x, question))


def said_nothing_beyond(spans: Sequence[Span], question: str) -> bool:
    """Whether "what ... after (before) X" asks past the recording: X is said, and nothing is
    said after it (before it) — no step on that side and no clause X's own connective attaches
    it to. The answer is then that the recording does not say, not whatever was said first."""
    words = words_of(spans)
    place = _place_event(words, _runs(words, _CLAUSE_END), question)
    return place is not None and not 0 <= place.step < len(place.parts)


def _measure_follows(r: _Reading, found: _Collected) -> None:
    """For "what ... after (before) X", each candidate on the side of X the answer lies
    (:func:`_event_place`) is told how many parts of a clause lie between it and X's
    (:attr:`Candidate.follows`; 0: the nearest)."""
    place = r.event
    if place is None:
        return
    parts, p0, p1 = place.parts, place.p0, place.p1
    for key, c in found.out.items():
        a, b = found.starts[key]
        if place.after and a >= parts[p1][1]:
            c.follows = _containing(parts, a) - p1 - 1
        elif not place.after and b <= parts[p0][0]:
            c.follows = p0 - _containing(parts, b - 1) - 1


# The wh-word stands alone, its verb next ("From whom *do* we ...?"); "At which *stations*
# does ...?" asks for stations, which a slot in other words does not fill.
_SLOT = re.compile(r"^\W*(about|by|for|from|in|into|of|on|to|with|at|under|over|through)\s+"
                   r"(?:whom|what|which|who)\b(?=\s+(?:do|does|did|is|was|are|were|should|"
                   r"would|could|can|will|might|must|may|shall|has|have|had)\b)(.*)$", re.I)


def _slot(words: Sequence[TranscriptWord], question: str,
          clauses: list[tuple[int, int]], max_slot: int = 3) -> list[tuple[int, int]]:
    """``[a, b)``: for a question that starts with a preposition and its wh-word ("From whom do
    we desire increase?"), the words the transcript says between that preposition and the
    question's next words ("from | fairest creatures | we desire increase"), 1 to
    ``max_slot`` words within one clause."""
    m = _SLOT.match(question)
    if not m:
        return []
    rest = {n for n in (_norm(t) for t in _TOKEN.findall(m.group(2))) if n}
    out = []
    for k, w in enumerate(words):
        if _bare(w.text) != m.group(1).lower() or _CLAUSE_END.search(w.text):
            continue
        for i2 in range(k + 2, min(len(words), k + 2 + max_slot)):
            if _CLAUSE_END.search(words[i2 - 1].text):
                break
            run = i2
            while run < len(words) and words[run].norm in rest:
                run += 1
            if run > i2 and content_words(" ".join(v.text for v in words[i2:run])):
                out.append((k + 1, i2))
                break
    return out


_AUX_WORDS = "|".join(sorted(DO_FORMS | MODALS))
_AUX = r"(?:" + _AUX_WORDS + r")"
_SUBJECT = (r"(?:" + "|".join(sorted(SUBJECT_PRONOUNS)) + "|" + alternation(DEFINITE) + r"\s+"
            r"[A-Za-z'-]+(?:\s+[A-Za-z'-]+)?)")
# (an adverb may stand before the verb: "What did she *nearly* hit?")
_VERB_LAST = re.compile(r"^\W*what\s+" + _AUX + r"(n['’]t)?\s+" + _SUBJECT
                        + r"\s+(?:(not|never)\s+)?(?:(?:nearly|almost|just|really|actually|"
                        r"ever|finally|also|first|still|usually|often|always|once|then)\s+)?"
                        r"([A-Za-z]+)\W*$", re.I)
_NOT = frozenset({"not", "never"})
_PRO_VERBS = frozenset(_norm(w) for w in ("do", "be", "have", "happen"))


def _negated(words: Sequence[TranscriptWord], k: int) -> bool:
    """Whether the transcript negates the verb at ``words[k]`` ("do not ask", "never ask",
    "didn't ask", "ask not")."""
    near = [_bare(words[j].text.replace("’", "'")) for j in (k - 2, k - 1, k + 1)
            if 0 <= j < len(words)]
    return any(t in _NOT or t.endswith("n't") for t in near)


def _verb_object(words: Sequence[TranscriptWord], question: str,
                 clauses: list[tuple[int, int]], max_words: int = 12) -> list[tuple[int, int]]:
    """``[a, b)``: for "What should you (not) ask?", what follows that verb in its clause where
    the transcript says it negated as the question does, or not negated as it does not
    ("ask not | what your country can do for you" for the first, "ask | what you can do for
    your country" for "What should you ask?")."""
    m = _VERB_LAST.match(question)
    if not m:
        return []
    verb, negative = _norm(m.group(3)), m.group(1) is not None or m.group(2) is not None
    if verb in _PRO_VERBS:
        return []  # "What should you do?" asks for an action, not what "do" takes
    out = []
    for k, w in enumerate(words):
        if w.norm != verb or _CLAUSE_END.search(w.text) or _negated(words, k) != negative:
            continue
        a = k + 1 + (k + 1 < len(words) and _bare(words[k + 1].text) in _NOT)
        b = clauses[_containing(clauses, k)][1]
        if a < b <= a + max_words:
            out.append((a, b))
    return out


# "What are the speaker's last words?", "Which card is called first?": the last (first) said.
_END_WORDS = re.compile(r"\b(first|last|final|opening|closing)\s+(words?|sentences?|lines?|"
                        r"phrase|thing (?:said|heard))\b|\b(?:called|named|said|read|"
                        r"mentioned|heard|spoken|listed)\s+(first|last)\b", re.I)


_JOINS = frozenset({"and", "but", "then"})
# A verb the part after "and <determiner>" says when it is a clause ("and the dog *was* fed"),
# not a noun phrase listed with the one before it ("the flour and the sugar").
_AUXILIARIES = AUXILIARIES


def _joins_nouns(words: Sequence[TranscriptWord], i: int, b: int) -> bool:
    """Whether the "and" at ``words[i]`` joins a noun phrase to the one before it ("mix the
    flour | and the sugar", "add salt and two eggs"): a determiner or a number follows it and
    no auxiliary is said before the part's end ``b`` (or the next join), so the part has no
    verb of its own and is not a step."""
    if _bare(words[i].text) != "and" or i + 1 >= b:
        return False
    head = _bare(words[i + 1].text)
    if head not in _DETERMINERS and head not in _NUM and not head.isdigit():
        return False
    for w in words[i + 1:b]:
        t = _bare(w.text)
        if t in _JOINS:
            break
        if t in _AUXILIARIES:
            return False
    return True


def _parts(words: Sequence[TranscriptWord],
           clauses: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The clauses cut again before "and", "but" and "then" ("Go somewhere | and do
    something."): the steps a speaker says one after another; not before an "and" that lists
    a noun phrase with the one before it ("the flour and the sugar", :func:`_joins_nouns`).
    A part that says nothing of its own ("After that, | bake it": no content word) leads
    into the next one and is one step with it, so the step before "bake it" is not "After
    that"."""
    out: list[tuple[int, int]] = []
    for a, b in clauses:
        cut = a
        for i in range(a + 1, b):
            if _bare(words[i].text) in _JOINS and not _joins_nouns(words, i, b):
                out.append((cut, i))
                cut = i
        out.append((cut, b))
    steps: list[tuple[int, int]] = []
    lead = None  # the start of the parts that said nothing yet
    for a, b in out:
        if not content_words(" ".join(w.text for w in words[a:b])) and b < len(words):
            lead = a if lead is None else lead
            continue
        steps.append((a if lead is None else lead, b))
        lead = None
    return steps


def _event(words: Sequence[TranscriptWord], clauses: list[tuple[int, int]],
           question: str) -> tuple[int, int, bool] | None:
    """``(a, b, after)``: where the transcript says the X of "what ... after X" (``after``) or
    "before X" (its words from the first that is not a small word: "after *the eight of
    spades*", "before you *do something*"), None when it does not say it in full. Of several
    mentions, the first said with the question's own connective ("The war began in spring. |
    *Before the war*, we lived in Paris."), else the one whose clause, to its sentence's end,
    says more of the question's other content words than the first mention's ("What goes
    into the pot a minute after the garlic?": not "chop three cloves of garlic" but "add the
    garlic, and after a minute pour in ..."; a mention talked *about* is none), else the
    first."""
    m = order(question)
    if not m:
        return None
    tokens = _TOKEN.findall(m.group(2))
    while tokens and _bare(tokens[0]) in _STOPWORDS:
        tokens = tokens[1:]
    x = [n for n in (_norm(t) for t in tokens) if n]
    if not x:
        return None
    after = m.group(1).lower() == "after"
    found = [i for i in range(len(words) - len(x) + 1)
             if [w.norm for w in words[i:i + len(x)]] == x]
    if not found:
        return None
    if not _asks_sequence(question):
        for i in found:
            if _own_connective(words, clauses, i, i + len(x), after) is not None:
                return i, i + len(x), after
    if len(found) > 1:
        others = set(content_words(question[:m.start()] + " " + question[m.end():]))

        sentences = _runs(words, _SENTENCE_END)

        def shared(i: int) -> int:  # from X's clause to its sentence's end
            a, b = clauses[_containing(clauses, i)][0], sentences[_containing(sentences, i)][1]
            return len(others & {n for w in words[a:b] for n in content_words(w.text)})

        def talked_about(i: int) -> bool:  # "told them *about* the lunch": no event
            j = i - 1
            while j >= 0 and _bare(words[j].text) in _DETERMINERS:
                j -= 1
            return j >= 0 and _bare(words[j].text) in _ABOUT
        done = [i for i in found if not talked_about(i)]
        best = max(done, key=lambda i: (shared(i), -i), default=found[0])
        if shared(best) > shared(found[0]):
            return best, best + len(x), after
    return found[0], found[0] + len(x), after


_ABOUT = frozenset("about of regarding concerning".split())


def _object_at(words: Sequence[TranscriptWord], prep: str, qnorms: set[str]) -> list[int]:
    """Where the preposition a question ends on is said after the question's words: the
    occurrences with the longest run of question words right before them ("forty dollars
    *for*" for "What did he pay forty dollars for?"), then the most question words in the five
    before them ("talked for an hour *about*")."""
    scored = []
    for k, w in enumerate(words):
        if _bare(w.text) != prep or k + 1 >= len(words):
            continue
        run = 0
        while run < k and words[k - 1 - run].norm in qnorms:
            run += 1
        near = sum(1 for v in words[max(0, k - 5):k] if v.norm in qnorms)
        if run or near:
            scored.append(((run, near), k))
    if not scored:
        return []
    best = max(sc for sc, _k in scored)
    return [k for sc, k in scored if sc == best]


_AND = frozenset({"and", "or", "nor", "but"})


def _beside(words: Sequence[TranscriptWord], question: str,
            max_words: int = 6) -> list[tuple[int, int, bool | None]]:
    """``(start, end, after)``: for "Besides X, ...", the item the transcript coordinates with
    X where it says X: the words after "X and" (to the clause's end, at most ``max_words``;
    ``after``: True) or those before "and X" (from the clause's start; False), or the words in
    X's place in a clause said alike next to X's ("we had *everything* before us, we had
    *nothing* before us": :func:`_parallel`; None)."""
    m = BESIDES.search(question)
    if not m:
        return []
    tokens = _TOKEN.findall(m.group(1))
    while tokens and _bare(tokens[0]) in _STOPWORDS:  # "besides *the* chickens"
        tokens = tokens[1:]
    phrase = [n for n in (_norm(t) for t in tokens) if n]
    if not phrase:
        return []
    clauses = _runs(words, _CLAUSE_END)
    out = []
    n = len(phrase)
    for i in range(len(words) - n + 1):
        if [w.norm for w in words[i:i + n]] != phrase:
            continue
        c0, c1 = clauses[_containing(clauses, i)]
        e = i + n
        if not _CLAUSE_END.search(words[e - 1].text) and e < len(words) \
                and _bare(words[e].text) in _AND:
            out.append((e + 1, min(c1, e + 1 + max_words), True))
        for k in range(i - 1, max(c0, i - 4) - 1, -1):  # "and (about thirty) chickens"
            if _bare(words[k].text) in _AND:
                if k > c0:
                    out.append((max(c0, k - max_words), k, False))
                break
        out += [(a, b, None) for a, b in _parallel(words, clauses, i, e)]
    return out


def _parallel(words: Sequence[TranscriptWord], clauses: list[tuple[int, int]], i: int, e: int,
              max_item: int = 4) -> list[tuple[int, int]]:
    """``[a, b)``: in the clauses right before and after the one holding ``words[i:e]``, the
    words in its place where that clause has the same words before and after them (at least
    two in all): "It was the age of | wisdom |, it was the age of | foolishness |"."""
    k = _containing(clauses, i)
    c0, c1 = clauses[k]
    left = [w.norm for w in words[c0:i]]
    right = [w.norm for w in words[e:c1]]
    if len(left) + len(right) < 2:
        return []
    out = []
    for d in (k - 1, k + 1):
        if not 0 <= d < len(clauses):
            continue
        d0, d1 = clauses[d]
        a, b = d0 + len(left), d1 - len(right)
        if not 0 < b - a <= max_item:
            continue
        if [w.norm for w in words[d0:a]] == left and [w.norm for w in words[b:d1]] == right:
            out.append((a, b))
    return out


_THE = r"(?:" + alternation(DEFINITE) + r"\s+)?"
# "What kind (sort, type, colour, size) of X?": X is the word after "of".
_KIND_OF = re.compile(r"\b(?:what|which)\s+(?:kind|sort|type|colou?r|size)s?\s+of\s+" + _THE
                      + r"([A-Za-z'-]+)", re.I)
# "How big (large, small) is X?", "How is X described?", "What is X like?", "What did X look
# like?": X is the head of the noun phrase (its last word: "the old *van*").
_DESCRIBED = re.compile(
    r"\b(?:how\s+(?:" + "|".join(DESCRIBED_SIZES) + r")\s+(?:is|was|are|were)\s+" + _THE
    + r"((?:[A-Za-z'-]+\s+){0,2}?[A-Za-z'-]+)(?=\W*$|\s+(?:that|who|which|in|on|at|of|near|"
    r"now|today|then|when|after|before)\b)"
    r"|how\s+(?:is|was|are|were)\s+" + _THE + r"((?:[A-Za-z'-]+\s+){0,2}?[A-Za-z'-]+)\s+"
    r"described\b"
    r"|what\s+(?:is|was|are|were)\s+" + _THE + r"((?:[A-Za-z'-]+\s+){0,2}?[A-Za-z'-]+)\s+like\b"
    r"|what\s+(?:does|did|do)\s+" + _THE + r"((?:[A-Za-z'-]+\s+){0,2}?[A-Za-z'-]+)\s+look\s+"
    r"like\b)", re.I)
_NOT_A_THING = frozenset("it he she they you we i me him her them this that these those there "
                         "everything something anything nothing".split())


def _said_of_noun(question: str) -> str | None:
    """The X of a question about what is said of X (:data:`_KIND_OF`, :data:`_DESCRIBED`), as
    a transcript word's norm; None for none, or for a pronoun ("What is it like?")."""
    m = _KIND_OF.search(question)
    if m:
        x = m.group(1)
    else:
        m = _DESCRIBED.search(question)
        if not m:
            return None
        x = next(g for g in m.groups() if g).split()[-1]
    return None if x.lower() in _NOT_A_THING else _norm(x)


def _kind_of(words: Sequence[TranscriptWord], question: str,
             max_words: int = 3) -> list[tuple[int, int]]:
    """``(start, at)``: for "What kind of X ...?" ("How big is X?", "How is X described?",
    "What is X like?"), the words that lead up to X where the transcript says X (at most
    ``max_words``, within its clause, after a determiner)."""
    noun = _said_of_noun(question)
    if not noun:
        return []
    clauses = _runs(words, _CLAUSE_END)
    out = []
    for k, w in enumerate(words):
        if w.norm != noun or k == 0:
            continue
        c0 = clauses[_containing(clauses, k)][0]
        a = k
        while a > max(c0, k - max_words) and not _CLAUSE_END.search(words[a - 1].text) \
                and _bare(words[a - 1].text) not in _DETERMINERS:
            a -= 1
        if a < k:
            out.append((a, k))
    return out


def _predicates(words: Sequence[TranscriptWord], question: str,
                max_words: int = 4) -> list[tuple[int, int]]:
    """``(start, end)``: what a clause says X is ("The van is | a large white one"), up to
    ``max_words`` within the clause; not a passive or progressive verb ("The van was | parked
    behind the shop") nor a place ("is | behind the shop")."""
    noun = _said_of_noun(question)
    if not noun:
        return []
    clauses = _runs(words, _CLAUSE_END)
    out = []
    for k, w in enumerate(words[:-2]):
        if w.norm != noun or _bare(words[k + 1].text) not in _COPULAS:
            continue
        first = _bare(words[k + 2].text)
        if first.endswith(("ed", "ing")) or first in _PREPOSITIONS:
            continue
        c1 = clauses[_containing(clauses, k)][1]
        if k + 2 < c1:
            out.append((k + 2, min(c1, k + 2 + max_words)))
    return out


_COPULAS = frozenset("is was are were looked looks seemed seems".split())
_PREPOSITIONS = PREPOSITIONS


_DETERMINERS = DETERMINERS


def objects(found: Sequence[Candidate]) -> list[Candidate]:
    """The candidates that are the object of the preposition a question ends on, the item
    listed with X ("besides X") or what is said of X ("what kind of X"), when there are any:
    the answer is one of them (not the line's other phrases)."""
    return [c for c in found if c.origin in ("object", "kind")]


# Origins of candidates the answer is taken from when there are any (:func:`pinned`).
_PINNED = ("object", "kind", "slot", "next", "end", "about")


def pinned(found: Sequence[Candidate]) -> list[Candidate]:
    """The candidates the question's own shape points at, when there are any: the object of
    the preposition or verb it ends on, the item listed with X ("besides X"), what is said of
    X ("what kind of X"), the words in its wh-slot ("From whom ...?"), the item after X ("which
    card is called after X"), the first or last clause ("the last words"); else, for "what
    ... after X" ("before X"), those in the nearest part of a clause after (before) X's. The
    answer is one of them."""
    out = [c for c in found if c.origin in _PINNED]
    if out:
        return out
    after = [c.follows for c in found if c.follows is not None]
    return [c for c in found if c.follows == min(after)] if after else []


_TITLE = TITLE_END
_STRANDED = re.compile(r"\b(about|of|for|with|to|from|at|on|in|into|opposite|behind|near|under|"
                       r"over|by|after|before|beside|like)\W*$", re.I)
_WH = frozenset("who whom whose what which when where why how".split())

# Words after which a phrase is not over: a determiner, a preposition, a conjunction, an
# auxiliary ("the tram and", "for a", "is to be"). A candidate cut there is cut before its
# object, and so is one cut between a word and the content word that continues it ("For a
# long | time", "The blue | boat"), unless the transcript's own punctuation ends it there.
_OPEN = frozenset("""
a an the this that these those his her their its my your our some any every each no of to in
on at for with from by about into onto over under than as like between after before through
and or but nor so because unless if which who whom whose when while where is are was were be
been being am have has had do does did will would shall should can could may might must very
more most rather quite not too also just even he she they we i
""".split())
# Words that lead into the rest of a phrase: cutting before them cuts the phrase's head off
# ("Still | more respectable", "He might even | have been made amiable"), and cutting before
# a modal cuts a clause off its verb ("what your country | can do for you").
_LEADS_ON = frozenset("more most less least very rather quite too so have has had be been "
                      "being can could will would shall should may might must".split())


def _closed(words: Sequence[TranscriptWord], b: int, whole: bool) -> bool:
    """Whether a candidate ending before ``words[b]`` ends where a phrase can: at the
    transcript's clause mark, or (``whole``: a whole clause, or words that end where the
    question's own words start) anywhere but after an open word; else before a small word or
    a number, or after a number ("Twelve | days": the count); never before "of", which
    completes the noun before it ("two cans *of tomatoes*")."""
    last = words[b - 1]
    if _CLAUSE_END.search(last.text) and not _TITLE.match(last.text):
        return True
    if _bare(last.text) in _OPEN:
        return False
    if whole or b >= len(words):
        return True
    nxt = _bare(words[b].text)
    if nxt in _LEADS_ON or nxt == "of":  # "Two cans | of tomatoes", "The king | of France"
        return False
    return nxt in _STOPWORDS or nxt.isdigit() or _bare(last.text).isdigit() \
        or last.norm.isdigit() or words[b].norm.isdigit()


def _bare(text: str) -> str:
    return "".join(_NORM.findall(text.lower()))


# The group a wh-word picks from ("Who *in her family* worked ...", "Which *of the boys*
# ...", "Who *among them* ..."): part of the wh-phrase, not words the transcript says there.
_RESTRICTED = re.compile(r"\b(who|whom|which)\s+(?:in|of|among|from)\s+(?:(?:the|his|her|their|"
                         r"its|my|your|our|these|those)\s+)?(?:family|families|relatives|"
                         r"relations|parents|children|kids|brothers|sisters|siblings|cousins|"
                         r"grandparents|grandchildren|friends|boys|girls|men|women|people|"
                         r"students|pupils|players|staff|team|group|class|guests|neighbours|"
                         r"neighbors|them|us)\b", re.I)


def _leading(words: Sequence[TranscriptWord], question: str,
             qcontent: set[str]) -> list[int]:
    """Where the transcript runs of the question's words that the question puts
    right after its wh-phrase ("Who | waited on the pier?", "When did the | son row out?",
    "Who in her family | worked ..."): only small words and a wh-phrase before them in the
    question. The longest two."""
    q = [t for t in _TOKEN.findall(question) if _norm(t)]
    norms = [_norm(t) for t in q]
    clauses = _runs(words, _CLAUSE_END)
    out = []
    for i, j, m in _question_runs(words, norms):
        if i > 0 and j > 0 and words[i - 1].norm == norms[j - 1]:
            continue  # inside a longer run
        head = [_bare(t) for t in q[:j]]
        if not any(h in _WH for h in head) or \
                content_words(_RESTRICTED.sub(r"\1", " ".join(q[:j]))):
            continue
        # one word of the question is not what it says of someone ("Robert" of "Who is
        # Robert's wife?") unless another of its content words is in the same clause
        # ("Who planted the tulips?" over "my grandmother planted forty tulips")
        c0, c1 = clauses[_containing(clauses, i)]
        shared = {w.norm for w in words[c0:c1]} & qcontent
        if m >= 2 or (len(shared) >= 2 and _bare(words[i].text) not in _OPEN):
            out.append((j, -m, i))
    out.sort()  # the run nearest the wh-word first ("Who | said ..."), then the longest
    return [i for _j, _m, i in out[:2]]
_POSITION = re.compile(r"\b(first|begin\w*|start\w*|opening|last|end\w*|final\w*|close\w*)\b",
                       re.I)
_HOW_MANY_TIMES = re.compile(r"\bhow (?:many times|often)\b", re.I)
# What makes "how many times" a question about the words said, not about what they say ("How
# many times a day should a capsule be taken?" asks the dose, "three times a day"): a verb of
# saying or hearing, or the word itself.
_OF_WORDS = re.compile(r"\b(?:say|says|said|saying|mention\w*|repeat\w*|hear|hears|heard|"
                       r"utter\w*|speak|speaks|spoke|spoken|speaking|pronounce\w*|word|words|"
                       r"phrase|phrases|talk(?:s|ed|ing)? about|refer\w* to|appear\w*|"
                       r"occur\w*|named|"
                       r"br(?:ing|ings|inging|ought) up|comes? up|came up)\b", re.I)
_COUNT_WORDS = ("never", "once", "twice", "three times", "four times", "five times",
                "six times", "seven times", "eight times", "nine times", "ten times")


def count_answer(spans: Sequence[Span], question: str) -> tuple[str, list[int]] | None:
    """The answer to "how many times / how often is X said" when X (the quoted phrase, else the
    question's longest run of words found in the transcript) occurs: the count and the spans
    that hold it; None otherwise, and where the question asks how often something is done,
    not said (no quoted phrase and no verb of saying, :data:`_OF_WORDS`)."""
    if not _HOW_MANY_TIMES.search(question):
        return None
    if not quoted(question) and not _OF_WORDS.search(question):
        return None
    words = words_of(spans)
    norms = [w.norm for w in words]
    phrases = [[w for w in (_norm(t) for t in _TOKEN.findall(p)) if w] for p in quoted(question)]
    if not phrases:
        q = [w for w in (_norm(t) for t in _TOKEN.findall(question)) if w]
        runs = _matches(words, q, set(content_words(question)))
        if not runs:
            return None
        m, e = max(runs, key=lambda x: x[0])
        phrases = [norms[e - m:e]]
    pw = max(phrases, key=len)
    if not pw:
        return None
    hits = [i for i in range(len(norms) - len(pw) + 1) if norms[i:i + len(pw)] == pw]
    if not hits:
        return None
    n = len(hits)
    text = (_COUNT_WORDS[n] if n < len(_COUNT_WORDS) else f"{n} times")
    return text[0].upper() + text[1:] + ".", sorted({words[i].span for i in hits})
