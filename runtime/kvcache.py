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
        # Per layer: (past key, past value, new key, new value) names, made once.
        self._names = [(f"past_k_{i}", f"past_v_{i}", f"new_k_{i}", f"new_v_{i}")
                       for i in range(layers)]

    def _run(self, session, outputs: list[str], feed: dict, t: int, what: str) -> dict:
        """One pass of ``t`` new tokens: past rows in, new rows written after them."""
        n = self.length
        self.feed_past(feed, t, what)
        out = dict(zip(outputs, session.run(outputs, feed)))
        for k, v, (_, _, nk, nv) in zip(self.k, self.v, self._names):
            k[n : n + t] = out[nk]
            v[n : n + t] = out[nv]
        self.length = n + t
        return out

    def feed_past(self, feed: dict, t: int, what: str) -> None:
        """Put the cached rows into ``feed`` for a pass of ``t`` new tokens (zero-copy views),
        or raise if they would not fit."""
        n = self.length
        if n + t > self.capacity:
            raise ValueError(f"{what} context is full ({n} + {t} > {self.capacity})")
        for k, v, (pk, pv, _, _) in zip(self.k, self.v, self._names):
            feed[pk] = k[:n]
            feed[pv] = v[:n]

    def truncate(self, length: int) -> None:
        """Forget every cached position from ``length`` on (rejected candidates)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} to {length}")
        self.length = length
