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


def _flags_digest() -> str:
    import hashlib

    return hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16]


def cpu_model_name() -> str:
    """The CPU's marketing name from /proc/cpuinfo (``model name``), else the platform's."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def runtime_identity() -> str:
    """What a computed result's bits depend on besides the graph and its inputs: the
    onnxruntime version, the machine and the CPU's feature flags (kernels differ by ISA). Keys
    results remembered on disk (row exactness, a prompt head's KV rows), so a new onnxruntime
    or another machine computes them again."""
    import platform

    from as2d.runtime.int8_exact import mode

    return f"onnxruntime {ort.__version__}|{platform.machine()} {_flags_digest()}|int8 {mode()}"


def machine() -> dict:
    """What a timing or an encoder's last bits depend on besides the model: the CPU (its name
    and flags), onnxruntime's and OpenVINO's versions (OpenVINO's read from its metadata, not
    imported: ``import openvino`` costs a second) and which int8 kernel onnxruntime's graphs
    run in (:mod:`as2d.runtime.int8_exact`). Keys the encoder choice and the transcript cache."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from as2d.runtime.int8_exact import mode

    try:
        openvino = version("openvino")
    except PackageNotFoundError:
        openvino = None
    return {"cpu": cpu_model_name(), "arch": platform.machine(), "flags": _flags_digest(),
            "onnxruntime": ort.__version__, "openvino": openvino, "int8": mode()}


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


_OPTIMIZATION = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
_EXECUTION = ort.ExecutionMode.ORT_SEQUENTIAL
# What a session computes with besides its graph (results remembered on disk are keyed by it).
SESSION_SETTINGS = f"{_OPTIMIZATION.name} {_EXECUTION.name}"


# Memory. Each onnxruntime session otherwise grows a CPU arena of its own to the peak of its
# own runs and keeps it: a long AS²D run holds six (the target's encoder and decoder, the
# batched decoder of a fallback, the drafter's encoder and decoder, the cross-attention
# quantiser), most of them idle while another runs. So every session
# allocates from one arena, registered once with onnxruntime's environment: what one session
# frees, another reuses. And no session plans a memory pattern: the pattern is one block
# allocated on the second run of a shape beside the chunks the first run left in the arena,
# which doubled an encoder's activations (+46 MB Whisper base, +35 MB tiny.en) and gained no
# measurable speed. On a 689-s file (AS²D, base-int8 + tiny.en-int8, 2 cores) peak RSS went
# from 1.42-1.45 GB to 0.91-0.96 GB, as fast; where memory lives changes no result (the same
# kernels compute the same bits). $AS2D_SHARED_ARENA=0: an arena per session.
_ARENA_LOCK = threading.Lock()
_shared_arena: bool | None = None


def shared_arena() -> bool:
    """Whether sessions made here allocate from the process's shared CPU arena (registered
    with onnxruntime's environment on the first call)."""
    global _shared_arena
    with _ARENA_LOCK:
        if _shared_arena is None:
            _shared_arena = False
            if os.environ.get("AS2D_SHARED_ARENA", "1").strip() != "0":
                try:
                    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                             ort.OrtMemType.DEFAULT)
                    # (max bytes, extend strategy, initial chunk, max dead bytes): defaults
                    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
                    _shared_arena = True
                except Exception:  # noqa: BLE001 - an onnxruntime without it: arenas per session
                    pass
        return _shared_arena


_libc = None


def _c_library():
    """glibc's functions used here (loaded once), or None where there is no glibc."""
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
            _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


def give_back_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; nothing
    elsewhere). A window's passes free large buffers on several threads (numpy rows, the
    encoders' outputs, OpenVINO's requests), and glibc keeps what each thread freed in that
    thread's arena for its next allocations: a long run's resident memory crept up by what
    the threads had once held at the same time (scripts/memory_probe.py). A call costs a few
    milliseconds."""
    libc = _c_library()
    if libc:
        libc.malloc_trim(0)


_MADV_PAGEOUT = 21  # Linux 5.4: reclaim these pages now; never loses data


def drop_file_pages(*sources: Path) -> None:
    """Reclaim this process's resident pages of the read-only shared file mappings of
    ``sources`` (files, or folders: every file under them), with ``madvise(MADV_PAGEOUT)``
    (Linux; elsewhere, or on an older kernel, nothing).

    OpenVINO maps a compiled encoder's source (its cache blob, or the graph's weights file)
    and reads all of it while building its own copy of the weights, then keeps the mapping for
    the compiled model's life and reads little of it again: most of base's 47-MB blob and
    tiny.en's 19-MB blob stayed resident through a long run (``/proc/self/smaps``). Paging
    out is advice that never loses data, whatever happens between reading the mappings and
    giving it: a page read again comes back from the file, and a range another thread has
    unmapped and reused meanwhile is at most swapped (where a discarding advice would zero
    it). Clean file pages only ever counted as resident; the anonymous memory is the same."""
    libc = _c_library()
    try:
        maps = Path("/proc/self/maps").read_text() if libc else ""
    except OSError:
        return
    roots = [str(Path(s).resolve()) for s in sources]  # the kernel names real paths
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[1] != "r--s":
            continue
        name = fields[5].removesuffix(" (deleted)")
        if any(name == r or name.startswith(r.rstrip("/") + "/") for r in roots):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            libc.madvise(lo, hi - lo, _MADV_PAGEOUT)


def shared_tables(bundle_dir: str | Path, manifest: dict,
                  shape: tuple[int, int]) -> dict[str, ort.OrtValue]:
    """The 16-bit tables a bundle's manifest locates (``tables``: a Whisper decoder's token
    embedding, 53 MB for base), mapped read-only from their data file, as values a session
    takes instead of its own (:func:`make_session`'s ``tables``).

    A bundle's decoder graphs (greedy, batched, alignment) are made from the same weights and
    read the same table; onnxruntime maps each graph's own data file, so a long run that
    touched all of the table in two of them held it twice (+53 MB). One mapping handed to
    every session holds it once. The values keep their mappings alive. Only a table of
    ``shape`` (the model's vocabulary by its width) is taken; anything else in a damaged
    manifest is passed over, and the sessions read their own copies."""
    import numpy as np

    tables = {}
    found = manifest.get("tables")
    for name, where in (found.items() if isinstance(found, dict) else ()):
        try:
            if [int(n) for n in where["shape"]] != list(shape):
                continue
            rows = np.memmap(Path(bundle_dir) / str(where["file"]), dtype=np.float16,
                             mode="r", offset=int(where["offset"]), shape=tuple(shape))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        tables[name] = ort.OrtValue.ortvalue_from_numpy(rows)
    return tables


def takes_optional(session: ort.InferenceSession, name: str) -> bool:
    """Whether ``session``'s graph has the input ``name`` with a default (onnxruntime lists
    such inputs as "overridable initializers", not as inputs)."""
    return any(i.name == name for i in session.get_overridable_initializers())


def make_session(path: str | Path, threads: int, spin: bool = False,
                 tables: dict[str, ort.OrtValue] | None = None) -> ort.InferenceSession:
    """A CPU session of ``path`` with ``threads`` intra-op threads; ``spin``: its pool spins
    between operators while a run lasts (never between runs); ``tables``: initializers it
    reads from these values instead of its own file (:func:`shared_tables`: the same
    bundle's, whose graphs hold the same values). On a CPU whose int8 kernel saturates, ``path``'s
    exact twin is what runs (:mod:`as2d.runtime.int8_exact`)."""
    from as2d.runtime.int8_exact import exact_graph

    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, int(threads))
    so.inter_op_num_threads = 1
    so.execution_mode = _EXECUTION
    so.graph_optimization_level = _OPTIMIZATION
    so.enable_mem_pattern = False  # see shared_arena's note
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin:
        so.add_session_config_entry("session.force_spinning_stop", "1")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    if shared_arena():
        so.add_session_config_entry("session.use_env_allocators", "1")
    for name, value in (tables or {}).items():
        so.add_initializer(name, value)  # a name the graph does not have is ignored
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
