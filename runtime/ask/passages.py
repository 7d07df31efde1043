"""Which transcript spans relate to a text: passages for the prompt, evidence for the answer.

Both questions are answered with the same notion of shared content words. A transcript longer
than the answering model's context is never cut silently: the windows of spans that share the
most words with the question are selected (BM25), kept in time order. After answering, the
spans the answer draws on (by a time it names, else by shared words) are its evidence.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from as2d.runtime.ask.english.lexicon import (
    IRREGULAR,
    NEGATIONS,
    SENTENCE_BREAK,
    SENTENCE_ENDS,
    TITLE_END,
)
from as2d.runtime.ask.english.lexicon import NUMBER_SCALES as _SCALES
from as2d.runtime.ask.english.lexicon import STOP_WORDS as _STOPWORDS
from as2d.runtime.ask.evidence import Evidence
from as2d.runtime.ask.spans import Span, format_time, parse_times
from as2d.runtime.numbers import NUMBER_WORDS

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

def numbers_as_digits(words: list[str]) -> list[str]:
    """Runs of number words as one number in digits ("twenty two" → "22", "three hundred and
    five" → "305", "two thousand and five" → "2005", "forty" → "40", "5 hundred" → "500");
    other words as they are. Whisper
    writes digits where a question or an answer may spell the number out, and the other way
    round."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] not in NUMBER_WORDS and words[i] not in _SCALES:
            out.append(words[i])
            i += 1
            continue
        total = 0
        current = int(out.pop()) if words[i] in _SCALES and out[-1:] and out[-1].isdigit() \
            else 0
        j = i
        while j < len(words):
            x = words[j]
            if x in NUMBER_WORDS:
                v = int(NUMBER_WORDS[x])
                if current % 100 == 0 or (current % 100 >= 20 and current % 10 == 0 and v < 10):
                    current += v  # "twenty two", "hundred and five"
                else:
                    break  # "two three": two numbers
            elif x in _SCALES:
                current = max(current, 1) * _SCALES[x]
                if _SCALES[x] >= 1000:
                    total, current = total + current, 0
            elif not (x == "and" and ((current and current % 100 == 0)
                                      or (total and not current))
                      and j + 1 < len(words) and words[j + 1] in NUMBER_WORDS):
                break
            j += 1
        out.append(str(total + current))
        i = j
    return out


def content_words(text: str) -> list[str]:
    """Lower-cased words without stop words, lightly stemmed (plural and -ing/-ed endings, common
    irregular forms), so that "fetched" in a question meets "fetch" in the transcript and "paid"
    meets "pay"; numbers as digits (Whisper writes "8 of spades" where a question says "the
    eight", "40" where a speaker said "forty"). A negation ("not", "never", "n't") is kept as
    ``not``: an answer that adds one says something the speaker did not."""
    words = []
    for w in _WORD.findall(text.lower().replace("\u2019", "'")):
        if w.endswith("n't"):
            words += [w[:-3] if w[:-3] not in ("ca", "wo") else {"ca": "can", "wo": "will"}[
                w[:-3]], "not"]
        else:
            words.append(w.split("'")[0])
    out = []
    for w in numbers_as_digits(words):
        if w in NEGATIONS:
            out.append("not")
        elif w and w not in _STOPWORDS:
            out.append(w if w.isdigit() else stem(w))
    return out




def stem(w: str) -> str:
    """A light stem: irregular forms to their base, then -ies/-ied to -y (to -ie in a word of
    four letters: "died" meets "die"), -es/-s, -ing, -ed
    removed, a doubled final consonant undoubled (in the base too: "cliff" meets "cliffs") and
    a final -e dropped (so "moved", "moves", "moving" and "move" all meet, and "stopped" meets
    "stop")."""
    w = IRREGULAR.get(w, w)
    if len(w) > 4 and w.endswith(("ies", "ied")):
        return w[:-3] + "y"
    if len(w) == 4 and w.endswith(("ies", "ied")):  # "died", "lies", "tied": die, lie, tie
        return w[:-1]
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix) and not w.endswith("ss"):
            w = w[: -len(suffix)]
            break
    # undoubled whether a suffix came off or not, so that a base ending in a double letter
    # meets its inflections ("cliff" and "cliffs", "buzz" and "buzzed")
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def bm25(docs: list[Counter], query: set[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each document (a word Counter) for a set of query words."""
    if not docs or not query:
        return [0.0] * len(docs)
    n = len(docs)
    avg = sum(sum(d.values()) for d in docs) / n or 1.0
    df = {w: sum(1 for d in docs if w in d) for w in query}
    out = []
    for d in docs:
        length = sum(d.values())
        s = 0.0
        for w in query:
            tf = d.get(w, 0)
            if not tf:
                continue
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))
        out.append(s)
    return out


def select_spans(spans: Sequence[Span], line_tokens: Sequence[int], question: str, room: int,
                 window_tokens: int = 96) -> tuple[list[int], str]:
    """Indices of the spans to keep (in time order) within ``room`` tokens, and how they were
    chosen.

    The transcript is cut into windows of consecutive spans (about ``window_tokens`` each),
    scored with BM25 against the question's content words; the best windows are taken until
    the room is full. Without any shared word the windows are spread evenly over the recording
    (a sample, not the start only).
    """
    windows: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i, n in enumerate(line_tokens):
        if cur and size + n > window_tokens:
            windows.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += n
    if cur:
        windows.append(cur)
    docs = [Counter(w for i in win for w in content_words(spans[i].text)) for win in windows]
    q = set(content_words(question))
    scores = bm25(docs, q)
    if max(scores, default=0.0) > 0:
        order = sorted(range(len(windows)), key=lambda w: (-scores[w], w))
        how = "that share the most words with the question"
    else:
        order = _spread(len(windows))
        how = ("spread evenly over the recording (no passage shares a word with the "
               "question)")
    keep: list[int] = []
    used = 0
    for w in order:
        cost = sum(line_tokens[i] for i in windows[w]) + 4  # a "[...]" line
        if used + cost > room:
            if not keep and scores and (max(scores) > 0):
                # Even the best window is too big: keep its best spans.
                keep = _best_spans(windows[w], spans, line_tokens, q, room)
                used = room
            continue
        keep.extend(windows[w])
        used += cost
    if not keep:
        keep = _best_spans(windows[order[0]], spans, line_tokens, q, room)
    return sorted(keep), how


def _best_spans(window: list[int], spans: Sequence[Span], line_tokens: Sequence[int],
                q: set[str], room: int) -> list[int]:
    ranked = sorted(window, key=lambda i: (-len(q & set(content_words(spans[i].text))), i))
    keep, used = [], 0
    for i in ranked:
        if used + line_tokens[i] + 4 <= room:
            keep.append(i)
            used += line_tokens[i] + 4
    return keep or ranked[:1]


def _spread(n: int) -> list[int]:
    """0..n-1 in an order that covers the range evenly early (bisection order)."""
    order, seen = [], set()
    step = n
    while len(order) < n:
        for i in range(0, n, max(1, step)):
            if i not in seen:
                seen.add(i)
                order.append(i)
        if step == 1:
            break
        step = max(1, step // 2)
    return order


# A passage of a long recording: up to this many sentences, starting at each sentence (so
# passages overlap), and no more words than this (a passage is something to read).
PASSAGE_SENTENCES = 2
PASSAGE_WORDS = 60


def sentence_runs(spans: Sequence[Span], max_words: int = PASSAGE_WORDS
                  ) -> list[tuple[int, int]]:
    """``(first, last)`` indices of the runs of spans that make whole sentences: a run ends
    with a span whose text ends a sentence (not after a title, "Mr."), or before a span that
    would take it past ``max_words`` (text without punctuation: a list of numbers, a
    transcript Whisper did not punctuate). A Whisper segment may stop mid-sentence ("... much
    there might be prudently in his power" / "to do for them."); the sentence is what a
    reader needs."""
    out: list[tuple[int, int]] = []
    start, words = None, 0
    for i, s in enumerate(spans):
        n = len(s.text.split())
        if start is not None and words + n > max_words:
            out.append((start, i - 1))
            start = None
        if start is None:
            start, words = i, 0
        words += n
        last = (s.text.split() or [""])[-1].rstrip("\"')\u201d\u2019")
        if last and last[-1] in SENTENCE_ENDS and not TITLE_END.search(last):
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(spans) - 1))
    return out


def passage_runs(spans: Sequence[Span], sentences: int = PASSAGE_SENTENCES,
                 max_words: int = PASSAGE_WORDS,
                 runs: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """Sentence-aligned passages, ``(first, last)`` span indices: from each sentence (the
    ``runs`` of :func:`sentence_runs`, made here if not given), it and up to
    ``sentences - 1`` that follow while the passage stays within ``max_words``."""
    runs = sentence_runs(spans, max_words) if runs is None else runs
    words = [0]  # words before each span
    for s in spans:
        words.append(words[-1] + len(s.text.split()))
    out: list[tuple[int, int]] = []
    for k, (a, b) in enumerate(runs):
        for _, b2 in runs[k + 1:k + sentences]:
            if words[b2 + 1] - words[a] > max_words:
                break
            b = b2
        if (a, b) not in out:
            out.append((a, b))
    return out


def rank_passages(spans: Sequence[Span], question: str,
                  sentences: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """The sentence-aligned passages (:func:`passage_runs`) that share a content word with
    the question, best first (BM25 over the passages, IDF from them; the earliest on a tie).
    A sentence whose answer is in the next one ("... after the garlic." / "Then add the
    tomatoes.") or whose subject is in the previous one is found with it; a fragment of a
    segment no longer wins by its shortness. ``sentences``: the spans' sentence runs, where
    the caller has them."""
    runs = passage_runs(spans, runs=sentences)
    docs = [Counter(w for i in range(a, b + 1) for w in _span_words(spans[i].text))
            for a, b in runs]
    scores = bm25(docs, set(content_words(without_answer_type(question))))
    order = sorted(range(len(runs)), key=lambda k: (-scores[k], k))
    return [runs[k] for k in order if scores[k] > 0]


@lru_cache(maxsize=8192)
def _span_words(text: str) -> tuple[str, ...]:
    # (a follow-up question ranks the same spans again: their words are read once)
    return tuple(content_words(text))


def passage(spans: Sequence[Span], run: tuple[int, int]) -> Evidence:
    """The spans ``run`` (first, last) as one passage of evidence (a run of one span: that
    span, as it is)."""
    a, b = run
    if a == b:
        return spans[a]
    talk: dict[str, float] = {}  # a diarized transcript: who speaks how long in it
    for s in spans[a:b + 1]:
        if s.speaker is not None:
            talk[s.speaker] = talk.get(s.speaker, 0.0) + max(0.0, s.end - s.start)
    return Evidence(spans[a].start, spans[b].end,
                    " ".join(spans[i].text.strip() for i in range(a, b + 1)),
                    max(talk, key=talk.get) if talk else None)


def drop_lowest(keep: list[int], spans: Sequence[Span], question: str) -> list[int]:
    """``keep`` without its span that shares the fewest words with the question (the latest
    on a tie): how a selection that tokenized a little too long is shrunk."""
    q = set(content_words(question))
    worst = min(keep, key=lambda i: (len(q & set(content_words(spans[i].text))), -i))
    return [i for i in keep if i != worst]


def evidence(answer: str, spans: Sequence[Span]) -> list[Span]:
    """The transcript spans an answer draws on: the span at a time it names, else the spans
    sharing the most of its content words (none when it shares none)."""
    times = parse_times(answer)
    if times:
        hits = [s for s in spans for t in times if format_time(s.start) == format_time(t)
                or s.start - 0.5 <= t <= s.end]
        if hits:
            return list(dict.fromkeys(hits))
    words = set(content_words(answer))
    if not words:
        return []
    scored = [(len(words & set(content_words(s.text))), s) for s in spans]
    best = max((n for n, _ in scored), default=0)
    return [s for n, s in scored if n == best] if best else []


_QUOTED = re.compile(r"[\"“‘']([^\"”’']{2,}?)[\"”’'](?=[\s?.!,;:]|$)")


def quoted(question: str) -> list[str]:
    """The phrases a question quotes (``'fail better'``, “…”): words the speaker said."""
    return [m.strip() for m in _QUOTED.findall(" " + question) if m.strip()]


# A noun that names the kind of answer asked for ("In what *year* did she die?", "On which
# *day* ...", "At what *age* ..."): the sentence that answers rarely says it ("She died in
# 1961."), and a sentence that does ("For nine *years* she tested ...") is no nearer the
# answer for it; so it is no word to find the answer's place by.
_ANSWER_TYPE = re.compile(r"\b((?:what|which)\s+)(?:years?|days?|dates?|months?|times?|hours?|"
                          r"ages?|seasons?|centur(?:y|ies)|decades?)(?![-\w])\s*"
                          r"(?=(?:did|does|do|is|was|were|are|will|would|could|should|can|"
                          r"has|had|have|of|in|on|at|must|might|may)\b|\W*$)", re.I)


def without_answer_type(question: str) -> str:
    """The question without the noun of its wh-phrase that names the answer's kind
    (:data:`_ANSWER_TYPE`): "In what year did she die?" → "In what did she die?"."""
    return _ANSWER_TYPE.sub(r"\1", question)


def rank_spans(spans: Sequence[Span], question: str) -> list[tuple[float, int]]:
    """``(score, index)`` of every span for a question, best first (the earliest on a tie).

    BM25 of the question's content words (not the noun that names the answer's kind,
    :func:`without_answer_type`) over single spans; a phrase the question quotes adds
    the score of its words again when the span holds the phrase (so the span that *says* the
    quoted words wins over one that only shares some of them)."""
    docs = [Counter(content_words(s.text)) for s in spans]
    scores = bm25(docs, set(content_words(without_answer_type(question))))
    for phrase in quoted(question):
        want = _WORD.findall(phrase.lower())
        if not want:
            continue
        bonus = max(1.0, sum(bm25(docs, set(content_words(phrase))) or [0.0]) / max(1, len(docs)))
        for i, s in enumerate(spans):
            have = _WORD.findall(s.text.lower())
            if any(have[j:j + len(want)] == want for j in range(len(have) - len(want) + 1)):
                scores[i] += 2.0 * bonus
    return sorted(((sc, i) for i, sc in enumerate(scores)), key=lambda x: (-x[0], x[1]))


# (not after a title: "Mr. Price was angry" is one sentence)
_SENTENCE_END = re.compile(SENTENCE_BREAK)


def best_sentence(spans: Sequence[Span], question: str) -> str | None:
    """The sentence of the transcript that says the question's words most (:func:`rank_spans`
    over sentences, not segments: a Whisper segment may hold several, and one sentence's
    "because" is not another's), or None when none shares a word with it."""
    text = " ".join(s.text.strip() for s in spans)
    sentences = [Span(0.0, 0.0, t) for t in _SENTENCE_END.split(text) if t.strip()]
    ranked = rank_spans(sentences, question)
    if not ranked or ranked[0][0] <= 0:
        return None
    return sentences[ranked[0][1]].text


def within(answer: str, sentence: str) -> bool:
    """Whether the words of ``answer`` are said, in a row, in ``sentence`` (case and
    punctuation aside)."""
    a, s = _WORD.findall(answer.lower()), _WORD.findall(sentence.lower())
    return bool(a) and any(s[i:i + len(a)] == a for i in range(len(s) - len(a) + 1))


def focus(spans: Sequence[Span], question: str, after: int = 1) -> list[int]:
    """Indices (in time order) of the span most related to the question and the ``after``
    spans that follow it (a reply, the rest of a sentence); [] when no span shares a word."""
    ranked = rank_spans(spans, question)
    if not ranked or ranked[0][0] <= 0:
        return []
    best = ranked[0][1]
    return list(range(best, min(len(spans), best + 1 + after)))


def grounded(answer: str, spans: Sequence[Span], question: str = "") -> bool:
    """Whether an answer is held to the transcript: each of its content words (and numbers)
    occurs in the transcript or the question. An answer with no content word (``No.``) is."""
    have = set()
    for s in spans:
        have.update(content_words(s.text))
    have.update(content_words(question))
    words = [w for w in content_words(answer) if w != "not"]  # (a reply "No." stands)
    return all(w in have for w in words)
