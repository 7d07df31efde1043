"""What differs between target-only, classic speculative decoding and AS²D: a per-run decoder.

The window loop (:class:`~as2d.runtime.transcribe.runner.WindowRunner`) is the same for all of
them: encode the window once, decode it with :class:`~as2d.runtime.transcribe.window.WindowState`
through the one candidate loop, report. A :class:`DecodeStrategy` only says what runs beside the
target during a run (a drafter thread, or nothing) and which
:class:`~as2d.runtime.speculative.candidates.CandidateSource` proposes each window's candidates.
Since the verification kernel alone decides what is committed, no decoder can change the
output, only how many target passes it takes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from as2d.runtime.events import Listener, fanout, ignore
from as2d.runtime.speculative.candidates import NO_CANDIDATES, CandidateSource
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
    """A run's decoder; this base is target-only (no candidates, nothing beside the target).

    The long-form loop calls, per run: :meth:`start_early` (before language detection), then
    :meth:`begin` once the language is known, :meth:`source` for every window, and :meth:`end`
    whatever happens (also after a failed detection). :meth:`close` ends its use for good.
    """

    name = "target"
    drafter_name: str | None = None
    streams = False  # a drafter streams candidates for the whole run (candidate_stream)

    def __init__(self, target: WhisperModel, listener: Listener | None = None) -> None:
        self.target = target
        self.emit = listener or ignore
        self.mel: LogMel | None = None

    def threads(self) -> dict:
        return {"target": self.target.threads}

    def add_listener(self, listener: Listener) -> None:
        """Also send this strategy's events to ``listener`` (workers read ``emit`` per
        event, so a run already going on reports to it too)."""
        self.emit = fanout(self.emit, listener)

    def candidate_stream(self):
        """The drafter's :class:`~as2d.runtime.speculative.stream.CandidateStream` of the
        current run (speculative beam search reads every hypothesis's candidates from it);
        None when nothing drafts beside the target."""
        return None

    def drafted_tokens(self) -> list[int]:
        """The drafter's token stream of the last run, in the target's ids (a second
        hypothesis of the same audio); empty when nothing drafts beside the target."""
        return []

    def start_early(self, mel: LogMel, language: str | None, options) -> None:
        """Called before the target detects the language (``language`` is None until then):
        work that does not wait for the language may start here."""

    def begin(self, mel: LogMel, language: str | None, options) -> None:
        self.mel = mel

    def prefetch(self, mel: LogMel, language: str | None, options) -> None:
        """``mel`` will be transcribed after the current run: work on it may start now (called
        from another thread, while a run goes on)."""

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
