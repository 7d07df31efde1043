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



class _StickyTranscriber:
    """Like LongFormTranscriber: a stop applies to the run in progress, or to the next run
    when none is in progress (the run's end clears it)."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def discard_stop(self) -> None:
        self.stopped = False

    def run(self, during=None):
        """One decode: None when stopped (a stop left from before included)."""
        if during is not None:
            during()
        out = None if self.stopped else ("text", 1, 0.0)
        self.stopped = False  # the run's end
        return out


def _session(gate: DecodeGate):
    from as2d.runtime.live.session import LiveSession

    s = LiveSession.__new__(LiveSession)  # only the decode-turn machinery
    s.gate, s.owner, s.transcriber = gate, "s1", _StickyTranscriber()
    s._decoding, s._decoding_lock, s._stop_sent = None, threading.Lock(), False
    return s


def _job(final: bool):
    import numpy as np

    from as2d.runtime.live.jobs import Job

    return Job(0, 0, 1600, np.zeros(1600, np.float32), final, time.perf_counter())


def test_a_preempt_between_decodes_does_not_stop_the_next_decode():
    """The final arrives after the partial's decode returned but before its turn ended: the
    partial keeps its result, and no stop is left over for the final's decode."""
    gate = DecodeGate(promote_after=60)
    s = _session(gate)
    s._decode_now = lambda job: s.transcriber.run()
    partial, final = _job(False), _job(True)
    results: dict = {}
    with s._turn(partial) as turn:
        assert turn is not None
        results["partial"] = s._decode(partial)
        t = threading.Thread(target=lambda: results.setdefault("final", _final(s, final)))
        t.start()
        while not gate.stats.preempted:  # the final waits: the holder's preempt fired
            time.sleep(0.001)
    t.join(5)
    assert results == {"partial": ("text", 1, 0.0), "final": ("text", 1, 0.0)}
    assert not s.transcriber.stopped and s._decoding is None


def _final(s, job):
    with s._turn(job) as turn:
        assert turn is not None
        return s._decode(job)


def test_a_preempt_during_a_decode_stops_it_and_only_it():
    gate = DecodeGate(promote_after=60)
    s = _session(gate)
    partial, final = _job(False), _job(True)
    running, stopped = threading.Event(), threading.Event()

    def during():
        running.set()
        while not s.transcriber.stopped:
            time.sleep(0.001)
        stopped.set()

    s._decode_now = lambda job: s.transcriber.run(during if job is partial else None)
    results: dict = {}

    def run_partial():
        with s._turn(partial) as turn:
            assert turn is not None
            results["partial"] = s._decode(partial)

    t = threading.Thread(target=run_partial)
    t.start()
    running.wait(5)
    results["final"] = _final(s, final)
    t.join(5)
    assert stopped.is_set() and partial.cancelled and gate.stats.preempted == 1
    assert results == {"partial": None, "final": ("text", 1, 0.0)}


def test_a_preempt_after_the_turn_began_and_before_the_decode_skips_it():
    gate = DecodeGate(promote_after=60)
    s = _session(gate)
    s._decode_now = lambda job: s.transcriber.run()
    partial = _job(False)
    with s._turn(partial):
        gate._holder.preempt()  # as the gate sends it to its holder
        assert s._decode(partial) is None
    assert not s.transcriber.stopped
