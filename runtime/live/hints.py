"""The previous decode of the same utterance, offered as candidates to the next one.

The growing utterance is decoded again every ~0.6 s, and its final decode follows its last
growing one: each decode mostly repeats the one before (same audio from the same start, so the
same words and even the same timestamps), and differs only at its end. Started from nothing,
each re-decode costs one target pass per token; with the previous decode offered as candidates
(found by an n-gram look-up of what the target has committed, like ``ask``'s prompt look-up)
the repeated prefix costs a pass or two, and only the new words cost a pass each.

:class:`HintedStrategy` wraps the run's decoder (target-only, SD or AS²D) and gives every window
a :class:`PreviousDecodeSource` that proposes from the previous decode first and falls back to
the decoder's own source (the AS²D drafter's stream) where the previous decode has nothing to
say. Candidates only change how many passes a decode takes: the verification kernel alone
decides what is committed, so the text is the same with or without hints (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.lookup import Lookup
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.strategy import DecodeStrategy, Window


class PreviousDecodeSource(CandidateSource):
    """Candidates copied from ``previous`` (the tokens of the last decode), else ``inner``'s.

    ``on_finish`` receives the tokens this decode committed (the next decode's hint).
    """

    name = "previous-decode"

    def __init__(self, previous: Sequence[int] | None, inner: CandidateSource, on_finish,
                 k_max: int = 16, min_ngram: int = 2, min_run: int = 3) -> None:
        self.lookup = Lookup("previous", previous or ())
        self.inner = inner
        self.on_finish = on_finish
        self.k_max = k_max
        self.min_ngram = min_ngram
        self.min_run = min_run
        self._pos: int | None = None  # where the last offer started in the previous decode
        self.offered = 0  # candidates offered from the previous decode
        self.accepted = 0

    def _where(self, context: Sequence[int]) -> int | None:
        ids = self.lookup.ids
        if not ids:
            return None
        if not context:
            return 0  # a decode of the same utterance starts like the last one
        cur = self.lookup.cursor
        # Still copying: the last pass accepted everything up to the target's own token.
        if cur is not None and 0 < cur <= len(ids) and ids[cur - 1] == context[-1]:
            return cur if cur < len(ids) else None
        n, pos = self.lookup.match(context, self.min_ngram)
        return pos if n else None

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        self._pos = None
        pos = self._where(context)
        cands = self.lookup.ids[pos:pos + min(room, self.k_max)] if pos is not None else []
        if len(cands) >= self.min_run:
            self._pos = pos
            return list(cands)
        # The previous decode's last tokens (its audio ended there: a cut word, a full stop,
        # a closing timestamp) are its least reliable: the drafter's guess goes first there.
        inner = self.inner.propose(context, room)
        if inner or not cands:
            return inner
        self._pos = pos
        return list(cands)

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        if self._pos is not None and offered:
            self.offered += verdict.offered
            self.accepted += verdict.accepted
            self.lookup.advance(self._pos, verdict.accepted, verdict.own)
        # The inner source follows every commit (the AS²D aligner keeps its place in the
        # drafter's stream), whoever proposed.
        self.inner.observe(offered, verdict)

    def pass_threads(self, offered: Sequence[int]) -> int | None:
        return self.inner.pass_threads(offered)

    def finish(self, context: Sequence[int]) -> None:
        try:
            self.inner.finish(context)
        finally:
            self.on_finish(list(context), self.offered, self.accepted)


class HintedStrategy(DecodeStrategy):
    """``inner`` with the previous decode of the same utterance offered first.

    The live session sets :attr:`previous` before each decode (None: no hint, e.g. a new
    utterance or several utterances decoded together) and reads :attr:`last` after it.
    """

    def __init__(self, inner: DecodeStrategy) -> None:
        super().__init__(inner.target, inner.emit)
        self.inner = inner
        self.name = inner.name
        self.drafter_name = inner.drafter_name
        self.previous: list[int] | None = None
        self.last: list[int] | None = None  # tokens committed by the last window decoded
        self.offered = 0  # hint candidates offered / accepted, over the session
        self.accepted = 0

    def threads(self) -> dict:
        return self.inner.threads()

    def start_early(self, mel, language, options) -> None:
        self.inner.start_early(mel, language, options)

    def begin(self, mel, language, options) -> None:
        super().begin(mel, language, options)
        self.inner.begin(mel, language, options)

    def source(self, window: Window) -> CandidateSource:
        inner = self.inner.source(window)
        return PreviousDecodeSource(self.previous if window.index == 0 else None, inner,
                                    self._finished)

    def _finished(self, tokens: list[int], offered: int, accepted: int) -> None:
        self.last = tokens
        self.offered += offered
        self.accepted += accepted

    def end(self) -> None:
        self.inner.end()

    def close(self) -> None:
        self.inner.close()
