"""What the two speculative strategies (serial SD and AS²D) share: a drafter model beside the
target, a budget that adapts to the verify cost measured pass by pass, and the one case where a
drafter cannot help at all (an English-only drafter on audio in another language)."""

from __future__ import annotations

from as2d.runtime.speculative.budget import Budget
from as2d.runtime.transcribe.window import WindowDecoder
from as2d.runtime.events import Listener
from as2d.runtime.transcribe.decoders import Strategy
from as2d.runtime.whisper.model import WhisperModel


class DraftingStrategy(Strategy):
    def __init__(self, target: WhisperModel, drafter: WhisperModel,
                 listener: Listener | None = None, budget: Budget | None = None) -> None:
        super().__init__(target, listener)
        self.drafter = drafter
        self.drafter_name = drafter.name
        self.budget = budget or Budget()

    def threads(self) -> dict:
        return {"target": self.target.threads, "drafter": self.drafter.threads}

    def drafter_understands(self, language: str | None) -> bool:
        return self.drafter.multilingual or language in (None, "en")

    def window_begin(self, window: int, dec: WindowDecoder, seek: int, size: int) -> None:
        self.budget.window_start()

    def observe(self, dec: WindowDecoder, offered: list[int], step) -> None:
        if step.offered or step.rows == 1:  # the prompt pass says nothing about verify cost
            self.budget.record(step.offered, step.accepted, step.rows, step.seconds)
