"""What the two speculative decoders (serial SD and AS²D) share: a drafter model beside the
target, a budget that adapts to the verify cost measured pass by pass, and the one case where a
drafter cannot help at all (an English-only drafter on audio in another language)."""

from __future__ import annotations

from collections.abc import Sequence

from as2d.runtime.events import Listener
from as2d.runtime.rows import rows_exact
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import CandidateSource
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.strategy import DecodeStrategy
from as2d.runtime.whisper.model import WhisperModel


class NotRowExact(ValueError):
    """A target whose passes are not row-exact cannot be decoded speculatively: verifying k
    candidates in one pass would not give what k single passes give, so the text could
    change. Decode it with :class:`~as2d.runtime.transcribe.strategy.TargetOnly`."""


class DraftingStrategy(DecodeStrategy):
    """A drafter beside the target. Refuses a target that fails the row check
    (:func:`as2d.runtime.rows.rows_exact`, remembered per graph): losslessness rests on it,
    so no way of building a speculative decoder skips it."""

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
