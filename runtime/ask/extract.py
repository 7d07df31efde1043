"""Extractive answering: the answer is a span of the transcript, chosen by the model.

A 270M base model wanders: it counts with numbers nobody said, names people who are not in the
recording, answers "what did she say?" with a question. So the answer is *decoded under a
constraint*: at every position the model's greedy choice is taken only among the tokens that
keep the answer a contiguous run of transcript words (starting at a word), or that end it at a
word boundary (a line break or end of text, or a full stop first). The model still chooses
which span, where it starts and where it stops — the transcript only limits what it may write.

The rule is a pure function of the answer's tokens so far (:meth:`SpanConstraint.choose`), so
it is applied identically by plain greedy decoding and inside the verification kernel: the
speculative answer stays token-identical to the constrained target-only one. Most constrained
answers are copies of transcript runs, which is exactly what the n-gram look-up proposes, so
acceptance rises too.

Questions about the recording's *clock* ("at what point of the recording ...") are answered
with ``At m:ss.`` where ``m:ss`` is the start of a transcript line (the only such answers the
constraint allows); every other question — "when" about the content included — from the words.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from as2d.runtime.ask.passages import content_words
from as2d.runtime.ask.spans import Span, format_time

# -- what a question asks for ------------------------------------------------------------------

# Explicitly about the recording's clock (a time *in the audio*), not about the content.
_CLOCK = re.compile(
    r"\b(?:at what|what|which)\s+(?:point|time|moment|minute|second|timestamp)s?\b[^?]*"
    r"\b(?:recording|audio|clip|tape|file|track|video)\b"
    r"|\bhow (?:far|long|many (?:minutes|seconds)) into\b"
    r"|\btimestamp\b"
    r"|\bwhen\b[^?]*\b(?:in|of|into) the (?:recording|audio|clip|tape|file|track|video)\b"
    r"|\b(?:which|what) (?:minute|second)\b", re.I)

TYPES = ("clock", "number", "when", "person", "place", "reason", "quote", "phrase")
_TYPE_RULES = (
    ("number", re.compile(r"\bhow (?:many|much|long|far|old|often|big|tall|fast|heavy|hot)\b|"
                          r"\b(?:what|which) (?:number|percentage|age|temperature|price|"
                          r"amount|score)\b|\bto what temperature\b|\bfor how\b", re.I)),
    ("when", re.compile(r"\bwhen\b|\bwhat (?:time|day|date|month|year|hour)\b|"
                        r"\bwhich (?:day|date|month|year)\b", re.I)),
    ("person", re.compile(r"\bwho(?:m|se)?\b", re.I)),
    ("place", re.compile(r"\bwhere\b", re.I)),
    ("reason", re.compile(r"\bwhy\b", re.I)),
    ("quote", re.compile(r"\bwhat (?:did|does|do|was|is|were)\b.*\b(?:say|said|says|sing|sang|"
                         r"sings|ask|asks|asked|reply|replied|shout|shouted|tell|told|read)\b"
                         r"|\bwhat is the reply\b|\bwhat was the reply\b|\bwhat comes after\b",
                         re.I)),
)


def asks_about_recording_time(question: str) -> bool:
    """Whether the question asks *where in the recording* something is said (answered with a
    recording time); "when" about the content ("when will the bridge close?") is not."""
    return bool(_CLOCK.search(question))


def answer_type(question: str) -> str:
    """What kind of answer a question wants, one of :data:`TYPES` (the prompt shows examples
    of that kind)."""
    if asks_about_recording_time(question):
        return "clock"
    for name, rule in _TYPE_RULES:
        if rule.search(question):
            return name
    return "phrase"


# -- the constraint ----------------------------------------------------------------------------

_PUNCT = frozenset(string.punctuation + "…“”‘’–—")


def _piece_text(piece: str | None) -> str:
    return (piece or "").replace("▁", " ").replace("Ġ", " ")


@dataclass(frozen=True)
class Occurrence:
    doc: int  # which document (0: the transcript; then the time answers)
    start: int  # token index where the answer starts in it
    end: int  # token index after the answer


class SpanConstraint:
    """Allowed answers: a contiguous run of one document's tokens that starts at a word and
    ends at a word boundary, optionally followed by one full stop, then an end token.

    ``docs`` are token sequences (the transcript, and for clock questions the ``At m:ss.``
    answers); ``piece(id)`` gives a token's text, from which word starts and boundaries are
    read; ``ends`` are the tokens that end an answer (the prompt's stop ids); ``marks`` the
    tokens that may close an answer before its end token ("."). ``owner[d][i]`` names the
    transcript span a document token belongs to (for the evidence).
    """

    def __init__(self, docs: Sequence[Sequence[int]], piece, ends: Iterable[int],
                 marks: Iterable[int] = (), owner: Sequence[Sequence[int]] = ()) -> None:
        self.docs = [list(d) for d in docs]
        self.ends = frozenset(int(i) for i in ends)
        self.marks = frozenset(int(i) for i in marks) - self.ends
        self.owner = [list(o) for o in owner]
        cache: dict[int, str] = {}

        def text(t: int) -> str:
            if t not in cache:
                cache[t] = _piece_text(piece(t))
            return cache[t]

        self.word_start: list[list[bool]] = []
        self.boundary: list[list[bool]] = []  # boundary[d][p]: the answer may end before p
        self.first: dict[int, list[tuple[int, int]]] = {}
        for d, doc in enumerate(self.docs):
            starts = [text(t).startswith(" ") for t in doc]
            bound = [starts[p] or (bool(text(doc[p]).strip())
                                   and all(c in _PUNCT or c.isspace() for c in text(doc[p])))
                     or "\n" in text(doc[p]) for p in range(len(doc))] + [True]
            self.word_start.append(starts)
            self.boundary.append(bound)
            for p, t in enumerate(doc):
                if starts[p] and text(t).strip():
                    self.first.setdefault(t, []).append((d, p))
        self._allowed: dict[tuple[int, ...], np.ndarray] = {}

    def occurrences(self, answer: Sequence[int]) -> list[Occurrence]:
        """Where ``answer`` (without end tokens) occurs as an allowed run."""
        if not answer:
            return []
        n = len(answer)
        out = []
        for d, p in self.first.get(answer[0], ()):
            if self.docs[d][p:p + n] == list(answer):
                out.append(Occurrence(d, p, p + n))
        return out

    def allowed(self, answer: Sequence[int]) -> np.ndarray:
        """Sorted token ids that may follow ``answer`` (never empty)."""
        key = tuple(answer)
        hit = self._allowed.get(key)
        if hit is not None:
            return hit
        ids: set[int] = set()
        if not answer:
            ids.update(self.first)
        else:
            occ = self.occurrences(answer)
            for o in occ:
                doc = self.docs[o.doc]
                if o.end < len(doc):
                    ids.add(doc[o.end])
                if self.boundary[o.doc][o.end]:
                    ids |= self.ends | self.marks
            if not occ and answer[-1] in self.marks and self._ends_ok(answer[:-1]):
                ids |= self.ends  # "... span." : only the end may follow
        if not ids:  # cannot happen for answers this rule produced; end rather than fail
            ids = set(self.ends)
        out = np.array(sorted(ids), dtype=np.int64)
        self._allowed[key] = out
        return out

    def _ends_ok(self, answer: Sequence[int]) -> bool:
        return any(self.boundary[o.doc][o.end] for o in self.occurrences(answer))

    def choose(self, row: np.ndarray, answer: Sequence[int]) -> int:
        """The greedy token among those allowed after ``answer`` (lowest id on a tie)."""
        ids = self.allowed(answer)
        return int(ids[int(np.argmax(row[ids]))])

    def rule(self, prompt_length: int):
        """The kernel's ``choose(row, prefix)`` for answers that start after ``prompt_length``
        tokens of context."""
        def choose(row: np.ndarray, prefix: list[int]) -> int:
            return self.choose(row, prefix[prompt_length:])
        return choose

    def source(self, answer: Sequence[int]) -> list[int]:
        """Transcript span indices the answer was copied from (first occurrence)."""
        body = [t for t in answer if t not in self.ends]
        occ = self.occurrences(body) or self.occurrences(body[:-1])
        for o in occ:
            if o.doc < len(self.owner) and self.owner[o.doc]:
                own = self.owner[o.doc]
                return sorted({own[i] for i in range(o.start, o.end) if i < len(own)})
        return []


def build_constraint(spans: Sequence[Span], encode, piece, ends: Iterable[int], marks:
                     Iterable[int], clock: bool) -> SpanConstraint:
    """The constraint of one answer: the transcript's words (each span written ``" " + text``,
    so every word, the first included, is tokenized as it is inside a sentence), or for a
    clock question the ``At m:ss.`` of each span."""
    if clock:
        docs, owner = [], []
        for i, s in enumerate(spans):
            ids = encode(f" At {format_time(s.start)}.")
            docs.append(ids)
            owner.append([i] * len(ids))
        return SpanConstraint(docs, piece, ends, marks, owner)
    doc: list[int] = []
    own: list[int] = []
    for i, s in enumerate(spans):
        ids = encode(" " + " ".join(s.text.split()))
        doc += ids
        own += [i] * len(ids)
    return SpanConstraint([doc], piece, ends, marks, [own])


def supported(answer: str, spans: Sequence[Span]) -> tuple[bool, list[str]]:
    """Whether every content word of ``answer`` occurs in ``spans`` (the passage it was
    drawn from); the missing words."""
    have = {w for s in spans for w in content_words(s.text)}
    missing = [w for w in dict.fromkeys(content_words(answer)) if w not in have]
    return not missing, missing
