"""One window decoded until a decode is kept: whisper's temperature fallback and repetition guard.

The first attempt is greedy (or the run's beam search) through the run's decoder; a decode that
looks wrong (:func:`.fallback.judge`) is decoded again at each further temperature of the
schedule as ``best_of`` seeded samples (side by side where the batched decoder's rows are
exact: :mod:`.samples`), and the last is kept if none passes. A window that still loops is
decoded once more without the previous text, and a loop that survives is cut. In a speculative
run, beam hypotheses and samples take candidates from the drafter's stream
(:mod:`.stream_source`).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from as2d.runtime.events import Listener, Note, WindowDone, WindowStats
from as2d.runtime.rows import beams_exact
from as2d.runtime.sessions import give_back_memory
from as2d.runtime.speculative.candidates import NO_CANDIDATES, CandidateSource
from as2d.runtime.transcribe import fallback, window_task
from as2d.runtime.transcribe.beam import BeamOptions
from as2d.runtime.transcribe.runner import WindowRunner
from as2d.runtime.transcribe.samples import best
from as2d.runtime.transcribe.strategy import DecodeStrategy, Window
from as2d.runtime.transcribe.stream_source import SampledSource, StreamProposer
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.runtime.transcribe.window import DecodingResult
from as2d.runtime.whisper.features import LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import WhisperModel
from as2d.runtime.whisper.seeking import cut_repetition


def _charged(kept: WindowStats, decodes: list[WindowStats]) -> WindowStats:
    """``kept``'s record charged with the time of every decode of its window (``decodes``);
    the tokens and passes of those not kept are counted apart."""
    return replace(kept, encode_seconds=sum(s.encode_seconds for s in decodes),
                   decode_seconds=sum(s.decode_seconds for s in decodes),
                   dropped_decodes=sum(1 + s.dropped_decodes for s in decodes) - 1,
                   dropped_tokens=sum(s.tokens + s.dropped_tokens for s in decodes) - kept.tokens,
                   dropped_passes=sum(s.passes + s.dropped_passes for s in decodes) - kept.passes)


class Attempts:
    """One run's window decodes: its search, logit rules, token limit per window and options,
    and (a speculative run) the drafter's stream for the decodes its aligner does not follow,
    with a proposer per window, and whether its samples verify candidates."""

    def __init__(self, model: WhisperModel, strategy: DecodeStrategy, emit: Listener,
                 stop: threading.Event, options: TranscribeOptions, rules: LogitRules,
                 sample_len: int, search: BeamOptions | None = None, stream=None,
                 sampled_candidates: bool = False) -> None:
        self.model, self.strategy, self.emit, self.stop = model, strategy, emit, stop
        self.options, self.rules, self.sample_len, self.search = options, rules, sample_len, search
        self.stream, self.sampled_candidates = stream, sampled_candidates
        self._window_proposer: tuple[int, StreamProposer] | None = None

    def decode(self, runner: WindowRunner, window: Window, mel: LogMel, prompt: list[int],
               bare: list[int] | None = None) -> tuple[DecodingResult, bool, float] | None:
        """One window: ``(result, retried without the previous text, temperature)``; None:
        cancelled. Whisper's temperature fallback (:mod:`.fallback`) until a decode passes
        (else the last is kept); then a window that still loops is decoded once more without
        the previous text (``bare``) and a loop that survives is cut."""
        tk, options = self.model.tokenizer, self.options
        thr = options.compression_ratio_threshold
        temps = options.temperatures or (0.0,)
        decodes: list[WindowStats] = []  # the record of every decode, kept or not

        def once(t: float, prompt_: list[int], retried: bool = False):
            decoded = self.attempt(runner, window, mel, prompt_, t, retried)
            give_back_memory()  # what a dropped decode's samples held
            if decoded is not None:
                decodes.append(decoded[1])
            return decoded

        for i, temperature in enumerate(temps):
            decoded = once(temperature, prompt)
            if decoded is None:
                return None
            result, stats = decoded
            if i + 1 == len(temps):
                break
            verdict = fallback.judge(result.avg_logprob, result.compression_ratio(tk),
                                     result.no_speech_prob, thr, options.logprob_threshold,
                                     options.no_speech_threshold)
            if not verdict.needs_fallback:
                break
            self.emit(Note(f"window at {window.start:.1f}s: {verdict.reason}; decoding it again "
                           f"at temperature {temps[i + 1]:g}"))
        if (options.retry_repetitive and thr is not None and bare is not None
                and result.compression_ratio(tk) > thr):
            # Whisper's loop failure feeds on the previous text: decode again without it.
            self.emit(Note(f"window at {window.start:.1f}s repeats itself; decoding it again "
                           "without the previous text"))
            decoded = once(temperature, bare, retried=True)
            if decoded is None:
                return None
            result, stats = decoded
        stats = _charged(stats, decodes)
        if thr is not None and result.compression_ratio(tk) > thr:
            result.tokens = cut_repetition(result.tokens, tk.timestamp_begin)
            result.compression = None
            stats = replace(stats, tokens=len(result.tokens) + int(result.completed))
        self.emit(WindowDone(stats))
        return result, stats.retried, temperature

    def attempt(self, runner: WindowRunner, window: Window, mel: LogMel, prompt: list[int],
                temperature: float, retried: bool):
        """One decode at ``temperature``: beam or greedy, or the best of ``best_of`` samples."""
        search, rules, sample_len, options = self.search, self.rules, self.sample_len, \
            self.options
        if temperature <= 0:
            if search is not None:
                task = window_task.beam(prompt, rules, sample_len, search,
                                        self._proposer(window), self.strategy.budget)
            else:
                task = window_task.greedy(prompt, rules, sample_len,
                                          lambda: self.strategy.source(window))
            decoded = runner.decode(window, mel, task, self.stop, retried)
            return decoded[0] if decoded is not None else None
        draws = [rules.sampling(temperature, fallback.window_rng(
            options.seed, window.seek, temperature, 2 * draw + int(retried)))
            for draw in range(max(1, options.best_of))]
        batch = self.sample_batching(len(draws))
        if batch:  # the samples side by side (same tokens, fewer passes)
            task = window_task.samples(prompt, draws, sample_len,
                                       [self._sampled_source(window) for _ in draws])
            sampled = runner.decode(window, mel, task, self.stop, retried)
        else:  # one after another
            sampled = []
            for draw in draws:
                task = window_task.greedy(prompt, draw, sample_len,
                                          lambda: self._sampled_source(window))
                decoded = runner.decode(window, mel, task, self.stop, retried)
                if decoded is None:
                    return None
                sampled += decoded
        if sampled is None:
            return None
        result, stats = sampled[best([r for r, _ in sampled])]
        if not batch:
            return result, _charged(stats, [s for _, s in sampled])
        # Side by side, the samples shared one decode's time and passes.
        return result, replace(stats, dropped_decodes=len(sampled) - 1,
                               dropped_tokens=sum(s.tokens for _, s in sampled) - stats.tokens,
                               dropped_passes=max(s.passes for _, s in sampled) - stats.passes)

    def sample_batching(self, samples: int) -> bool:
        """Are a fallback's samples drawn side by side (:mod:`.samples`)? That needs the
        batched decoder with rows exactly those of single passes (checked once per model: a
        batched decoder that cannot be loaded counts as not exact, so it is not tried again)."""
        model = self.model
        if samples < 2 or model.beam_graph is None:
            return False
        if model.beam_check is None:
            try:
                model.beam_session()
            except Exception:  # noqa: BLE001 - no batched decoder: one sample after another
                model.beam_check = {"exact": False}
                return False
        return beams_exact(model)

    def _proposer(self, window: Window) -> StreamProposer | None:
        """Candidates from the drafter's stream for any sequence decoded in ``window`` (None:
        no stream); one per window, shared by its decodes."""
        if self.stream is None:
            return None
        if self._window_proposer is None or self._window_proposer[0] != window.seek:
            tk = self.model.tokenizer
            self._window_proposer = (window.seek, StreamProposer(
                self.stream, window.start, tk.timestamp_begin, tk.eot))
        return self._window_proposer[1]

    def _sampled_source(self, window: Window) -> CandidateSource:
        """A sampled decode's candidates (:mod:`.stream_source`); none in a target-only run."""
        if not self.sampled_candidates:
            return NO_CANDIDATES
        return SampledSource(self._proposer(window), self.model.tokenizer.timestamp_begin)
