"""Typed progress events: the engine's only way of telling anyone what it is doing.

The engine calls a listener with these; the CLI's live display and the statistics are
listeners. Nothing here knows about terminals. Times are ``time.perf_counter()`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union


@dataclass(frozen=True)
class RunStarted:
    source: str
    duration: float  # seconds of audio
    decoder: str  # "target", "sd" or "as2d"
    target: str
    drafter: str | None
    threads: dict = field(default_factory=dict)


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
    segment: object  # as2d.runtime.transcribe.transcriber.Segment


@dataclass(frozen=True)
class WindowDone:
    window: int
    start: float
    end: float
    tokens: int  # committed tokens of the final decode (end-of-text included)
    passes: int
    decode_seconds: float
    encode_seconds: float
    offered: int
    accepted: int
    alone: int  # passes without candidates
    retried: bool = False  # decoded again without the previous-text prompt


@dataclass(frozen=True)
class Note:
    """Something the user should know (a fallback, a skipped window)."""

    message: str
    level: str = "info"


@dataclass(frozen=True)
class RunDone:
    wall_seconds: float
    interrupted: bool = False


Event = Union[RunStarted, WindowStarted, Encoded, Drafted, Verified, SegmentDone, WindowDone,
              Note, RunDone]
Listener = Callable[[Event], None]


def fanout(*listeners: Listener | None) -> Listener:
    active = [fn for fn in listeners if fn is not None]

    def emit(event: Event) -> None:
        for fn in active:
            fn(event)

    return emit


def ignore(event: Event) -> None:
    """A listener that listens to nothing."""
