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
from as2d.runtime.transcribe.beam import BeamOptions, BeamWindow
from as2d.runtime.transcribe.samples import Sample, SampleBatch
from as2d.runtime.transcribe.stream_source import StreamProposer
from as2d.runtime.transcribe.window import DecodingResult, Report, WindowState
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import AudioContext, WhisperModel


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
            return _opened(model, model.beam_state(ctx, len(rules)), lambda state: SampleBatch(
                state, [Sample(r, src) for r, src in zip(rules, sources)], prompt,
                prompt.index(tk.sot), sample_len, tk.eot, report=report))
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
        return _opened(model, model.beam_state(ctx, options.beam_size), lambda state: BeamWindow(
            state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot, options,
            proposer=proposer, budget=budget.fresh() if proposer is not None else None))

    return open_


def _opened(model: WhisperModel, state, make: Callable[[object], WindowDecode]
            ) -> WindowDecode:
    """``make(state)``'s task; one that cannot be made releases ``state`` at once."""
    try:
        return make(state)
    except BaseException:
        model.release(state)
        raise


class _Greedy:
    """A greedy window (:class:`WindowState`, the kernel's one-hypothesis decode, which the
    drafter and ``ask`` drive too) with its candidate source, as a window task."""

    steps = 0

    def __init__(self, window: WindowState, source: CandidateSource, report: Report) -> None:
        self.decoding, self.source, self.report = window, source, report

    @property
    def done(self) -> bool:
        return self.decoding.done

    def start(self) -> None:
        first = self.decoding.start()
        self.source.observe([], first)
        if self.report is not None:
            self.report([], first, None)

    def step(self) -> None:
        report = self.report
        candidates.step(self.decoding, self.source, None if report is None else
                        lambda offered, verdict: report(offered, verdict, None))

    def results(self) -> list[DecodingResult]:
        return [self.decoding.result()]

    def result(self) -> DecodingResult:
        return self.decoding.result()

    def close(self) -> None:
        try:
            self.source.finish(self.decoding.generated)
        finally:
            self.decoding.state.model.release(self.decoding.state)
