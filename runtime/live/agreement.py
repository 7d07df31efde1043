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
    # A curly apostrophe is a straight one; one that opens or closes the word is a quote mark.
    return _STRIP.sub("", word.lower().replace("\u2019", "'")).strip("'")


def _tokens(words_: list[str]) -> tuple[list[str], list[int]]:
    """Normalised tokens of ``words_`` (an English contraction is the two words it contracts:
    "don't" → "do", "not") and, for each token, the index of its word."""
    tokens: list[str] = []
    owner: list[int] = []
    for k, w in enumerate(words_):
        n = _norm(w)
        parts = _expansion(n) or (n,)
        tokens.extend(parts)
        owner.extend([k] * len(parts))
    return tokens, owner


def tail_after(committed: list[str], hypothesis: list[str]) -> list[str]:
    """The part of ``hypothesis`` that comes after the ``committed`` words.

    Normally the hypothesis starts with them. When Whisper changed its mind about a committed
    word (or merged or split words), the normalised word sequences are aligned, and from the
    last word both have the committed words after it are walked against the hypothesis (see
    :func:`_walk`): a word spelt again, merged or split, or replaced by another ("ten" →
    "10", "a" → "the") stands for its committed word; only a committed word that repeats one
    just before it, where the hypothesis has an unlike content word, counts as dropped by the
    re-decode (a settle committed "for good or for", the next decode heard "for good or evil
    in": "evil" is new text, not the second "for"; but "the end of the" → "the end of a long"
    replaced "the" with "a"). Function words are English ones: in other languages such a swap
    reads as a drop. An English contraction is aligned as the two words it contracts, either
    way ("do not" → "don't", "it's" → "it is"); where the committed words end inside one
    ("I do" → "I don't know"), the tail starts with its second word ("not know").
    """
    n = len(committed)
    if hypothesis[:n] == committed:
        return hypothesis[n:]
    a, _ = _tokens(committed)
    b, owner = _tokens(hypothesis)
    if b[:len(a)] == a:
        j = len(a)
    else:
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        blocks = [m for m in sm.get_matching_blocks() if m.size]
        i, j = (blocks[-1].a + blocks[-1].size, blocks[-1].b + blocks[-1].size) if blocks \
            else (0, 0)
        j = _walk(a, b, i, j)
    if j >= len(b):
        return []
    k = owner[j]
    if j > 0 and owner[j - 1] == k:  # inside a contraction: its second word is new text,
        trailing = hypothesis[k][len(hypothesis[k].rstrip(_PUNCT)):]  # with its punctuation
        return [b[j] + trailing] + hypothesis[k + 1:]
    return hypothesis[k:]


def _walk(a: list[str], b: list[str], i: int, j: int) -> int:
    """Where the hypothesis ``b`` goes on past the committed words ``a[i:]``, from ``b[j]``."""
    while i < len(a) and j < len(b):
        word, heard = a[i], b[j]
        if _alike(word, heard):
            i, j = i + 1, j + 1
            joined = heard  # the hypothesis split the word ("illdisposed" → "ill", "disposed")
            while j < len(b) and b[j] and word.startswith(joined + b[j]):
                joined, j = joined + b[j], j + 1
            joined = word  # ... or merged it with the next ("in", "to" → "into")
            while i < len(a) and a[i] and heard.startswith(joined + a[i]):
                joined, i = joined + a[i], i + 1
        elif word and word in a[max(0, i - 3):i] and _content(heard):
            i += 1  # a repeated word the re-decode dropped: nothing in it stands for it
        else:
            i, j = i + 1, j + 1  # replaced by another word
    return min(j, len(b))


# Words a re-decode swaps for one another ("the end of the" → "the end of a"): where the heard
# word is one of these (or a number), an unlike committed word was replaced, not dropped.
_FUNCTION = frozenset("""a an the this that these those some any each every no
i me my we us our you your he him his she her it its they them their one
of to in on at for from by with about into onto as than
and or but nor so if then when while because
is are was were be been am do does did have has had will would can could shall should may might
must not""".split())


# English contractions (normalised, apostrophe kept) and the two words each is aligned as. A
# re-decode often writes a contraction out or contracts two words, and a contraction's letters
# neither equal its first word ("i'd" / "i": the alignment would anchor on a later "I") nor
# begin its second ("don't" / "not"). Where a suffix is ambiguous the commonest reading is
# taken ("'s" → "is", "'d" → "would"): "it has" against "it's" then aligns as a replaced word,
# which stands for its committed word all the same.
_IRREGULAR = {"won't": ("will", "not"), "can't": ("can", "not"), "shan't": ("shall", "not"),
              "ain't": ("am", "not")}
_SUFFIXES = (("n't", "not"), ("'re", "are"), ("'m", "am"), ("'ve", "have"), ("'ll", "will"),
             ("'d", "would"), ("'s", "is"))
_PUNCT = ".,;:!?\"')]}\u2019\u201d"  # what may close a written word


def _expansion(word: str) -> tuple[str, str] | None:
    """The two words a normalised contraction is aligned as (None for other words)."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    for suffix, full in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix):
            return word[:-len(suffix)], full
    return None


def _content(word: str) -> bool:
    """Whether ``word`` (normalised) is a content word: no English function word, no number."""
    return bool(word) and word not in _FUNCTION and not any(c.isdigit() for c in word)


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
