"""Which encoder back end is fastest here: measured once per machine and model, remembered.

No CPU flag predicts it. OpenVINO bf16 ran the base encoder 1.7× faster than onnxruntime int8
on an AMD Zen 4 (AVX-512 bf16, no AMX) and 2.3× slower on an Intel guest that reports the same
flag; AMX, thread count and library versions move it again. So ``auto`` times the candidates
that exist here on one 30-s window (a warm-up each, then a few interleaved runs, so that a
neighbour's burst on a shared CPU hits every candidate alike), keeps the fastest, and
remembers it in the bundle folder (:data:`MEMO_FILE`) under a key that holds everything the
answer depends on: the CPU's model name and flags, the onnxruntime and OpenVINO versions, the
thread count, the encoder graphs and the candidates. A new library, CPU or graph measures again.

Once remembered, the choice is fixed: every later load, in this process or another, takes the
same back end, so target-only decoding and AS²D consume the same encoder output and stay token
for token identical. Within a process a choice is also kept in memory (a folder that cannot be
written must not give two loads two answers), and measurements are serialised (in the process
by a lock, between processes by a lock file beside the memo) so that two models measured at
once, the drafter beside the target or two workers, do not slow each other's candidates.

Candidates are the bundle's own onnxruntime graph (int8 or fp32, as installed) and, where the
``openvino`` package imports, the fp32 graph compiled by OpenVINO in f32 and in bf16 and, for an
int8 bundle, its int8 weights under OpenVINO's int8 products (:mod:`.encoders`). One that
cannot be built or run is skipped (and remembered as skipped, with why).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from as2d.runtime.files import write_replacing

MEMO_FILE = ".encoder-choice.json"  # in the bundle folder (else the user cache)
MEMO_VERSION = 1
MAX_ENTRIES = 32  # per bundle: thread counts × machines × library versions seen
RUNS = 3  # timed runs per candidate after its warm-up, interleaved across candidates
BUDGET_S = 8.0  # a round of timed runs starts only if it should end within this many seconds
WARMUP_DROP = 2.5  # a warm-up this much slower than the best warm-up is not timed further
ROUND_DROP = 1.5  # a candidate this much slower than the best so far leaves the rounds
WINDOW_FRAMES = 3000  # one 30-s window of log-mel frames


@dataclass(frozen=True)
class EncoderCandidate:
    backend: str  # "onnxruntime" or "openvino"
    precision: str  # onnxruntime: the graph's (int8, fp32); OpenVINO: what it computes in

    @property
    def name(self) -> str:
        return f"{self.backend} {self.precision}"

    @classmethod
    def parse(cls, name: str) -> EncoderCandidate:
        backend, _, precision = name.partition(" ")
        return cls(backend, precision)


@dataclass
class EncoderChoice:
    """A back end and how it was chosen: ``measured`` now, ``remembered`` from an earlier
    measurement, or ``asked`` (``--encoder``, ``$AS2D_ENCODER``, a precision override, or the
    only candidate there is)."""

    name: str  # "openvino bf16"
    how: str  # measured | remembered | asked
    seconds: dict[str, float] = field(default_factory=dict)  # per 30-s window, best run
    skipped: dict[str, str] = field(default_factory=dict)  # candidate → why it could not run
    threads: int = 0

    @property
    def candidate(self) -> EncoderCandidate:
        return EncoderCandidate.parse(self.name)

    def describe(self) -> str:
        """For ``--stats`` and ``as2d bench``: the back end, and what it beat."""
        if self.how == "asked" or self.name not in self.seconds:
            return self.name
        others = ", ".join(f"{n} {s:.3f}" for n, s in sorted(self.seconds.items(),
                                                              key=lambda kv: kv[1])
                           if n != self.name)
        return (f"{self.name} ({self.how}: {self.seconds[self.name]:.3f} s per 30-s window"
                + (f"; {others}" if others else "") + ")")

    def to_dict(self) -> dict:
        return {"choice": self.name, "seconds": self.seconds, "skipped": self.skipped,
                "threads": self.threads}


# -- the key -----------------------------------------------------------------------------------

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


def _version(package: str) -> str | None:
    """An installed distribution's version, without importing it (``models list`` reads the
    key of this machine and must not pay for ``import openvino``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def machine() -> dict:
    """What a timing depends on besides the model and threads: the CPU, the libraries, and
    which int8 kernel onnxruntime's graphs run in (:mod:`as2d.runtime.int8_exact`)."""
    import platform

    import onnxruntime as ort

    from as2d.runtime.int8_exact import mode
    from as2d.runtime.sessions import cpu_flags

    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16]
    return {"cpu": cpu_model_name(), "arch": platform.machine(), "flags": flags,
            "onnxruntime": ort.__version__, "openvino": _version("openvino"), "int8": mode()}


def key(threads: int, candidates: Sequence[EncoderCandidate], graphs: dict[str, str],
        settings: dict | None = None) -> dict:
    """The full key of one measurement: this machine, the thread count, the candidates timed,
    the digests of the graphs they run and any compile ``settings`` their speed depends on
    (absent when there are none, so that older memos keep their keys)."""
    k = {"version": MEMO_VERSION, "machine": machine(), "threads": int(threads),
         "candidates": [c.name for c in candidates], "graphs": dict(sorted(graphs.items()))}
    if settings:
        k["settings"] = dict(sorted(settings.items()))
    return k


def digest(k: dict) -> str:
    return hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:24]


# -- the memo ----------------------------------------------------------------------------------

def memo_path(bundle_dir: Path) -> Path | None:
    """The memo file: in the bundle folder when it can be written, else in the user cache (one
    file per bundle folder); None when neither can."""
    bundle_dir = Path(bundle_dir)
    if os.access(bundle_dir, os.W_OK | os.X_OK):
        return bundle_dir / MEMO_FILE
    try:
        from platformdirs import user_cache_dir

        tag = hashlib.sha256(str(bundle_dir.resolve()).encode()).hexdigest()[:16]
        folder = Path(user_cache_dir("as2d", appauthor=False)) / "encoder-choice"
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK | os.X_OK):
            return folder / f"{bundle_dir.name}-{tag}.json"
    except Exception:  # noqa: BLE001 - no cache folder: measure once per process
        pass
    return None


def read_memo(path: Path | None) -> dict:
    """The memo's entries (digest → entry); empty when absent or unreadable."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    return entries if isinstance(entries, dict) else {}


def _load() -> tuple[float, int] | None:
    """The 1-minute load average and the cores this process may use (None where unknown): a
    measurement on a machine busy with other work is worth a warning and a record."""
    try:
        from as2d.runtime.sessions import cpu_count

        return os.getloadavg()[0], cpu_count()
    except (OSError, AttributeError):
        return None


def _write_memo(path: Path, k: dict, choice: EncoderChoice,
                load: tuple[float, int] | None = None) -> bool:
    entries = read_memo(path)
    entries.pop(digest(k), None)
    entries[digest(k)] = {"key": k, **choice.to_dict(),
                          "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "load": None if load is None else [round(load[0], 2), load[1]]}
    while len(entries) > MAX_ENTRIES:  # oldest first (dicts keep insertion order)
        entries.pop(next(iter(entries)))
    text = json.dumps({"version": MEMO_VERSION, "entries": entries}, indent=1, sort_keys=True)
    return write_replacing(path, lambda tmp: tmp.write_text(text))


def remembered_here(bundle_dir: Path) -> list[EncoderChoice]:
    """The choices remembered for ``bundle_dir`` that hold on this machine with these libraries
    (``as2d models list`` shows them), fewest threads first."""
    path = memo_path(bundle_dir)
    here = machine()
    out = []
    for entry in read_memo(path).values():
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), dict):
            continue
        if entry["key"].get("machine") != here or not isinstance(entry.get("choice"), str):
            continue
        out.append(EncoderChoice(entry["choice"], "remembered",
                                 dict(entry.get("seconds") or {}),
                                 dict(entry.get("skipped") or {}),
                                 int(entry.get("threads") or 0)))
    return sorted(out, key=lambda c: c.threads)


_lock = threading.Lock()  # one measurement at a time in this process
_chosen: dict[tuple[str, str], EncoderChoice] = {}  # (memo location, key digest) → choice


def _lock_path(bundle_dir: Path, memo: Path | None) -> Path | None:
    """One lock for every bundle of a models folder: two models measured at once (two
    workers, or another user's process) would each slow the other's candidates."""
    parent = Path(bundle_dir).resolve().parent
    if os.access(parent, os.W_OK | os.X_OK):
        return parent / ".encoder-choice.lock"
    return memo.with_name(memo.name + ".lock") if memo is not None else None


@contextmanager
def _file_lock(path: Path | None):
    """Another process measuring: wait for it (then read what it found, if it was this
    bundle)."""
    handle = None
    if path is not None:
        try:
            import fcntl

            handle = open(path, "a")  # noqa: SIM115
            fcntl.flock(handle, fcntl.LOCK_EX)
        except (OSError, ImportError):
            if handle is not None:
                handle.close()
            handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()  # releases the lock


# -- measuring ---------------------------------------------------------------------------------

def time_run(encoder, mel: np.ndarray) -> float:
    """Seconds one encoder run of ``mel`` takes (tests inject their own)."""
    t0 = time.perf_counter()
    encoder.run(mel)
    return time.perf_counter() - t0


def window(n_mels: int) -> np.ndarray:
    """A 30-s window of log-mel-like values: the encoder's cost does not depend on them."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, n_mels, WINDOW_FRAMES), dtype=np.float32) * 0.4 - 0.2)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:200]


def measure(candidates: Sequence[EncoderCandidate], build: Callable[[EncoderCandidate], object],
            mel: np.ndarray, runs: int | None = None, budget_s: float | None = None
            ) -> tuple[dict[str, float], dict[str, str], dict[str, object]]:
    """Time each candidate on ``mel``: build it and run it once (a warm-up: first runs
    allocate, OpenVINO's more than onnxruntime's), then interleaved rounds of one run each: the
    first always, up to ``runs`` while a round should end within ``budget_s`` seconds of the
    start (builds and warm-ups included). A candidate's time is its best timed run.

    A candidate whose warm-up took :data:`WARMUP_DROP` times the best warm-up, or whose best
    run is :data:`ROUND_DROP` times the best so far, is not timed again: it cannot win, and the
    first use of a model should not wait on it (its time is then its warm-up's). Returns each
    candidate's time (seconds per window), the skipped ones with why, and the encoders built
    (the winner is used as it is).
    """
    runs = RUNS if runs is None else runs
    budget_s = BUDGET_S if budget_s is None else budget_s
    start = time.perf_counter()
    skipped: dict[str, str] = {}
    built: dict[str, object] = {}
    warm: dict[str, float] = {}
    for c in candidates:
        try:
            enc = build(c)
            warm[c.name] = time_run(enc, mel)
        except Exception as exc:  # noqa: BLE001 - any back end may fail here; the rest serve
            skipped[c.name] = _why(exc)
            continue
        built[c.name] = enc
    if not warm:
        return {}, skipped, built
    best_warm = min(warm.values())
    alive = [n for n in warm if warm[n] <= WARMUP_DROP * best_warm]
    timed: dict[str, float] = {}
    for i in range(runs):
        if len(alive) < 2:
            break
        if i and time.perf_counter() - start + sum(timed[n] for n in alive) > budget_s:
            break
        for name in list(alive):
            try:
                t = time_run(built[name], mel)
            except Exception as exc:  # noqa: BLE001 - failed once warm: not to be trusted
                skipped[name] = _why(exc)
                alive.remove(name)
                continue
            timed[name] = min(timed.get(name, math.inf), t)
        if alive:
            floor = min(timed[n] for n in alive)
            alive = [n for n in alive if timed[n] <= ROUND_DROP * floor]
    seconds = {n: timed.get(n, warm[n]) for n in warm if n not in skipped}
    return seconds, skipped, built


def fastest(seconds: dict[str, float], order: Sequence[EncoderCandidate]) -> str | None:
    """The fastest candidate measured; a tie goes to the earlier one in ``order``."""
    ranked = [c.name for c in order if c.name in seconds and math.isfinite(seconds[c.name])]
    return min(ranked, key=lambda n: seconds[n]) if ranked else None


def choose(bundle_dir: Path, candidates: Sequence[EncoderCandidate], threads: int,
           graphs: dict[str, str], build: Callable[[EncoderCandidate], object], n_mels: int,
           note: Callable[[str], None] | None = None, model_name: str = "",
           settings: dict | None = None) -> tuple[EncoderChoice, object | None]:
    """The choice among ``candidates`` for this bundle, machine and thread count, and the
    winner's encoder when it was built while measuring (else None: build it).

    Remembered choices are taken as they are; otherwise the candidates are measured (``note``
    says so once) and the result remembered. Raises ``RuntimeError`` when no candidate runs.
    """
    k = key(threads, candidates, graphs, settings)
    d = digest(k)
    path = memo_path(bundle_dir)
    where = str(path or Path(bundle_dir).resolve())
    with _lock:
        known = _chosen.get((where, d)) or _remembered(path, d, candidates)
        if known is not None:
            _chosen[(where, d)] = known
            return known, None
        with _file_lock(_lock_path(bundle_dir, path)):
            known = _remembered(path, d, candidates)  # measured meanwhile by another process
            if known is not None:
                _chosen[(where, d)] = known
                return known, None
            load = _load()
            if note:
                busy = ""
                if load is not None and load[0] > load[1]:
                    busy = (f"; the CPU is busy (load {load[0]:.1f} on {load[1]} cores), which "
                            f"may mislead it: remove {MEMO_FILE} in the model folder to measure "
                            "again")
                note(f"choosing the encoder back end for {model_name or Path(bundle_dir).name} "
                     f"on this CPU (once): timing {', '.join(c.name for c in candidates)} on a "
                     f"30-s window, {threads} thread{'s' if threads != 1 else ''}{busy}")
            seconds, skipped, built = measure(candidates, build, window(n_mels))
            best = fastest(seconds, candidates)
            if best is None:
                raise RuntimeError("no encoder back end runs here: " + "; ".join(
                    f"{n}: {why}" for n, why in skipped.items()))
            choice = EncoderChoice(best, "measured",
                                   {n: round(s, 4) for n, s in seconds.items()}, skipped,
                                   int(threads))
            if path is not None:
                _write_memo(path, k, choice, load)
            _chosen[(where, d)] = choice
    winner = built.pop(best, None)
    built.clear()  # the losers' sessions and compiled models go now
    return choice, winner


def _remembered(path: Path | None, d: str,
                candidates: Sequence[EncoderCandidate]) -> EncoderChoice | None:
    entry = read_memo(path).get(d)
    if not isinstance(entry, dict) or entry.get("choice") not in {c.name for c in candidates}:
        return None
    return EncoderChoice(entry["choice"], "remembered", dict(entry.get("seconds") or {}),
                         dict(entry.get("skipped") or {}), int(entry.get("threads") or 0))


def forget_in_process() -> None:
    """Drop the choices kept in memory (tests: a new key or memo is read afresh)."""
    with _lock:
        _chosen.clear()
