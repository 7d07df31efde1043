"""The decode gate's policy, with real threads: end-of-speech first, then round robin by owner,
a long-waiting request promoted, growing-utterance decodes preempted, waits abandoned."""

from __future__ import annotations

import threading
import time

from as2d.runtime.live.decode_gate import FINAL, PARTIAL, REQUEST, DecodeGate


def _queue(gate: DecodeGate, claims: list[tuple[str, str]], order: list[str]) -> list:
    """Start one thread per claim (in this order, each waiting before the next starts)."""
    threads = []
    for owner, kind in claims:
        def run(owner=owner, kind=kind):
            with gate.hold(owner, kind) as turn:
                assert turn is not None
                order.append(f"{owner}:{kind}")
                time.sleep(0.01)
        n = gate.waiting
        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
        while gate.waiting <= n:
            time.sleep(0.001)
    return threads


def _served(gate: DecodeGate, owner: str) -> None:
    with gate.hold(owner, PARTIAL):
        pass


def test_end_of_speech_first_then_round_robin_by_owner():
    gate = DecodeGate(promote_after=60)
    for owner in ("s1", "s2"):  # s1 then s2 decoded lately: s3 and requests are owed first
        _served(gate, owner)
    first = gate.acquire("busy", REQUEST)
    order: list[str] = []
    threads = _queue(gate, [("s1", PARTIAL), ("http", REQUEST), ("s2", FINAL),
                            ("s1", FINAL), ("s3", PARTIAL)], order)
    gate.release(first)
    for t in threads:
        t.join(10)
    # finals first, the least recently served owner first (s1 before s2); then the rest
    # round robin: http and s3 never served, then s1
    assert order == ["s1:final", "s2:final", "http:request", "s3:partial", "s1:partial"]
    assert gate.free()


def test_a_request_that_waited_too_long_goes_before_finals():
    gate = DecodeGate(promote_after=0.05)
    first = gate.acquire("s1", FINAL)
    order: list[str] = []
    threads = _queue(gate, [("http", REQUEST)], order)
    time.sleep(0.1)
    threads += _queue(gate, [("s2", FINAL)], order)
    gate.release(first)
    for t in threads:
        t.join(10)
    assert order == ["http:request", "s2:final"] and gate.stats.promoted == 1


def test_a_growing_utterance_decode_yields_and_a_wait_can_be_abandoned():
    gate = DecodeGate()
    stopped = threading.Event()
    partial = gate.acquire("s1", PARTIAL, preempt=stopped.set)
    other = threading.Thread(target=_served, args=(gate, "s2"))  # another partial: no yield
    other.start()
    time.sleep(0.1)
    assert not stopped.is_set()
    gone = threading.Event()
    out: list = []
    waiter = threading.Thread(target=lambda: out.append(
        gate.acquire("http", REQUEST, abandon=gone.is_set)))
    waiter.start()
    assert stopped.wait(5)  # a request waits: the preview is stopped after its pass
    gone.set()
    waiter.join(5)
    assert out == [None] and gate.stats.preempted == 1
    gate.release(partial)
    other.join(5)
    assert gate.free()

