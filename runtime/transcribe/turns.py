"""Whose turn it is on a small machine: the target's encoder before a drafter that is ahead.

On two cores the target's encoder is most of a run's time and scales with threads, while the
drafter is soon windows ahead; running both then only slows the encoder the target waits for
(7.2 s of encoder alone, 9.6 s beside the drafter, on a 10-minute file). So while the target
encodes a window already drafted, the drafter waits. Which tokens are committed never depends
on this, only when candidates arrive.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class EncoderTurns:
    """Shared by a run's target side and its drafter workers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._audio: object | None = None  # the audio whose window the target encodes
        self._end = 0.0  # where that window ends, seconds

    @contextmanager
    def target_encoding(self, audio: object, end: float) -> Iterator[None]:
        """The target encodes the window of ``audio`` that ends at ``end`` seconds."""
        with self._cond:
            self._audio, self._end = audio, end
        try:
            yield
        finally:
            with self._cond:
                self._audio = None
                self._cond.notify_all()

    def wait_if_ahead(self, audio: object, drafted_until: float, stop: threading.Event) -> None:
        """A drafter of ``audio`` with everything before ``drafted_until`` drafted: wait while
        the target encodes a window that needs no more of it (or another file's window, which
        comes first). Returns at once otherwise, or when ``stop`` is set.

        Called before every drafter step: with no encoder running it returns without taking
        the lock (a stale read only moves a wait by one step)."""
        if self._audio is None:
            return
        while not stop.is_set():
            with self._cond:
                busy = self._audio is not None and (
                    self._audio is not audio or drafted_until >= self._end)
                if not busy:
                    return
                self._cond.wait(0.05)  # wakes on the encoder's end; the timeout checks stop
