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

from as2d.runtime.ask.spans import Span, format_time, parse_times

_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me
more most my myself no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will
with would you your yours say says said speaker recording audio transcript mention mentioned
tell told talk talking
""".split())

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}


def content_words(text: str) -> list[str]:
    """Lower-cased words without stop words, lightly stemmed (plural and -ing/-ed endings), so
    that "fetched" in a question meets "fetch" in the transcript; numbers as digits (Whisper
    writes "8 of spades" where a question says "the eight")."""
    out = []
    for w in _WORD.findall(text.lower()):
        w = w.split("'")[0]
        if w in _STOPWORDS or not w:
            continue
        out.append(NUMBER_WORDS.get(w) or _stem(w))
    return out


def _stem(w: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
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


def rank_spans(spans: Sequence[Span], question: str) -> list[tuple[float, int]]:
    """``(score, index)`` of every span for a question, best first (the earliest on a tie).

    BM25 of the question's content words over single spans; a phrase the question quotes adds
    the score of its words again when the span holds the phrase (so the span that *says* the
    quoted words wins over one that only shares some of them)."""
    docs = [Counter(content_words(s.text)) for s in spans]
    scores = bm25(docs, set(content_words(question)))
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
    words = content_words(answer)
    return all(w in have for w in words)
