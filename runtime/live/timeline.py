"""Where the live stream stands: recent samples, and the wall time each was captured at."""

from __future__ import annotations

import bisect

import numpy as np

from as2d.runtime.audio import SAMPLE_RATE


class Clock:
    """Maps stream sample positions to the wall time they were captured at."""

    def __init__(self, speed: float | None) -> None:
        self.rate = SAMPLE_RATE * (speed if speed else 1.0)
        self.paced = speed is None or speed > 0
        self.ends: list[int] = []
        self.walls: list[float] = []

    def add(self, end: int, wall: float) -> None:
        self.ends.append(end)
        self.walls.append(wall)
        if len(self.ends) > 8192:
            del self.ends[:4096], self.walls[:4096]

    def wall_of(self, sample: int) -> float | None:
        if not self.ends:
            return None
        i = bisect.bisect_left(self.ends, sample)
        if i >= len(self.ends):
            i = len(self.ends) - 1
        wall = self.walls[i]
        if self.paced:
            wall -= max(0, self.ends[i] - sample) / self.rate
        return wall


class Buffer:
    """The recent stream: samples from ``base`` on; the part before an utterance is trimmed."""

    def __init__(self) -> None:
        self.data = np.zeros(SAMPLE_RATE * 32, np.float32)
        self.base = 0
        self.n = 0  # valid samples in data

    @property
    def end(self) -> int:
        return self.base + self.n

    def append(self, x: np.ndarray) -> None:
        if self.n + len(x) > len(self.data):
            grown = np.zeros(max(len(self.data) * 2, self.n + len(x)), np.float32)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n : self.n + len(x)] = x
        self.n += len(x)

    def slice(self, a: int, b: int) -> np.ndarray:
        a, b = max(a, self.base), min(b, self.end)
        return self.data[a - self.base : b - self.base].copy()

    def trim(self, before: int) -> None:
        drop = min(max(0, before - self.base), self.n)
        if drop:
            self.data[: self.n - drop] = self.data[drop : self.n]
            self.n -= drop
            self.base += drop
