"""Typed progress events: the engine's only way of telling anyone what it is doing.

The engine calls a listener with these; the CLI's live display and the statistics are
listeners. Nothing here knows about terminals. Times are ``time.perf_counter()`` seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RunStarted:
    source: str
    duration: float  # seconds of audio
    decoder: str  # "target", "sd" or "as2d"
    target: str
    drafter: str | None
    threads: dict = field(default_factory=dict)
    encoder: str = ""  # the target's encoder back end and precision, e.g. "onnxruntime int8"
    search: str = "greedy"  # how windows at temperature 0 are decoded ("beam 5", ...)


@dataclass(frozen=True)
class WindowStarted:
    window: int
    start: float  # audio seconds
    end: float
    worker: str = "target"  # or "drafter"


@dataclass(frozen=True)
class Encoded:
    window: int
    seconds: float
    frames: int
    worker: str = "target"


@dataclass(frozen=True)
class Drafted:
    """The drafter appended complete words (as target token ids) to the candidate stream."""

    tokens: tuple[int, ...]
    text: str
    stream_length: int
    audio_time: float  # where the drafter is in the audio
    seconds: float  # drafter compute time spent producing these


@dataclass(frozen=True)
class Verified:
    """One target pass: ``offered`` candidates checked, ``accepted`` kept, then the target's
    own token. ``offered == 0`` is a plain step (the target advanced alone)."""

    window: int
    offered: int
    accepted: int
    committed: tuple[int, ...]  # accepted candidates + the target's token
    accepted_text: str
    corrected_text: str  # the target's own token (a correction when offered > accepted)
    rejected_text: str  # candidates the target disagreed with
    seconds: float  # wall time of the pass, logit rules included


@dataclass(frozen=True)
class SegmentDone:
    segment: object  # as2d.runtime.transcribe.longform.Segment


@dataclass(frozen=True)
class WindowStats:
    """The one record of a decoded window: what the ``--stats`` report, ``as2d bench`` and the
    live views all count, so the three can never disagree about a window."""

    window: int
    start: float = 0.0  # audio seconds
    end: float = 0.0
    tokens: int = 0  # committed tokens of the final decode (end-of-text included)
    passes: int = 0  # target passes, the prompt pass included
    offered: int = 0  # candidates run
    accepted: int = 0  # of them, kept
    alone: int = 0  # passes without candidates
    encode_seconds: float = 0.0  # the target's encoder (0 when an encoding was reused)
    decode_seconds: float = 0.0  # everything after the target's encoder
    retried: bool = False  # decoded again without the previous-text prompt
    source: str = ""  # the audio it belongs to (a file name in the benchmark)
    steps: int = 0  # beam search: beam steps taken (a speculative pass may take several)
    # Decodes of this window that were run and not kept (temperature fallback, best_of samples,
    # the retry without the previous text): their tokens and target passes. The fields above
    # count the kept decode; its decode_seconds include these decodes' time.
    dropped_decodes: int = 0
    dropped_tokens: int = 0
    dropped_passes: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.offered if self.offered else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(tokens_per_second=round(self.tokens_per_second, 2),
                 acceptance=round(self.acceptance, 4),
                 tokens_per_pass=round(self.tokens / self.passes, 3) if self.passes else 0.0)
        return d


@dataclass(frozen=True)
class WindowDone:
    stats: WindowStats


@dataclass(frozen=True)
class LanguageDetected:
    """The target chose the language of the audio (no language was given), or of the window
    starting at ``at`` seconds (a multilingual run detects every window's)."""

    language: str
    probability: float
    at: float = 0.0
    level: str = "info"  # shown wherever notes are ("debug": the same as the window before)

    @property
    def message(self) -> str:
        """How a view that shows notes words it."""
        where = f" from {self.at:.1f}s" if self.at else ""
        return f"detected language{where}: {self.language} (p={self.probability:.2f})"


@dataclass(frozen=True)
class Note:
    """Something the user should know (a fallback, a skipped window)."""

    message: str
    level: str = "info"


@dataclass(frozen=True)
class RunDone:
    wall_seconds: float
    interrupted: bool = False


Event = (RunStarted | WindowStarted | Encoded | Drafted | Verified | SegmentDone | WindowDone
         | LanguageDetected | Note | RunDone)
Listener = Callable[[Event], None]


def fanout(*listeners: Listener | None) -> Listener:
    active = [fn for fn in listeners if fn is not None]

    def emit(event: Event) -> None:
        for fn in active:
            fn(event)

    return emit


def ignore(event: Event) -> None:
    """A listener that listens to nothing."""
