"""Which words of a growing utterance are settled: the agreement policy of live dictation.

The growing utterance is decoded again and again; each decode (a *hypothesis*) may change its
last words, because the audio ended inside a word or the next words change the punctuation.
Showing every hypothesis as it comes makes words flicker. **LocalAgreement-n** (Macháček et
al., 2023, *Turning Whisper into Real-Time Transcription System*) commits a word only once the
last ``n`` hypotheses agree on it and on everything before it; committed words are never
withdrawn. The utterance's final decode (its audio is complete) commits whatever is left.

Because committed words are never withdrawn, a later hypothesis that disagrees with them is
*aligned* to them (a word-level diff on normalised words) and only its part after them counts.
This is where live text can differ from a one-shot transcription of the same audio: rarely,
and by a word, which the tests bound.
"""

from __future__ import annotations

import difflib
import re
from collections import deque

_STRIP = re.compile(r"[^\w']+")


def words(text: str) -> list[str]:
    return text.split()


def _norm(word: str) -> str:
    return _STRIP.sub("", word.lower())


def tail_after(committed: list[str], hypothesis: list[str]) -> list[str]:
    """The part of ``hypothesis`` that comes after the ``committed`` words.

    Normally the hypothesis starts with them. When Whisper changed its mind about a committed
    word (or merged or split words), the normalised word sequences are aligned and the tail
    starts after the last committed word that the hypothesis also has, and after the
    hypothesis words that stand for the committed words after it: a word spelt alike ("light"
    → "like", a cut "noises" → "noisiest") was changed and is skipped; an unlike one is new
    (the committed "for good or for" against "for good or evil in": the hypothesis dropped the
    second "for", and "evil" is what comes after it, not a word to skip).
    """
    n = len(committed)
    if hypothesis[:n] == committed:
        return hypothesis[n:]
    a = [_norm(w) for w in committed]
    b = [_norm(w) for w in hypothesis]
    if b[:n] == a:
        return hypothesis[n:]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    blocks = [m for m in sm.get_matching_blocks() if m.size]
    if not blocks:
        return hypothesis[min(n, len(hypothesis)):]
    last = blocks[-1]
    j = last.b + last.size
    for word in a[last.a + last.size:]:  # committed words after the last match
        if j < len(b) and _alike(word, b[j]):
            # Changed (or cut, or merged): its new spelling is not new text; nor are the next
            # words where the hypothesis split it ("illdisposed" → "ill", "disposed").
            joined, j = b[j], j + 1
            while j < len(b) and b[j] and word.startswith(joined + b[j]):
                joined, j = joined + b[j], j + 1
    return hypothesis[min(j, len(hypothesis)):]


def _alike(committed: str, heard: str) -> bool:
    """Whether ``heard`` is ``committed`` spelt again: one begins the other (a word cut at the
    audio's end, two words merged or split), they begin alike ("light" → "like"), or most of
    their letters agree ("compassion" → "comparison")."""
    if not committed or not heard:
        return not committed and not heard
    if committed.startswith(heard) or heard.startswith(committed):
        return True
    if len(committed) > 2 and len(heard) > 2 and committed[:2] == heard[:2]:
        return True
    return difflib.SequenceMatcher(None, committed, heard, autojunk=False).ratio() >= 0.5


def common_prefix(seqs: list[list[str]]) -> list[str]:
    if not seqs:
        return []
    out = []
    for column in zip(*seqs):
        if any(w != column[0] for w in column[1:]):
            break
        out.append(column[0])
    return out


class LocalAgreement:
    """LocalAgreement-``n`` over one utterance's hypotheses.

    ``n`` = 2 is the published policy (two consecutive hypotheses agree); larger ``n`` commits
    later and more surely. ``n`` = 1 commits every hypothesis at once (no stabilisation).
    """

    def __init__(self, n: int = 2) -> None:
        if n < 1:
            raise ValueError("agreement needs at least one hypothesis")
        self.n = n
        self.committed: list[str] = []
        self._tails: deque[list[str]] = deque(maxlen=n)
        self.tentative: list[str] = []

    def update(self, hypothesis: str, final: bool = False) -> list[str]:
        """Take a new hypothesis; returns the words it newly commits."""
        tail = tail_after(self.committed, words(hypothesis))
        if final:
            self.committed.extend(tail)
            self.tentative = []
            self._tails.clear()
            return tail
        # Every kept tail starts right after the committed words (they are trimmed on commit).
        self._tails.append(tail)
        new: list[str] = []
        if len(self._tails) == self.n:
            new = common_prefix(list(self._tails))
            if new:
                self.committed.extend(new)
                self._tails = deque([t[len(new):] for t in self._tails], maxlen=self.n)
        self.tentative = self._tails[-1] if self._tails else []
        return new

    @property
    def committed_text(self) -> str:
        return " ".join(self.committed)

    @property
    def tentative_text(self) -> str:
        return " ".join(self.tentative)
