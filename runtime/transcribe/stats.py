"""Throughput statistics, built only from the engine's events.

Decoding throughput (committed tokens per second of target decoding time, the paper's metric)
and end-to-end real-time factor (audio seconds per wall second, the user's) are reported
separately, per run and per window, with acceptance and where the time went.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from as2d.runtime.events import (
    Drafted,
    Event,
    RunDone,
    RunStarted,
    WindowDone,
    WindowStats,
)
from as2d.runtime.int8_exact import twinned as int8_twinned


@dataclass
class RunStats:
    source: str = ""
    decoder: str = ""
    target: str = ""
    drafter: str | None = None
    threads: dict = field(default_factory=dict)
    audio_seconds: float = 0.0
    encoder: str = ""
    wall_seconds: float = 0.0
    interrupted: bool = False
    windows: list[WindowStats] = field(default_factory=list)
    draft_seconds: float = 0.0
    drafted_tokens: int = 0
    search: str = "greedy"  # how windows at temperature 0 were decoded ("beam 5", ...)

    def summary(self) -> dict:
        ws = self.windows
        tokens = sum(w.tokens for w in ws)
        decode = sum(w.decode_seconds for w in ws)
        offered, accepted = sum(w.offered for w in ws), sum(w.accepted for w in ws)
        passes = sum(w.passes for w in ws)
        steps = sum(w.steps for w in ws)
        beam_passes = sum(w.passes for w in ws if w.steps)
        return {
            "source": self.source,
            "decoder": self.decoder,
            "search": self.search,
            "target": self.target,
            "drafter": self.drafter,
            "threads": self.threads,
            "encoder": self.encoder,
            # int8 graphs ran as exact twins (this CPU's u8s8 kernel saturates)
            "int8_twins": int8_twinned(),
            "audio_seconds": round(self.audio_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "real_time_factor": round(self.audio_seconds / self.wall_seconds, 3)
            if self.wall_seconds else 0.0,
            "windows": len(self.windows),
            "committed_tokens": tokens,
            "decode_seconds": round(decode, 4),
            "tokens_per_second": round(tokens / decode, 2) if decode else 0.0,
            "target_passes": passes,
            "tokens_per_pass": round(tokens / passes, 3) if passes else 0.0,
            # Beam search: beam steps per pass (1 target-only; a speculative pass takes one,
            # then as many more as its verified rows decide).
            "beam_steps": steps,
            "beam_steps_per_pass": round(steps / beam_passes, 3)
            if beam_passes else 0.0,
            "candidates_offered": offered,
            "candidates_accepted": accepted,
            "acceptance": round(accepted / offered, 4) if offered else 0.0,
            "passes_alone": sum(w.alone for w in ws),
            # Decodes run and not kept (temperature fallback, best_of, the repetition retry):
            # their time is in decode_seconds, their tokens and passes only here.
            "dropped_decodes": sum(w.dropped_decodes for w in ws),
            "dropped_tokens": sum(w.dropped_tokens for w in ws),
            "dropped_passes": sum(w.dropped_passes for w in ws),
            "encode_seconds": round(sum(w.encode_seconds for w in ws), 4),
            "draft_seconds": round(self.draft_seconds, 4),
            "drafted_tokens": self.drafted_tokens,
            "interrupted": self.interrupted,
        }

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "windows": [w.to_dict() for w in self.windows]}


class StatsCollector:
    """A listener that turns events into :class:`RunStats` (one per run)."""

    def __init__(self) -> None:
        self.runs: list[RunStats] = []
        self._lock = threading.Lock()

    @property
    def current(self) -> RunStats:
        return self.runs[-1]

    def __call__(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, RunStarted):
                self.runs.append(RunStats(event.source, event.decoder, event.target,
                                          event.drafter, dict(event.threads), event.duration,
                                          encoder=event.encoder, search=event.search))
            elif not self.runs:
                return
            elif isinstance(event, WindowDone):
                self.current.windows.append(event.stats)
            elif isinstance(event, Drafted):
                self.current.draft_seconds += event.seconds
                self.current.drafted_tokens += len(event.tokens)
            elif isinstance(event, RunDone):
                self.current.wall_seconds = event.wall_seconds
                self.current.interrupted = event.interrupted
