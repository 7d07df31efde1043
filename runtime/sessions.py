"""onnxruntime sessions with explicit thread pools, spinning only where no one else works.

Two sessions (drafter and target) share two cores. Each gets an explicit intra-op thread count
and one inter-op thread. A pool that spins between operators wakes at once for the next one
(a Whisper base decoder step: about 9 ms without spinning, 5-6 ms with it, on two threads),
but a spinning pool burns the core another session needs: so sessions that run beside another
model (AS²D's target and drafter) do not spin, and sessions that have the machine to themselves
(target-only decoding, the answering model) do, with their spinning stopped after each run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import onnxruntime as ort

from as2d.runtime.quiet import quiet_onnxruntime

quiet_onnxruntime(ort)  # events off even where onnxruntime was imported before as2d


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags the kernel reports (Linux); empty where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def runtime_identity() -> str:
    """What a computed result's bits depend on besides the graph and its inputs: the
    onnxruntime version, the machine and the CPU's feature flags (kernels differ by ISA). Keys
    results remembered on disk (row exactness, a prompt head's KV rows), so a new onnxruntime
    or another machine computes them again."""
    import hashlib
    import platform

    from as2d.runtime.int8_exact import mode

    cpu = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16]
    return f"onnxruntime {ort.__version__}|{platform.machine()} {cpu}|int8 {mode()}"


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


_OPTIMIZATION = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
_EXECUTION = ort.ExecutionMode.ORT_SEQUENTIAL
# What a session computes with besides its graph (results remembered on disk are keyed by it).
SESSION_SETTINGS = f"{_OPTIMIZATION.name} {_EXECUTION.name}"


def make_session(path: str | Path, threads: int, spin: bool = False) -> ort.InferenceSession:
    """A CPU session of ``path`` with ``threads`` intra-op threads; ``spin``: its pool spins
    between operators while a run lasts (never between runs). On a CPU whose int8 kernel
    saturates, ``path``'s exact twin is what runs (:mod:`as2d.runtime.int8_exact`)."""
    from as2d.runtime.int8_exact import exact_graph

    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, int(threads))
    so.inter_op_num_threads = 1
    so.execution_mode = _EXECUTION
    so.graph_optimization_level = _OPTIMIZATION
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin:
        so.add_session_config_entry("session.force_spinning_stop", "1")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    graph = exact_graph(path)
    return ort.InferenceSession(graph if isinstance(graph, bytes) else str(graph), so,
                                providers=["CPUExecutionProvider"])


class Background:
    """``fn(*args)`` on a daemon thread; :meth:`result` waits for it (and re-raises).

    Start-up work that releases the GIL (onnxruntime builds sessions without it) overlaps this
    way; a result nobody asks for is dropped with the thread."""

    def __init__(self, fn: Callable, *args, name: str = "as2d-load") -> None:
        self._value = self._error = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True,
                                        name=name)
        self._thread.start()

    def _run(self, fn: Callable, args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # re-raised by result(), in the caller's thread
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
