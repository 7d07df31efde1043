"""One decode of one window, whatever the search: the seam between the runner and the decoders.

Greedy (one hypothesis, candidates from the run's source), a fallback's samples side by side
(:mod:`.samples`) or beam search (:mod:`.beam`): each commits through the one verification
kernel (:func:`~as2d.runtime.speculative.verify.replay`). A task is a function
``open(model, ctx, report) -> WindowDecode`` made by :func:`greedy`, :func:`samples` or
:func:`beam`; the runner encodes the window, opens the task and runs its passes without knowing
which search it drives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from as2d.runtime.speculative import candidates
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.beam import BeamOptions, BeamWindow
from as2d.runtime.transcribe.samples import Sample, SampleBatch
from as2d.runtime.transcribe.stream_source import StreamProposer
from as2d.runtime.transcribe.window import DecodingResult, WindowState
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import AudioContext, WhisperModel

# (offered, verdict, whose texts to show: None for the verdict's own) → one Verified event;
# None where nobody listens (no verdict is assembled for nobody)
Report = Callable[[Sequence[int], Verdict, Verdict | None], None] | None


class WindowDecode(Protocol):
    """One window's decode as the runner drives it: a prompt pass, passes until done."""

    done: bool
    steps: int  # beam steps taken (0 where each committed token is a step)

    def start(self) -> None: ...

    def step(self) -> None:
        """One target pass (with whatever candidates the decode's sources offer)."""

    def results(self) -> list[DecodingResult]:
        """Every decode of the task (each sample; else the one)."""

    def result(self) -> DecodingResult:
        """The decode kept so far (the best sample, the best hypothesis): what a stop keeps."""

    def close(self) -> None:
        """Done, stopped or failed: release the cache, tell the sources."""


Open = Callable[[WhisperModel, AudioContext, Report], WindowDecode]


def greedy(prompt: list[int], rules: LogitRules, sample_len: int,
           source_for: Callable[[], CandidateSource]) -> Open:
    """Greedy decoding (or one seeded sample: ``rules`` draws), candidates from
    ``source_for()`` (made once the window is encoded)."""

    def open_(model: WhisperModel, ctx: AudioContext, report: Report) -> WindowDecode:
        tk = model.tokenizer
        return _opened(model, model.decoder_state(ctx), lambda state: _Greedy(
            WindowState(state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot),
            source_for(), report))

    return open_


def samples(prompt: list[int], rules: Sequence[LogitRules], sample_len: int,
            sources: Sequence[CandidateSource]) -> Open:
    """``len(rules)`` seeded samples side by side, sample ``i`` with ``sources[i]``'s
    candidates."""

    def open_(model: WhisperModel, ctx: AudioContext, report: Report) -> WindowDecode:
        tk = model.tokenizer
        try:
            return _opened(model, model.beam_state(ctx, len(rules)), lambda state: _Samples(
                SampleBatch(state, [Sample(r, src) for r, src in zip(rules, sources)],
                            prompt, prompt.index(tk.sot), sample_len, tk.eot), report))
        except BaseException:
            for src in sources:
                src.finish([])
            raise

    return open_


def beam(prompt: list[int], rules: LogitRules, sample_len: int, options: BeamOptions,
         proposer: StreamProposer | None, budget: Budget | None) -> Open:
    """Beam search; with a ``proposer`` (the drafter's stream), speculative beam steps, as many
    candidates per hypothesis as the run's ``budget`` policy chooses for a pass of the beam's
    width (from its priors in every window: :meth:`Budget.fresh`)."""

    def open_(model: WhisperModel, ctx: AudioContext, report: Report) -> WindowDecode:
        tk = model.tokenizer
        return _opened(model, model.beam_state(ctx, options.beam_size), lambda state: _Beam(
            BeamWindow(state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot, options),
            proposer, budget.fresh() if proposer is not None else None))

    return open_


def _opened(model: WhisperModel, state, make: Callable[[object], _Task]) -> _Task:
    """``make(state)``'s task; one that cannot be made releases ``state`` at once."""
    try:
        return make(state)
    except BaseException:
        model.release(state)
        raise


class _Task:
    """What every search's task shares: its decoding, whose state goes back to its model's
    pool when the task closes."""

    steps = 0

    def __init__(self, decoding) -> None:
        self.decoding = decoding

    def release(self) -> None:
        state = self.decoding.state
        state.model.release(state)

    @property
    def done(self) -> bool:
        return self.decoding.done

    def results(self) -> list[DecodingResult]:
        return [self.decoding.result()]

    def result(self) -> DecodingResult:
        return self.decoding.result()

    def close(self) -> None:
        self.release()


class _Greedy(_Task):
    def __init__(self, window: WindowState, source: CandidateSource, report: Report) -> None:
        super().__init__(window)
        self.source, self.report = source, report

    def start(self) -> None:
        first = self.decoding.start()
        self.source.observe([], first)
        if self.report is not None:
            self.report([], first, None)

    def step(self) -> None:
        report = self.report
        candidates.step(self.decoding, self.source, None if report is None else
                        lambda offered, verdict: report(offered, verdict, None))

    def close(self) -> None:
        try:
            self.source.finish(self.decoding.generated)
        finally:
            self.release()


class _Samples(_Task):
    def __init__(self, batch: SampleBatch, report: Report) -> None:
        super().__init__(batch)
        self.report = report

    def start(self) -> None:
        self._report(self.decoding.start())

    def step(self) -> None:
        self._report(self.decoding.step())

    def _report(self, verdicts: list[tuple[list[int], Verdict]]) -> None:
        """One pass over the samples as one report: every sample's counts, the first's texts."""
        if not verdicts or self.report is None:
            return
        offered, lead = verdicts[0]
        merged = Verdict([t for _, v in verdicts for t in v.committed], [],
                         sum(v.offered for _, v in verdicts),
                         sum(v.accepted for _, v in verdicts),
                         sum(v.ran for _, v in verdicts), lead.seconds)
        self.report(offered, merged, lead)

    def results(self) -> list[DecodingResult]:
        return self.decoding.results()

    def close(self) -> None:
        try:
            for s in self.decoding.samples:
                s.source.finish(s.generated)
        finally:
            self.release()


class _Beam(_Task):
    def __init__(self, search: BeamWindow, proposer: StreamProposer | None,
                 budget: Budget | None) -> None:
        super().__init__(search)
        self.proposer, self.budget = proposer, budget  # fresh: its window counts are zero

    @property
    def steps(self) -> int:
        return self.decoding.steps

    def start(self) -> None:
        self.decoding.start()

    def step(self) -> None:
        search, props, k = self.decoding, None, 0
        if self.proposer is not None:
            width = len(search.beams)
            room = min(search.room, self.budget.room(width))
            guesses = [self.proposer.propose(seq, room) for seq in search.beams]
            k = self.budget.choose(max(map(len, guesses), default=0), width)
            props = [g[:k] for g in guesses] if k else None
        spent = search.counts.seconds
        steps = search.step(props)
        if self.proposer is not None:  # a plain pass measures the cost a row adds to
            self.budget.record(k, min(steps - 1, k), width * (1 + k),
                               search.counts.seconds - spent)
