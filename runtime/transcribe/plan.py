"""What one transcription run decodes with, decided once before its first window.

A run's decisions used to be made where each was needed and reported back afterwards; now the
transcriber makes one :class:`RunPlan` (``LongFormTranscriber.plan``) before a run starts, from
the options, the model and the decoder it was built with (the engine makes it when the call is
made, and the run takes that one), and everything downstream reads it: the window loop (the search,
whether candidates are verified), the run's :class:`~as2d.runtime.events.RunStarted` (so
``--stats``), and the faces' JSON documents and API callers (through
``TranscriptionInfo.plan``, which the engine fills in before the run starts, so a face never
finds it empty). Nothing decides again and nothing is read back from the engine.

The decoder and drafter are what the run *uses*, with the reason when that is less than was
asked for: a recording of one window (no drafter is loaded), a target whose passes are not
row-exact, a language no smaller model drafts, a beam search without exact batched rows or a
drafter's stream. The text is the same whichever it is; only the speed differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from as2d.runtime.transcribe.beam import BeamOptions
from as2d.runtime.transcribe.transcribe_options import describe_search


@dataclass(frozen=True)
class RunPlan:
    """One run's decisions (see the module's docstring)."""

    decoder: str  # "as2d", "sd" or "target": what decodes the run
    drafter: str | None  # the drafter's model (None: the target decodes alone)
    reason: str | None  # why the run decodes with less than was asked for (None: as asked)
    language: str | None  # the language asked for; None: detected (TranscriptionInfo says which)
    search: BeamOptions | None  # beam search at temperature 0; None: greedy
    # The language is detected for every window (TranscribeOptions.multilingual, on a
    # multilingual model): the segments say which.
    multilingual: bool = False

    @property
    def speculative(self) -> bool:
        """Candidates are verified (a drafter proposes them)."""
        return self.drafter is not None

    @property
    def search_name(self) -> str:
        return describe_search(self.search)
