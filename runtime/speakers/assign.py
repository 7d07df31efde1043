"""Speakers onto a transcript: each word gets the speaker talking over most of its span, and a
segment is split where the speaker changes, without changing a token or a word's text.

A split segment's pieces keep the segment's ``seek``, decoding scores and temperature; each
piece's ``tokens`` are its words' tokens (the pieces' tokens joined are the segment's, in
order), its ``text`` its words' text joined, its times its first and last word's. When the words
do not carry their tokens (a transcript read back from JSON), or they do not add up to the
segment's, the segment is kept whole and given the speaker of most of its words: the text is
never cut where its tokens cannot follow.
"""

from __future__ import annotations

import bisect
from dataclasses import replace

from as2d.runtime.speakers.diarize import Turn


def speaker_at(turns: list[Turn], start: float, end: float) -> str | None:
    """The speaker talking over most of ``start``..``end``; for a span no turn overlaps (a
    word in a pause), the speaker of the nearest turn within 1 s, else None."""
    if not turns:
        return None
    best, best_overlap = None, 0.0
    starts = [t.start for t in turns]
    # turns are sorted by start; only those starting before `end` can overlap
    for t in turns[:bisect.bisect_left(starts, end)]:
        overlap = min(end, t.end) - max(start, t.start)
        if overlap > best_overlap:
            best, best_overlap = t.speaker, overlap
    if best is not None:
        return best
    mid = (start + end) / 2
    near = min(turns, key=lambda t: max(t.start - mid, mid - t.end, 0.0))
    if max(near.start - mid, mid - near.end) <= 1.0:
        return near.speaker
    return None


def assign_speakers(segments: list, turns: list[Turn]) -> list:
    """Copies of ``segments`` with ``speaker`` set on each segment and word, split where the
    speaker changes between words (segment ids renumbered in order)."""
    out = []
    for seg in segments:
        words = getattr(seg, "words", None)
        if not words:
            out.append(replace(seg, speaker=speaker_at(turns, seg.start, seg.end)))
            continue
        words = [replace(w, speaker=speaker_at(turns, w.start, w.end)) for w in words]
        _fill_gaps(words)
        pieces = _runs(words)
        at = _tokens_at(seg, words)
        if len(pieces) == 1 or at is None:
            out.append(replace(seg, words=words, speaker=_most(words)))
            continue
        # Tokens before the first word / after the last (timestamps) stay at the ends.
        head, tail = list(seg.tokens[:at[0]]), list(seg.tokens[at[1]:])
        for n, run in enumerate(pieces):
            tokens = [t for w in run for t in w.tokens]
            tokens = (head if n == 0 else []) + tokens + (tail if n == len(pieces) - 1 else [])
            out.append(replace(seg, start=run[0].start, end=run[-1].end,
                               text="".join(w.word for w in run), tokens=tokens,
                               words=run, speaker=run[0].speaker))
    for i, seg in enumerate(out):
        seg.id = i
    return out


def _fill_gaps(words) -> None:
    """A word no turn covers takes its neighbour's speaker (the one before, else after)."""
    last = None
    for w in words:
        if w.speaker is None:
            w.speaker = last
        last = w.speaker
    for w in reversed(words):
        if w.speaker is None:
            w.speaker = last
        last = w.speaker


def _runs(words) -> list[list]:
    runs: list[list] = []
    for w in words:
        if runs and runs[-1][-1].speaker == w.speaker:
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs


def _tokens_at(seg, words) -> tuple[int, int] | None:
    """Where the words' tokens lie in the segment's (``tokens[a:b]``), or None when the words
    do not carry them or they and their text are not exactly the segment's."""
    toks = [t for w in words for t in (getattr(w, "tokens", None) or [])]
    if not toks or "".join(w.word for w in words) != seg.text:
        return None
    all_tokens = list(seg.tokens)
    for a in range(len(all_tokens) - len(toks) + 1):
        if all_tokens[a:a + len(toks)] == toks:
            return a, a + len(toks)
    return None


def _most(words) -> str | None:
    time: dict[str | None, float] = {}
    for w in words:
        time[w.speaker] = time.get(w.speaker, 0.0) + max(w.end - w.start, 0.01)
    return max(time, key=time.get) if time else None


def label_transcript(segments: list, diarization) -> tuple[list, dict]:
    """Speakers onto a transcript (same tokens) and the document's speaker fields, the same
    for every face: ``speakers`` (each one's total speaking time, in order of first speech)
    and ``speaker_turns`` (the turns, overlaps kept: -f rttm's lines)."""
    doc = {"speakers": diarization.to_dict()["speakers"],
           "speaker_turns": [t.to_dict() for t in diarization.turns]}
    return assign_speakers(segments, diarization.turns), doc
