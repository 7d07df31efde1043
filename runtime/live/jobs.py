"""The live decoder's work queue: which decode runs next, and which are stale.

Final decodes queue in order and always run; of the growing-utterance decodes only the newest
waits (older ones are stale and dropped), and a final or urgent job (the speculative final of a
tentative end) cancels a running growing-utterance decode of other audio after its current
pass. So the queue never holds more than the ended utterances the decoder has not reached, and
those are joined into one decode when the decoder falls behind (see the session).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Job:
    utterance: int
    start: int  # samples (stream positions)
    end: int
    samples: np.ndarray
    final: bool
    submitted: float
    speech_end_wall: float | None = None
    speech_end: int = 0
    reason: str = ""
    urgent: bool = False
    cancelled: bool = False
    commit: bool = False  # a settle: commit the whole hypothesis (the utterance stays open)
    # A final decode that covers several ended utterances (merged while the decoder was
    # behind): (utterance, speech_end sample, speech_end wall) of each, in order.
    members: list = field(default_factory=list)

    @property
    def span(self) -> tuple[int, int]:
        return self.start, self.end


class Jobs:
    """Final decodes in order, plus the newest growing-utterance decode (older ones dropped)."""

    def __init__(self, cancel_running) -> None:
        self._cond = threading.Condition()
        self._finals: deque[Job] = deque()
        self._partial: Job | None = None
        self._closed = False
        self.running: Job | None = None
        self._cancel_running = cancel_running
        self.last_finished = 0.0  # perf_counter() when the last job ended
        self.last_partial_seconds = 0.0  # how long the last growing-utterance decode took

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                return
            run = self.running
            if job.final:
                if self._partial is not None and self._partial.utterance <= job.utterance:
                    self._partial = None  # superseded (an equal span is decoded as the final)
                self._finals.append(job)
            else:
                self._partial = job
            if (run is not None and not run.final and run.span != job.span
                    and (job.final or job.urgent)):
                run.cancelled = True
                self._cancel_running()
            self._cond.notify_all()

    def take_mergeable(self, ok) -> Job | None:
        """The next queued final, if ``ok(job)`` says it may join the running one."""
        with self._cond:
            if self._finals and ok(self._finals[0]):
                return self._finals.popleft()
            return None

    @property
    def backlog(self) -> int:
        """Final decodes waiting (the decoder's queue depth)."""
        with self._cond:
            return len(self._finals)

    def idle(self) -> bool:
        with self._cond:
            return self.running is None and self._partial is None and not self._finals

    def take(self) -> Job | None:
        with self._cond:
            while True:
                if self._finals:
                    job = self._finals.popleft()
                elif self._partial is not None:
                    job, self._partial = self._partial, None
                elif self._closed:
                    return None
                else:
                    self._cond.wait()
                    continue
                self.running = job
                return job

    def finished(self, seconds: float) -> None:
        with self._cond:
            if self.running is not None and not self.running.final and seconds > 0:
                self.last_partial_seconds = seconds
            self.running = None
            self.last_finished = time.perf_counter()

    def close(self) -> None:
        """No more jobs: the decoder finishes the queued finals, then stops."""
        with self._cond:
            self._closed = True
            self._partial = None
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self._closed = True
            self._partial = None
            self._finals.clear()
            if self.running is not None:
                self.running.cancelled = True
                self._cancel_running()
            self._cond.notify_all()
