"""What differs between target-only, classic speculative decoding and AS²D: a per-run decoder.

The window loop is the same for all of them; a :class:`DecodeStrategy` only says what runs
beside the target during a run (a drafter thread, or nothing) and which
:class:`~as2d.runtime.speculative.candidates.CandidateSource` proposes each window's candidates.
The verification kernel alone decides what is committed, so no decoder can change the output,
only how many target passes it takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from as2d.runtime.events import Listener, fanout, ignore
from as2d.runtime.rows import rows_exact
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import NO_CANDIDATES, CandidateSource
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.whisper.features import FRAMES_PER_SECOND, LogMel
from as2d.runtime.whisper.model import WhisperModel


@dataclass(frozen=True)
class Window:
    """Which stretch of the audio a window decodes."""

    index: int
    seek: int  # first mel frame
    size: int  # mel frames of audio (at most 30 s)
    # The window's own detected language in a multilingual run (None: the run's language): a
    # drafter drafts it only if it speaks it.
    language: str | None = None

    @property
    def start(self) -> float:
        return self.seek / FRAMES_PER_SECOND

    @property
    def end(self) -> float:
        return (self.seek + self.size) / FRAMES_PER_SECOND


class DecodeStrategy:
    """A run's decoder; this base is target-only. Per run: :meth:`start_early` (before
    language detection), :meth:`begin`, :meth:`source` per window, :meth:`end` whatever happens;
    :meth:`close` ends its use for good."""

    name = "target"
    drafter_name: str | None = None
    streams = False  # a drafter streams candidates for the whole run (candidate_stream)
    verifies_samples = False  # a fallback's sampled decodes verify candidates too
    budget: Budget | None = None  # candidates per pass, for every search (drafting strategies)

    def __init__(self, target: WhisperModel, listener: Listener | None = None) -> None:
        self.target = target
        self.emit = listener or ignore
        self.mel: LogMel | None = None

    def threads(self) -> dict:
        return {"target": self.target.threads}

    def add_listener(self, listener: Listener) -> None:
        """Also send this strategy's events to ``listener`` (a run going on included)."""
        self.emit = fanout(self.emit, listener)

    def candidate_stream(self):
        """The drafter's :class:`~as2d.runtime.speculative.stream.CandidateStream` of the
        current run; None when nothing drafts beside the target."""
        return None

    def drafted_tokens(self) -> list[int]:
        """The drafter's token stream of the last run, in the target's ids (empty: none)."""
        return []

    def start_early(self, mel: LogMel, language: str | None, options) -> None:
        """Before the target detects the language (``language`` None until then)."""

    def begin(self, mel: LogMel, language: str | None, options) -> None:
        self.mel = mel

    def prefetch(self, mel: LogMel, language: str | None, options) -> None:
        """``mel`` will be transcribed after the current run (called from another thread)."""

    def target_encoding(self, mel: LogMel, window: Window) -> AbstractContextManager:
        """Held while the target encodes ``window`` of ``mel`` (a drafter that is ahead may
        leave it the cores)."""
        return nullcontext()

    def source(self, window: Window) -> CandidateSource:
        """The candidates of ``window`` (its :meth:`~CandidateSource.finish` ends their use)."""
        return NO_CANDIDATES

    def end(self) -> None:
        """The run is over (done, stopped or failed)."""

    def close(self) -> None:
        """Release worker threads and sessions (end of the process's use)."""
        self.end()


class TargetOnly(DecodeStrategy):
    """Plain greedy decoding with the target model alone: the reference output."""


class NotRowExact(ValueError):
    """A target whose passes are not row-exact cannot be decoded speculatively: verifying k
    candidates in one pass would not give what k single passes give, so the text could
    change. Decode it with :class:`~as2d.runtime.transcribe.strategy.TargetOnly`."""


class DraftingStrategy(DecodeStrategy):
    """A drafter beside the target (serial SD and AS²D). Refuses a target that fails the row
    check (:func:`as2d.runtime.rows.rows_exact`): losslessness rests on it, so no way of
    building a speculative decoder skips it."""

    verifies_samples = True

    def __init__(self, target: WhisperModel, drafter: WhisperModel,
                 listener: Listener | None = None, budget: Budget | None = None) -> None:
        if not rows_exact(target):
            raise NotRowExact(f"{target.name}: this model's graph does not compute rows "
                              "independently, so speculative decoding could change its "
                              "output; decode it with the target alone")
        super().__init__(target, listener)
        self.drafter = drafter
        self.drafter_name = drafter.name
        self.budget = budget or Budget()  # the run's (and the next runs') cost and acceptance

    def threads(self) -> dict:
        return {"target": self.target.threads, "drafter": self.drafter.threads}

    def drafter_understands(self, language: str | None) -> bool:
        """Can the drafter draft ``language`` (None: the run's, English or undetermined)? An
        English-only drafter only English; a multilingual one the languages of its vocabulary
        (base has no Cantonese, which large-v3 detects)."""
        if language in (None, "en"):
            return True
        return self.drafter.multilingual and language in self.drafter.tokenizer.languages


class BudgetedSource(CandidateSource):
    """A window's source that feeds every pass back to the budget; proposes nothing itself
    (a drafter that cannot help still lets the budget learn the target's pass cost)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        budget.window_start()

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        # The prompt pass runs many rows for no candidate: it says nothing about verify cost.
        if verdict.offered or verdict.ran == 1:
            self.budget.record(verdict.offered, verdict.accepted, verdict.ran, verdict.seconds)
