"""Typed events of the answering stage of ``as2d ask`` (the transcription stage uses
:mod:`as2d.runtime.events`).

The answer generator emits these; the CLI's display and the answer statistics consume them.
Like :mod:`as2d.runtime.events`, nothing here knows about terminals. Times are seconds.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class AskStarted:
    """The prompt is built: what the answering model is about to read."""

    question: str
    llm: str
    prompt_tokens: int
    transcript_tokens: int  # the whole transcript, in the answering model's tokens
    spans_total: int
    spans_used: int  # transcript spans placed in the prompt
    selected: bool  # True when the transcript did not fit and passages were selected
    candidates: bool  # speculative candidates in use
    sources: tuple[str, ...] = ()  # candidate sources ("transcript", "drafter", "question")


@dataclass(frozen=True)
class Prefilled:
    """The prompt has been run through the answering model; its first token is chosen."""

    tokens: int
    seconds: float
    first_text: str
    cached: int = 0  # leading rows loaded from the head cache instead of computed


@dataclass(frozen=True)
class AnswerStep:
    """One verification pass of the answering model.

    ``offered`` candidates from ``source`` were checked, ``accepted`` were kept, then the
    model's own token. ``offered == 0`` (``source`` None) is a plain step."""

    offered: int
    accepted: int
    source: str | None
    committed: tuple[int, ...]
    accepted_text: str
    own_text: str
    rejected_text: str
    seconds: float
    match: int = 0  # length of the n-gram match the candidates were found with


@dataclass(frozen=True)
class AnswerDone:
    text: str
    tokens: int
    stopped: str  # "stop" (end of the answer), "length" (--max-tokens) or "context"
    seconds: float  # prefill + generation


AskEvent = AskStarted | Prefilled | AnswerStep | AnswerDone


@dataclass
class SourceStats:
    passes: int = 0
    offered: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.offered if self.offered else 0.0


@dataclass
class AnswerStats:
    """Figures of one answer, built only from the events above.

    ``tokens_per_second`` is the generation rate after the prompt: the tokens committed by the
    passes that follow the prefill, over those passes' time. The prefill (which also yields the
    first answer token) is reported on its own: speculation cannot speed it up.
    """

    llm: str = ""
    candidates: bool = True
    prompt_tokens: int = 0
    transcript_tokens: int = 0
    selected: bool = False
    prefill_seconds: float = 0.0
    prefill_cached: int = 0  # prompt tokens whose rows came from the head cache
    answer_tokens: int = 0  # all committed tokens, the stop token included
    generation_tokens: int = 0  # committed by passes after the prefill
    generation_seconds: float = 0.0
    passes: int = 0  # passes after the prefill
    passes_alone: int = 0
    stopped: str = ""
    sources: dict[str, SourceStats] = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.generation_tokens / self.generation_seconds if self.generation_seconds else 0.0

    @property
    def offered(self) -> int:
        return sum(s.offered for s in self.sources.values())

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.sources.values())

    def to_dict(self) -> dict:
        offered, accepted = self.offered, self.accepted
        return {
            "llm": self.llm,
            "candidates": self.candidates,
            "prompt_tokens": self.prompt_tokens,
            "transcript_tokens": self.transcript_tokens,
            "transcript_selected": self.selected,
            "prefill_seconds": round(self.prefill_seconds, 4),
            "prefill_cached_tokens": self.prefill_cached,
            "prefill_tokens_per_second": round(
                (self.prompt_tokens - self.prefill_cached) / self.prefill_seconds, 1)
            if self.prefill_seconds else 0.0,
            "answer_tokens": self.answer_tokens,
            "generation_tokens": self.generation_tokens,
            "generation_seconds": round(self.generation_seconds, 4),
            "tokens_per_second": round(self.tokens_per_second, 2),
            "passes": self.passes,
            "tokens_per_pass": round(self.generation_tokens / self.passes, 3)
            if self.passes else 0.0,
            "passes_alone": self.passes_alone,
            "candidates_offered": offered,
            "candidates_accepted": accepted,
            "acceptance": round(accepted / offered, 4) if offered else 0.0,
            "by_source": {name: dict(asdict(s), acceptance=round(s.acceptance, 4))
                          for name, s in self.sources.items()},
            "stopped": self.stopped,
        }


class AnswerStatsCollector:
    """A listener that turns answer events into :class:`AnswerStats` (one per answer)."""

    def __init__(self) -> None:
        self.answers: list[AnswerStats] = []
        self._lock = threading.Lock()

    @property
    def current(self) -> AnswerStats | None:
        return self.answers[-1] if self.answers else None

    def __call__(self, event) -> None:
        with self._lock:
            if isinstance(event, AskStarted):
                self.answers.append(AnswerStats(
                    llm=event.llm, candidates=event.candidates,
                    prompt_tokens=event.prompt_tokens, transcript_tokens=event.transcript_tokens,
                    selected=event.selected,
                    sources={name: SourceStats() for name in event.sources}))
                return
            cur = self.current
            if cur is None:
                return
            if isinstance(event, Prefilled):
                cur.prefill_seconds += event.seconds
                cur.prefill_cached += event.cached
                cur.answer_tokens += 1
            elif isinstance(event, AnswerStep):
                n = len(event.committed)
                cur.answer_tokens += n
                cur.generation_tokens += n
                cur.generation_seconds += event.seconds
                cur.passes += 1
                if event.offered == 0:
                    cur.passes_alone += 1
                elif event.source is not None:
                    s = cur.sources.setdefault(event.source, SourceStats())
                    s.passes += 1
                    s.offered += event.offered
                    s.accepted += event.accepted
            elif isinstance(event, AnswerDone):
                cur.stopped = event.stopped
