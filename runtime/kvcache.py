"""A self-attention KV cache that makes speculative verification cheap.

Every layer's keys and values live in arrays preallocated to the context capacity, one row per
position. A decoder pass reads the valid rows as zero-copy views and returns only the new rows,
which are written in place; dropping rejected candidates is then just a smaller ``length``.
(``np.zeros`` pages are only backed by memory once written, so a large capacity costs nothing
until a sequence grows into it.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

import numpy as np


class StatePool:
    """Decode states kept for reuse, by shape: a cache preallocated to the context is made
    once per shape (one row, a beam of five, an answer's) and recycled from window to window.
    Thread-safe: a drafter and the target take states of one model at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[Hashable, list] = {}

    def take(self, shape: Hashable, make: Callable[[], object]):
        """A released state of ``shape``, else ``make()``'s."""
        with self._lock:
            free = self._free.get(shape)
            state = free.pop() if free else None
        return state if state is not None else make()

    def give(self, shape: Hashable, state) -> None:
        with self._lock:
            self._free.setdefault(shape, []).append(state)


class KVCache:
    """One sequence's cache."""

    slots = 0  # one sequence (a :class:`StatePool` shape)

    def __init__(self, layers: int, capacity: int, width: int) -> None:
        self.capacity = capacity
        self.k = [np.zeros((capacity, width), np.float32) for _ in range(layers)]
        self.v = [np.zeros((capacity, width), np.float32) for _ in range(layers)]
        self.length = 0
        # Per layer: (past key, past value, new key, new value) names, made once.
        self._names = [(f"past_k_{i}", f"past_v_{i}", f"new_k_{i}", f"new_v_{i}")
                       for i in range(layers)]

    def reset(self) -> None:
        """Empty (before a prompt)."""
        self.length = 0

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


class PooledCache:
    """The self-attention cache of several hypotheses (beam search), one pool for all of them.

    Every layer's rows live in a pool preallocated as ``[capacity, slots, width]``: the row of
    the hypothesis in slot ``s`` at position ``t`` is pool row ``t * slots + s``. Each live
    hypothesis is a row of :attr:`index`, the pool rows of its positions; a pass reads its
    past through that index (the graph gathers it), so keeping, dropping or forking hypotheses
    reorders index rows of a few hundred integers and never copies a cache. A pass writes only
    the positions after the current length, which no live hypothesis refers to yet.
    """

    def __init__(self, layers: int, capacity: int, width: int, slots: int) -> None:
        self.capacity, self.slots, self.width = capacity, slots, width
        self.k = [np.zeros((capacity, slots, width), np.float32) for _ in range(layers)]
        self.v = [np.zeros((capacity, slots, width), np.float32) for _ in range(layers)]
        self.index = np.zeros((1, 0), np.int64)  # [hypotheses, length]: pool rows
        self._names = [(f"past_k_{i}", f"past_v_{i}", f"new_k_{i}", f"new_v_{i}")
                       for i in range(layers)]

    @property
    def length(self) -> int:
        return self.index.shape[1]

    @property
    def hypotheses(self) -> int:
        return self.index.shape[0]

    def reset(self) -> None:
        """One empty hypothesis (before the prompt)."""
        self.index = np.zeros((1, 0), np.int64)

    def _run(self, session, outputs: list[str], feed: dict, tokens: np.ndarray) -> dict:
        """One pass of ``tokens [hypotheses, T]``, each row after its hypothesis's past."""
        b, t = tokens.shape
        n, s = self.length, self.slots
        if b != self.hypotheses:
            raise ValueError(f"{b} token rows for {self.hypotheses} hypotheses")
        if b > s:
            raise ValueError(f"{b} hypotheses in a pool of {s} slots")
        if n + t > self.capacity:
            raise ValueError(f"decoder context is full ({n} + {t} > {self.capacity})")
        rows = max(1, n * s)  # an empty past still needs a (never read) pool row
        feed["tokens"] = tokens
        feed["past_index"] = self.index
        for k, v, (pk, pv, _, _) in zip(self.k, self.v, self._names):
            feed[pk] = k.reshape(-1, self.width)[:rows]
            feed[pv] = v.reshape(-1, self.width)[:rows]
        out = dict(zip(outputs, session.run(outputs, feed)))
        for k, v, (_, _, nk, nv) in zip(self.k, self.v, self._names):
            k[n:n + t, :b] = out[nk].transpose(1, 0, 2)
            v[n:n + t, :b] = out[nv].transpose(1, 0, 2)
        new = ((n + np.arange(t, dtype=np.int64))[None, :] * s
               + np.arange(b, dtype=np.int64)[:, None])
        self.index = np.concatenate([self.index, new], axis=1)
        return out

    def reorder(self, sources) -> None:
        """Keep hypotheses ``sources`` (indices of the current ones, repeats fork them)."""
        self.index = self.index[np.asarray(sources, dtype=np.int64)]

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on, in every hypothesis."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} to {length}")
        self.index = self.index[:, :length]
