"""The previous decode of the same utterance, offered as candidates to the next one.

The growing utterance is decoded again every ~0.6 s, and its final decode follows its last
growing one: each decode mostly repeats the one before (same audio from the same start, so the
same words and even the same timestamps), and differs only at its end. Started from nothing,
each re-decode costs one target pass per token; with the previous decode offered as candidates
(found by an n-gram look-up of what the target has committed, like ``ask``'s prompt look-up)
the repeated prefix costs a pass or two, and only the new words cost a pass each.

:class:`HintedStrategy` wraps the run's decoder (target-only, SD or AS²D) and gives every window
a :class:`PreviousDecodeSource` that proposes from the previous decode first and falls back to
the decoder's own source where the previous decode has nothing to say. A decode that has a
previous decode to copy runs without a drafter beside it (measured no slower, and it spares a
core; see the class), so the AS²D drafter drafts an utterance's first decode. Candidates only
change how many passes a decode takes: the verification kernel alone decides what is
committed, so the text is the same with or without hints (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

from as2d.runtime.events import Listener
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.lookup import Lookup
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.strategy import DecodeStrategy, TargetOnly, Window


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

    def finish(self, context: Sequence[int]) -> None:
        try:
            self.inner.finish(context)
        finally:
            self.on_finish(list(context), self.offered, self.accepted)


class HintedStrategy(DecodeStrategy):
    """``inner`` with the previous decode of the same utterance offered first.

    The live session sets :attr:`previous` before each decode (None: no hint, e.g. a new
    utterance or several utterances decoded together) and reads :attr:`last` after it.

    A decode that has a hint runs with the target alone (:attr:`current`), unless
    ``drafter_with_hints``: the previous decode already covers all but the last ~0.6 s of the
    utterance, and a drafter beside it (its own encoder run and decoding of the whole
    utterance, on one core of two) costs more than its candidates for that tail save.
    Measured on a 2-core AMD EPYC Zen 4 (``scripts/mic_latency.py --speed 1``, the three
    configurations interleaved): end of speech to committed text, median / p90, 0.58 / 0.67 s
    without the drafter beside hinted decodes against 0.66 / 0.79 s with it on the default 7
    clips, 0.61 / 0.74 against 0.61 / 0.72 s on the 8 ``--set eval`` clips (short utterances
    with no hint, which are drafted either way), and 9–16 % fewer encoder seconds.
    A decode with no hint (an utterance's first) still gets ``inner``'s drafter. The text is
    the same either way: the verification kernel alone decides it.
    """

    def __init__(self, inner: DecodeStrategy, drafter_with_hints: bool = False) -> None:
        super().__init__(inner.target, inner.emit)
        self.inner = inner
        self.alone = inner if type(inner) is TargetOnly else TargetOnly(inner.target, inner.emit)
        self.drafter_with_hints = drafter_with_hints
        self.previous: list[int] | None = None
        self.last: list[int] | None = None  # tokens committed by the last window decoded
        self.offered = 0  # hint candidates offered / accepted, over the session
        self.accepted = 0
        self._running: DecodeStrategy | None = None  # the decoder of the run going on

    @property
    def current(self) -> DecodeStrategy:
        """The decoder of the run about to start (or going on): ``inner``, or the target alone
        when there is a hint (see the class docstring)."""
        if self._running is not None:
            return self._running
        if self.previous is not None and not self.drafter_with_hints:
            return self.alone
        return self.inner

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.current.name

    @property
    def drafter_name(self) -> str | None:  # type: ignore[override]
        return self.current.drafter_name

    @property
    def streams(self) -> bool:  # type: ignore[override]
        return self.current.streams

    @property
    def verifies_samples(self) -> bool:  # type: ignore[override]
        return self.current.verifies_samples

    def threads(self) -> dict:
        return self.current.threads()

    def add_listener(self, listener: Listener) -> None:
        super().add_listener(listener)
        self.inner.add_listener(listener)
        if self.alone is not self.inner:
            self.alone.add_listener(listener)

    def candidate_stream(self):
        return self.current.candidate_stream()

    def drafted_tokens(self) -> list[int]:
        return self.current.drafted_tokens()

    def start_early(self, mel, language, options) -> None:
        self._running = self.current
        self._running.start_early(mel, language, options)

    def begin(self, mel, language, options) -> None:
        super().begin(mel, language, options)
        self._running = self.current
        self._running.begin(mel, language, options)

    def prefetch(self, mel, language, options) -> None:
        self.inner.prefetch(mel, language, options)

    def target_encoding(self, mel, window: Window):
        return self.current.target_encoding(mel, window)

    def source(self, window: Window) -> CandidateSource:
        inner = self.current.source(window)
        return PreviousDecodeSource(self.previous if window.index == 0 else None, inner,
                                    self._finished)

    def _finished(self, tokens: list[int], offered: int, accepted: int) -> None:
        self.last = tokens
        self.offered += offered
        self.accepted += accepted

    def end(self) -> None:
        try:
            self.current.end()
        finally:
            self._running = None

    def close(self) -> None:
        self._running = None
        try:
            self.inner.close()
        finally:
            if self.alone is not self.inner:
                self.alone.close()
