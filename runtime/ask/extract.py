"""Candidate answers taken from the transcript, scored by the answering model.

A 270M base model copies well but chooses badly: of several similar lines it often copies the
wrong one ("the season of *light*" for "the season of what, besides light?"). Here the choice
is made over a short list of spans of the transcript instead:

* the words that *follow* the question's longest runs of words in the transcript (its quoted
  phrase first): every prefix and suffix of the rest of that clause, the next clause and the
  next sentence ("It was the winter of ___", "What does he say after 'Go forward'?");
* the words *between* two runs of the question's words, where its wh-word sits in the
  transcript's sentence ("When did X have leisure …?" over "X had *then* leisure …");
* the clauses and sentences of the spans that share the most words with the question (BM25);
* for a question about the first or last words, the first and last clause and sentence.

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
from collections.abc import Sequence
from dataclasses import dataclass

from as2d.runtime.ask.passages import NUMBER_WORDS, _stem, content_words, quoted, rank_spans
from as2d.runtime.ask.spans import Span

_NUM = NUMBER_WORDS
_TOKEN = re.compile(r"\S+")
_NORM = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CLAUSE_END = re.compile(r"[,;:.?!]$")
_SENTENCE_END = re.compile(r"[.?!]$")


def _norm(word: str) -> str:
    """A transcript or question word for matching: lower case, no punctuation, numbers as
    digits, lightly stemmed (so "failing" meets "failed" and "eight" meets "8")."""
    w = "".join(_NORM.findall(word.lower())).split("'")[0]
    w = _NUM.get(w, w)
    return _stem(w) if w else w


@dataclass(frozen=True)
class TranscriptWord:
    text: str  # as the transcript writes it, punctuation included
    norm: str
    span: int  # index of its span


@dataclass
class Candidate:
    text: str  # as an answer: capitalised, with an end mark
    origin: str  # "after" (follows the question's words), "line", "name", "position"
    spans: tuple[int, ...]  # transcript spans it comes from
    score: float = float("nan")  # what candidates are ranked by (higher is better)
    tokens: int = 0
    likelihood: float = float("nan")  # log-likelihood as the answer, its end included
    prior: float | None = None  # the same under a neutral question (when calibrated)

    def to_dict(self, spans: Sequence[Span] | None = None) -> dict:
        d = {"text": self.text, "origin": self.origin, "score": round(float(self.score), 3),
             "likelihood": round(float(self.likelihood), 3), "tokens": self.tokens}
        if self.prior is not None:
            d["prior"] = round(float(self.prior), 3)
        if spans is not None:
            d["spans"] = [spans[i].to_dict() for i in self.spans]
        return d


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


def candidates(spans: Sequence[Span], question: str, max_after: int = 3, top_lines: int = 2,
               max_words: int = 6, limit: int = 24) -> list[Candidate]:
    """Candidate answers to ``question`` from the transcript (unique texts, in the order
    found), before scoring."""
    words = words_of(spans)
    if not words:
        return []
    clauses = _runs(words, _CLAUSE_END)
    sentences = _runs(words, _SENTENCE_END)
    qcontent = set(content_words(question))
    out: dict[str, Candidate] = {}

    qnorms = {w for w in (_norm(t) for t in _TOKEN.findall(question)) if w}
    whole = set(clauses) | set(sentences)

    def add(a: int, b: int, origin: str) -> None:
        if a >= b:
            return
        text = as_answer(words[a:b])
        key = text.lower()
        if not text or key in out:
            return
        new = set(content_words(text)) - qcontent
        if not new and not any(w.norm in _NUM.values() or w.norm.isdigit()
                               for w in words[a:b]):
            # Nothing but small words the question may lack: an answer only where they stand
            # alone (a whole clause or sentence: "No.", "Not now.") or stand between the
            # question's own words ("had *then* leisure"); never the question's words alone.
            if all(w.norm in qnorms for w in words[a:b]):
                return
            if (a, b) not in whole and origin != "gap":
                return
        out[key] = Candidate(text, origin, tuple(sorted({w.span for w in words[a:b]})))

    # 1. What follows the question's words (a quoted phrase counts twice as long).
    qwords = [_norm(t) for t in _TOKEN.findall(question)]
    qwords = [w for w in qwords if w]
    found = _matches(words, qwords, qcontent)
    for phrase in quoted(question):
        pw = [w for w in (_norm(t) for t in _TOKEN.findall(phrase)) if w]
        for m, e in _matches(words, pw, set(pw)):
            if m == len(pw):
                found.append((2 * m + 1, e))
    found.sort(key=lambda x: (-x[0], x[1]))
    for _m, e in found[:max_after]:
        if e >= len(words):
            continue
        k = _containing(clauses, e - 1)
        a, b = e, clauses[k][1] if k < len(clauses) else len(words)
        b = min(b, a + max_words)
        for j in range(a + 1, b + 1):  # prefixes of the rest of the clause
            add(a, j, "after")
        for j in range(a + 1, b):  # its suffixes
            add(j, b, "after")
        if k + 1 < len(clauses):
            na, nb = clauses[k + 1]
            add(na, min(nb, na + max_words), "after")
        s = _containing(sentences, e - 1)
        if s + 1 < len(sentences):
            na, nb = sentences[s + 1]
            add(na, min(nb, na + 2 * max_words), "after")
    # 1b. The words between two runs of the question's words ("When did Mr. John Dashwood
    #     have leisure ...?" over "Mr. John Dashwood had *then* leisure ..."): where the
    #     question's wh-word sits in the transcript's sentence.
    for a, b in _gaps(words, qwords, qcontent, sentences):
        for i in range(a, b):
            for j in range(i + 1, b + 1):
                add(i, j, "gap")
    # 2. The clauses and sentences of the spans most related to the question. (When none
    #    shares a word with it, taking every span of a short transcript instead fixed a
    #    misheard name on the test split but lost a card on dev: 27 -> 26/31; not kept.)
    ranked = [i for sc, i in rank_spans(spans, question) if sc > 0][:top_lines]
    for i in ranked:
        for a, b in clauses + sentences:
            if any(w.span == i for w in words[a:b]):
                add(a, min(b, a + 2 * max_words), "line")
    # 3. Names (runs of capitalised words) and amounts (a number and the word after it) in
    #    the most related spans: the short answers who / how much questions want. A "who"
    #    question takes the names of every span: the related one often says only "he".
    named = range(len(spans)) if _WHO.match(question) else ranked
    for i in named:
        idx = [k for k, w in enumerate(words) if w.span == i]
        k = 0
        while k < len(idx):
            w = words[idx[k]]
            if w.norm.isdigit():
                add(idx[k], min(idx[k] + 2, idx[-1] + 1), "name")
                add(idx[k], idx[k] + 1, "name")
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
                add(idx[k], idx[j - 1] + 1, "name")
                k = j
            else:
                k += 1
    # 4. The first and last words, when asked for.
    if _POSITION.search(question):
        for runs in (clauses, sentences):
            add(*runs[0], "position")
            add(*runs[-1], "position")
    return list(out.values())[:limit]


_TITLE = re.compile(r"(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof)\.$")
_WHO = re.compile(r"\s*(?:who|whom|whose)\b", re.I)
_POSITION = re.compile(r"\b(first|begin\w*|start\w*|opening|last|end\w*|final\w*|close\w*)\b",
                       re.I)
_HOW_MANY_TIMES = re.compile(r"\bhow (?:many times|often)\b", re.I)
_COUNT_WORDS = ("never", "once", "twice", "three times", "four times", "five times",
                "six times", "seven times", "eight times", "nine times", "ten times")


def count_answer(spans: Sequence[Span], question: str) -> tuple[str, list[int]] | None:
    """The answer to "how many times / how often is X said" when X (the quoted phrase, else the
    question's longest run of words found in the transcript) occurs: the count and the spans
    that hold it; None otherwise."""
    if not _HOW_MANY_TIMES.search(question):
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
