"""A self-attention KV cache that makes speculative verification cheap.

Every layer's keys and values live in arrays preallocated to the context capacity, one row per
position. A decoder pass reads the valid rows as zero-copy views and returns only the new rows,
which are written in place; dropping rejected candidates is then just a smaller ``length``.
(``np.zeros`` pages are only backed by memory once written, so a large capacity costs nothing
until a sequence grows into it.)
"""

from __future__ import annotations

import numpy as np


class KVCache:
    def __init__(self, layers: int, capacity: int, width: int) -> None:
        self.capacity = capacity
        self.k = [np.zeros((capacity, width), np.float32) for _ in range(layers)]
        self.v = [np.zeros((capacity, width), np.float32) for _ in range(layers)]
        self.length = 0
        self.passes = 0

    def _run(self, session, outputs: list[str], feed: dict, t: int, what: str) -> dict:
        """One pass of ``t`` new tokens: past rows in, new rows written after them."""
        n = self.length
        if n + t > self.capacity:
            raise ValueError(f"{what} context is full ({n} + {t} > {self.capacity})")
        for i in range(len(self.k)):
            feed[f"past_k_{i}"] = self.k[i][:n]
            feed[f"past_v_{i}"] = self.v[i][:n]
        out = dict(zip(outputs, session.run(outputs, feed)))
        for i in range(len(self.k)):
            self.k[i][n : n + t] = out[f"new_k_{i}"]
            self.v[i][n : n + t] = out[f"new_v_{i}"]
        self.length = n + t
        self.passes += 1
        return out

    def truncate(self, length: int) -> None:
        """Forget every cached position from ``length`` on (rejected candidates)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} to {length}")
        self.length = length
