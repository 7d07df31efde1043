"""Word-level timestamps, the way openai-whisper finds them.

After a window is committed, its text tokens run once more through the *alignment graph* (the
decoder with one more output: the cross-attention scores of the model's alignment heads). As in
whisper's ``find_alignment``, the scores of the real frames are softmaxed, standardised per
frame, median-filtered along time (width 7) and averaged over the heads, and dynamic time
warping finds a monotonic path through tokens × frames; words are split on spaces (characters
for languages without them), punctuation merged into its neighbour, and whisper's heuristics
trim words that swallow a pause. Only committed tokens are aligned, none changed: the transcript
is the same with or without word timestamps.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from as2d.runtime.whisper.features import FRAMES_PER_SECOND

TOKENS_PER_SECOND = FRAMES_PER_SECOND // 2  # one encoder position per 20 ms
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
# Written without spaces between words: split into characters (whisper's list).
_NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}
_SENTENCE_END = ".。!！?？"


class AlignmentError(Exception):
    """The model cannot give word timestamps (no alignment graph or heads)."""


@dataclass
class Word:
    """One word of a segment: text (with its leading space), times in seconds, probability."""

    word: str
    start: float
    end: float
    probability: float
    # Who says it (set by diarization, as whisperX's words carry it); None: not asked.
    speaker: str | None = None
    # The word's text tokens (not written out): a segment split between speakers keeps its
    # tokens exactly, each piece the tokens of its words.
    tokens: list[int] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict:
        d = {"word": self.word, "start": self.start, "end": self.end,
             "probability": self.probability}
        if self.speaker is not None:
            d["speaker"] = self.speaker
        return d


@dataclass
class _Timing:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


# -- the numerical steps ----------------------------------------------------------------------
def median_filter(x: np.ndarray) -> np.ndarray:
    """Median of each 7 neighbours along the last axis (whisper's filter width), reflect-padded
    at the edges (left as it is when that axis is too short to reflect).

    The seven shifted copies go through the comparators of a sorting network for seven values
    that can reach its middle output (:data:`_MEDIAN_OF_7`): elementwise minima and maxima of
    whole arrays, the same values as a sort, in a third of a partition's time."""
    n = x.shape[-1]
    if n <= 3:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(3, 3)], mode="reflect")
    v = [padded[..., k:k + n] for k in range(7)]
    for i, j, low, high in _MEDIAN_OF_7:
        v[i], v[j] = (np.minimum(v[i], v[j]) if low else v[i],
                      np.maximum(v[i], v[j]) if high else v[j])
    return v[3]


def _median_comparators(network: list[tuple[int, int]], middle: int) -> list[tuple]:
    """The comparators of a sorting ``network`` the ``middle`` output depends on, each as
    ``(i, j, low, high)``: whether its minimum (into ``i``) and maximum (into ``j``) are read."""
    needed, kept = {middle}, []
    for i, j in reversed(network):
        if i in needed or j in needed:
            kept.append((i, j, i in needed, j in needed))
            needed |= {i, j}
    return kept[::-1]


# A sorting network of 16 comparators for seven values (Knuth, TAOCP 5.3.4), pruned to the
# 14 its median reads.
_MEDIAN_OF_7 = _median_comparators(
    [(0, 6), (2, 3), (4, 5), (0, 2), (1, 4), (3, 6), (0, 1), (2, 5), (3, 4), (1, 2), (4, 6),
     (2, 3), (4, 5), (1, 2), (3, 4), (5, 6)], 3)


def dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through cost matrix ``x [N, M]``, as (rows, columns).

    Cells are filled one anti-diagonal at a time (a cell needs only the two diagonals before
    it), each diagonal stored as a row (``cost[d, i]`` is cell ``(i, d - i)``), so every step
    reads slices, not gathered indices; on ties the step that advances the column wins, then
    the row, as in whisper's kernel.
    """
    n, m = x.shape
    cost = np.full((n + m + 1, n + 1), np.inf, np.float32)
    cost[0, 0] = 0
    trace = np.full((n + m + 1, n + 1), 2, np.int8)
    cells = np.full((n + m + 1, n + 1), np.nan)  # cells[i + j, i] = x[i - 1, j - 1]
    i, j = np.meshgrid(np.arange(1, n + 1), np.arange(1, m + 1), indexing="ij")
    cells[i + j, i] = x
    for d in range(2, n + m + 1):
        lo, hi = max(1, d - m), min(n, d - 1)
        c0, c1, c2 = cost[d - 2, lo - 1:hi], cost[d - 1, lo - 1:hi], cost[d - 1, lo:hi + 1]
        diagonal = (c0 < c1) & (c0 < c2)
        down = (c1 < c0) & (c1 < c2)
        cost[d, lo:hi + 1] = cells[d, lo:hi + 1] + np.where(diagonal, c0, np.where(down, c1, c2))
        trace[d, lo:hi + 1] = np.where(diagonal, 0, np.where(down, 1, 2))
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = trace.item(i + j, i) if i > 0 and j > 0 else (1 if j == 0 else 2)
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    out = np.array(path[::-1]).T
    return out[0], out[1]


# -- words ------------------------------------------------------------------------------------
def split_words(tokenizer, tokens: Sequence[int], language: str | None
                ) -> tuple[list[str], list[list[int]]]:
    """``tokens`` (text tokens then end-of-text) grouped into words, with their texts.

    A group closes where its bytes decode to whole characters (a character split across tokens
    stays in one group); for languages written with spaces, groups then join into words that
    start with a space, a special token or punctuation.
    """
    eot = tokenizer.eot

    def text(ids: list[int]) -> str:
        if ids and ids[0] >= eot:
            return "<|endoftext|>" if ids[0] == eot else ""
        return tokenizer.decode_bytes(ids).decode("utf-8", errors="replace")

    full = text([t for t in tokens if t < eot])
    subwords: list[str] = []
    groups: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for t in tokens:
        current.append(t)
        piece = text(current)
        bad = piece.find("\ufffd")
        if bad < 0 or (offset + bad < len(full) and full[offset + bad] == "\ufffd"):
            subwords.append(piece)
            groups.append(current)
            current = []
            offset += len(piece)
    if language in _NO_SPACE_LANGUAGES:
        return subwords, groups
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for sub, ids in zip(subwords, groups):
        special = ids[0] >= eot
        if special or sub.startswith(" ") or sub.strip() in string.punctuation or not words:
            words.append(sub)
            word_tokens.append(list(ids))
        else:
            words[-1] += sub
            word_tokens[-1].extend(ids)
    return words, word_tokens


def merge_punctuations(alignment: list[_Timing], prepended: str, appended: str) -> None:
    """Opening marks join the word after them, closing marks the word before (in place; the
    emptied entries keep their place, with no text and no tokens)."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        prev, nxt = alignment[i], alignment[j]
        if prev.word.startswith(" ") and prev.word.strip() in prepended:
            nxt.word, nxt.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, nxt = alignment[i], alignment[j]
        if not prev.word.endswith(" ") and nxt.word in appended:
            prev.word, prev.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            nxt.word, nxt.tokens = "", []
        else:
            i = j
        j += 1


# -- the aligner ------------------------------------------------------------------------------
class WordAligner:
    """Word timestamps for the segments of one run, window by window, on the model's declared
    alignment graph (:meth:`WhisperModel.alignment_session`). One aligner serves one run: it
    remembers where speech last ended, which whisper's pause heuristics need.
    """

    def __init__(self, model, language: str | None, task: str = "transcribe",
                 prepend: str = PREPEND_PUNCTUATIONS,
                 append: str = APPEND_PUNCTUATIONS) -> None:
        if model.alignment_graph is None or not model.config.get("alignment_heads"):
            raise AlignmentError(f"{model.name} cannot give word timestamps (it has no "
                                 "alignment heads or graph; use a catalog model such as base)")
        self.model = model
        self.language = language  # a multilingual run sets each window's (--multilingual)
        self.task = task
        self.prepend, self.append = prepend, append
        self.last_speech = 0.0
        self.seconds = 0.0  # time spent aligning, for the statistics

    @property
    def sot_sequence(self) -> list[int]:
        """The prompt the window was decoded after, in the language it was decoded in."""
        return self.model.tokenizer.sot_sequence(
            self.language if self.model.multilingual else None, self.task)

    @classmethod
    def for_run(cls, model, language: str | None, options) -> WordAligner:
        """The aligner of one transcription run (``options``: its TranscribeOptions); its
        session is made now, so that a model that cannot align fails before decoding."""
        aligner = cls(model, language, options.task, options.prepend_punctuations,
                      options.append_punctuations)
        model.alignment_session()
        return aligner

    def timings(self, cross: dict[str, np.ndarray], text_tokens: list[int], num_frames: int
                ) -> list[_Timing]:
        """whisper's ``find_alignment``: each word of ``text_tokens`` with its span (seconds
        from the window's start) and its mean token probability."""
        if not text_tokens:
            return []
        tk, dims = self.model.tokenizer, self.model.dims
        sot = self.sot_sequence
        tokens = [*sot, tk.no_timestamps, *text_tokens, tk.eot]
        feed = {k: v for k, v in cross.items()}
        feed["tokens"] = np.asarray(tokens, np.int64)
        empty = np.zeros((0, dims.n_text_state), np.float32)
        for i in range(dims.n_text_layer):
            feed[f"past_k_{i}"] = feed[f"past_v_{i}"] = empty
        logits, qk = self.model.alignment_session().run(["logits", "cross_qk"], feed)

        # In float32, as whisper computes them: on real windows the same paths as float64, in
        # three quarters of the time.
        rows = logits[len(sot):len(sot) + len(text_tokens), : tk.eot]
        rows = rows - rows.max(axis=-1, keepdims=True)
        np.exp(rows, out=rows)
        probs = rows[np.arange(len(text_tokens)), text_tokens] / rows.sum(axis=-1)

        w = qk[:, :, : num_frames // 2]
        w = w - w.max(axis=-1, keepdims=True)
        np.exp(w, out=w)
        w /= w.sum(axis=-1, keepdims=True)
        w = (w - w.mean(axis=-2, keepdims=True)) / w.std(axis=-2, keepdims=True)
        matrix = median_filter(w[:, len(sot):-1]).mean(axis=0)  # rows are filtered alone
        text_idx, time_idx = dtw(-matrix)

        words, word_tokens = split_words(tk, text_tokens + [tk.eot], self.language)
        if len(word_tokens) <= 1:
            return []
        bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
        jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
        jump_times = time_idx[jumps] / TOKENS_PER_SECOND
        starts, ends = jump_times[bounds[:-1]], jump_times[bounds[1:]]
        return [_Timing(word, toks, float(s), float(e), float(np.mean(probs[a:b])))
                for word, toks, s, e, a, b in zip(words, word_tokens, starts, ends,
                                                  bounds[:-1], bounds[1:])]

    def align(self, segments: list, cross: dict[str, np.ndarray], num_frames: int) -> None:
        """Give each of one window's ``segments`` its ``words``, and move its start/end to its
        first/last word (whisper's ``add_word_timestamps``, in place)."""
        if not segments:
            return
        import time

        t0 = time.perf_counter()
        eot = self.model.tokenizer.eot
        per_segment = [[t for t in s.tokens if t < eot] for s in segments]
        alignment = self.timings(cross, [t for ts in per_segment for t in ts], num_frames)
        durations = np.array([t.end - t.start for t in alignment])
        durations = durations[durations.nonzero()]
        median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
        longest = median * 2
        if len(durations):
            # A word at a sentence boundary may not be longer than twice the median word.
            for i in range(1, len(alignment)):
                if alignment[i].end - alignment[i].start > longest:
                    if alignment[i].word in _SENTENCE_END:
                        alignment[i].end = alignment[i].start + longest
                    elif alignment[i - 1].word in _SENTENCE_END:
                        alignment[i].start = alignment[i].end - longest
        merge_punctuations(alignment, self.prepend, self.append)

        offset = segments[0].seek / FRAMES_PER_SECOND
        k = 0
        last_speech = self.last_speech
        for seg, text_tokens in zip(segments, per_segment):
            saved, words = 0, []
            while k < len(alignment) and saved < len(text_tokens):
                t = alignment[k]
                if t.word:
                    words.append(Word(t.word, round(offset + t.start, 2),
                                      round(offset + t.end, 2), t.probability,
                                      tokens=list(t.tokens)))
                saved += len(t.tokens)
                k += 1
            if words:
                _trim_after_pause(words, last_speech, median, longest)
                # Prefer the segment's own start/end when its first/last word is too long.
                if seg.start < words[0].end and seg.start - 0.5 > words[0].start:
                    words[0].start = max(0, min(words[0].end - median, seg.start))
                else:
                    seg.start = words[0].start
                if seg.end > words[-1].start and seg.end + 0.5 < words[-1].end:
                    words[-1].end = max(words[-1].start + median, seg.end)
                else:
                    seg.end = words[-1].end
                last_speech = seg.end
            seg.words = words
        # Where speech last ended: the last word of this window, else its last segment's end.
        ends = [w.end for s in segments for w in s.words]
        self.last_speech = ends[-1] if ends else segments[-1].end
        self.seconds += time.perf_counter() - t0


def _trim_after_pause(words: list[Word], last_speech: float, median: float,
                      longest: float) -> None:
    """The first words after a pause may not be longer than twice the median word."""
    if words[0].end - last_speech > median * 4 and (
            words[0].end - words[0].start > longest
            or (len(words) > 1 and words[1].end - words[0].start > longest * 2)):
        if len(words) > 1 and words[1].end - words[1].start > longest:
            boundary = max(words[1].end / 2, words[1].end - longest)
            words[0].end = words[1].start = boundary
        words[0].start = max(0, words[0].end - longest)
