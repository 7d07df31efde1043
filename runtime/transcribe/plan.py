"""What one transcription run decodes with, decided once before its first window.

The transcriber makes one :class:`RunPlan` (:func:`make`) from the options, the model and its
decoder before a run starts (the engine when the call is made), and everything downstream reads
it: the window loop, :class:`~as2d.runtime.events.RunStarted` (so ``--stats``) and the faces
(``TranscriptionInfo.plan``). Nothing decides again and nothing is read back from the engine.
The decoder and drafter are the ones the run *uses*, with the reason when that is less than was
asked for; the text is the same whichever it is, only the speed differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from as2d.runtime.events import Listener, Note
from as2d.runtime.rows import beams_exact
from as2d.runtime.transcribe.beam import BeamOptions
from as2d.runtime.transcribe.transcribe_options import (
    TranscribeOptions,
    beam_options,
    describe_search,
    resolve_language,
)


@dataclass(frozen=True)
class RunPlan:
    """One run's decisions (see the module's docstring)."""

    decoder: str  # "as2d", "sd" or "target": what decodes the run
    drafter: str | None  # the drafter's model (None: the target decodes alone)
    reason: str | None  # why the run decodes with less than was asked for (None: as asked)
    language: str | None  # the language asked for; None: detected (TranscriptionInfo says which)
    search: BeamOptions | None  # beam search at temperature 0; None: greedy
    # Each window's language is detected (on a multilingual model): the segments say which.
    multilingual: bool = False

    @property
    def speculative(self) -> bool:
        """Candidates are verified (a drafter proposes them)."""
        return self.drafter is not None

    @property
    def search_name(self) -> str:
        return describe_search(self.search)


def make(model, decoder, options: TranscribeOptions, reason: str | None,
         emit: Listener) -> RunPlan:
    """The plan of a run of ``decoder`` (a DecodeStrategy) on ``model``; ValueError for a
    language or beam search the model cannot do. Speculative beam search needs a drafter's
    stream and batched rows exactly those of single passes (checked once per model and
    machine), otherwise the target decodes the beams alone, and the plan says why."""
    language, search = resolve_language(model, options.language), beam_options(options)
    name, drafter = decoder.name, decoder.drafter_name
    if search is not None:
        if model.beam_graph is None:  # a Hugging Face ONNX export
            raise ValueError(f"{model.name}: beam search needs an as2d Whisper model "
                             "(a Hugging Face ONNX export decodes greedily only)")
        exact = beams_exact(model)
        if not exact:
            emit(Note("beam search: this machine computes the batched decoder's rows "
                      "differently from single passes; the target decodes the beams alone"))
        if drafter is not None and not (exact and decoder.streams):
            reason = ("beam search: the batched decoder's rows are not those of single "
                      "passes on this machine" if not exact else
                      f"beam search: the {name} decoder has no drafter's stream to take "
                      "candidates from")
            name, drafter = "target", None
    return RunPlan(name, drafter, reason, language, search,
                   options.multilingual and model.multilingual)
