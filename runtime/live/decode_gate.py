"""One engine, many listeners: who decodes next.

The models of one engine decode one thing at a time (the target's sessions use every core, and
the AS²D drafter is one worker), but a server has many users of them: several live sessions and
HTTP requests. Each holds the :class:`DecodeGate` only while one of its decodes runs, so an idle
session (a phone left on the table) holds nothing, and the gate decides who goes next:

1. **End of speech first.** A live session's final, speculative-final or settle decode (what
   turns speech that just ended into committed text) goes before anything else, because that is
   the latency a speaker waits for.
2. **Then round robin by owner.** HTTP requests and growing-utterance decodes (the tentative
   text shown while someone speaks) share what is left; among waiters of the same class the
   owner served least recently goes first, so one busy session cannot starve another.
3. **Nobody starves.** A request that has waited ``promote_after`` seconds goes ahead of the
   end-of-speech decodes (four people talking without pause still let an HTTP request in).
4. **Growing-utterance decodes yield.** They are only a preview, so one that runs while an
   end-of-speech decode or a request waits is stopped after its current pass (``preempt``).

Waiting can be abandoned (``abandon`` is polled): a stale or cancelled decode, a client gone.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

FINAL, REQUEST, PARTIAL = "final", "request", "partial"
_RANK = {FINAL: 0, REQUEST: 1, PARTIAL: 1}


@dataclass
class DecodeTurn:
    """One decode's claim on the gate (waiting, then holding)."""

    owner: str
    kind: str
    seq: int
    since: float
    preempt: Callable[[], None] | None = None
    preempted: bool = False
    granted: bool = False
    waited: float = 0.0


@dataclass
class GateStats:
    decodes: dict[str, int] = field(default_factory=dict)  # by owner
    preempted: int = 0
    promoted: int = 0


class DecodeGate:
    """A fair lock over one engine (see the module's docstring for the policy)."""

    def __init__(self, promote_after: float = 3.0) -> None:
        self.promote_after = promote_after
        self._cond = threading.Condition()
        self._waiting: list[DecodeTurn] = []
        self._holder: DecodeTurn | None = None
        self._served: dict[str, int] = {}  # owner -> sequence number of its last grant
        self._grants = itertools.count(1)
        self._seq = itertools.count()
        self.stats = GateStats()

    # -- what the server shows --------------------------------------------------------------
    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    @property
    def holder(self) -> str | None:
        with self._cond:
            return None if self._holder is None else self._holder.kind

    def free(self) -> bool:
        """Nobody decodes and nobody waits."""
        with self._cond:
            return self._holder is None and not self._waiting

    def decodes(self, owner: str) -> int:
        with self._cond:
            return self.stats.decodes.get(owner, 0)

    def forget(self, owner: str) -> None:
        """The owner is gone (its round-robin place and its count are dropped)."""
        with self._cond:
            self._served.pop(owner, None)
            self.stats.decodes.pop(owner, None)

    # -- taking turns -----------------------------------------------------------------------
    def acquire(self, owner: str, kind: str, abandon: Callable[[], bool] | None = None,
                preempt: Callable[[], None] | None = None) -> DecodeTurn | None:
        """Wait for this decode's turn; None when ``abandon()`` turned true meanwhile.
        ``preempt`` (growing-utterance decodes): how to stop this decode early once it runs."""
        if kind not in _RANK:
            raise ValueError(f"unknown decode kind {kind!r}")
        turn = DecodeTurn(owner, kind, next(self._seq), time.monotonic(),
                    preempt if kind == PARTIAL else None)
        with self._cond:
            self._waiting.append(turn)
            self._preempt_holder()
            while True:
                if self._holder is None and self._next() is turn:
                    self._grant(turn)
                    return turn
                if abandon is not None and abandon():
                    self._waiting.remove(turn)
                    self._cond.notify_all()
                    return None
                self._cond.wait(0.05 if abandon is not None else 0.5)
                self._preempt_holder()

    def release(self, turn: DecodeTurn) -> None:
        with self._cond:
            if self._holder is turn:
                self._holder = None
                self._cond.notify_all()

    def hold(self, owner: str, kind: str, abandon=None, preempt=None) -> _Held:
        """``with gate.hold(...) as turn:`` (``turn`` None: abandoned while waiting)."""
        return _Held(self, owner, kind, abandon, preempt)

    # -- the policy -------------------------------------------------------------------------
    def _key(self, turn: DecodeTurn, now: float) -> tuple:
        rank = _RANK[turn.kind]
        if turn.kind == REQUEST and now - turn.since >= self.promote_after:
            rank = -1  # waited long enough: ahead of the end-of-speech decodes
        return rank, self._served.get(turn.owner, 0), turn.seq

    def _next(self) -> DecodeTurn | None:
        if not self._waiting:
            return None
        now = time.monotonic()
        return min(self._waiting, key=lambda t: self._key(t, now))

    def _grant(self, turn: DecodeTurn) -> None:
        self._waiting.remove(turn)
        now = time.monotonic()
        if self._key(turn, now)[0] < 0:
            self.stats.promoted += 1
        turn.granted, turn.waited = True, now - turn.since
        self._holder = turn
        self._served[turn.owner] = next(self._grants)
        self.stats.decodes[turn.owner] = self.stats.decodes.get(turn.owner, 0) + 1

    def _preempt_holder(self) -> None:
        """A growing-utterance decode gives way to anything but another one."""
        held = self._holder
        if (held is None or held.preempt is None or held.preempted
                or not any(t.kind != PARTIAL for t in self._waiting)):
            return
        held.preempted = True
        self.stats.preempted += 1
        held.preempt()


class _Held:
    def __init__(self, gate: DecodeGate, owner, kind, abandon, preempt) -> None:
        self.gate, self.args = gate, (owner, kind, abandon, preempt)
        self.turn: DecodeTurn | None = None

    def __enter__(self) -> DecodeTurn | None:
        self.turn = self.gate.acquire(*self.args)
        return self.turn

    def __exit__(self, *exc: object) -> None:
        if self.turn is not None:
            self.gate.release(self.turn)
