"""Which encoder back end runs here: measured once per machine and model, remembered.

No CPU flag predicts the fastest. OpenVINO bf16 ran the base encoder 1.7× faster than
onnxruntime int8 on an AMD Zen 4 (AVX-512 bf16, no AMX) and 2.3× slower on an Intel guest that
reports the same flag; AMX and library versions move it again. So ``auto`` times the candidates
that exist here on one 30-s window and keeps one of them. But back ends do not compute the same
numbers (their cross keys and values differ in the last bits, and a near-tie between two
tokens then flips: "If prior to a case" / "If Kyle to a case"), so the choice is also what the
words depend on, and it is made so that they do not move:

- **One choice per machine and model, not per thread count.** The candidates are timed with
  :func:`measuring_threads` threads (every core this process may use, what ``--threads``
  defaults to) whatever the caller's count, and the key holds no thread count: ``-t 1``,
  ``-t 2``, ``batch``'s one-thread workers and the server all run the same back end.
- **Kept across re-installs.** The memo lives outside the bundle folder, in the models folder
  that holds it (:func:`memo_path`; the user cache where that is read-only), keyed by the
  model's content (its encoder graph's sha256 and the converter version), the CPU's model name
  and flags, and the onnxruntime and OpenVINO versions: ``as2d models install --force`` or
  deleting the bundle does not forget it; a new library, CPU or model measures again, and
  ``as2d models measure-encoder NAME`` does when asked.
- **A near-tie never flips it.** The incumbent (the back end chosen before for this model, on an
  earlier library or CPU; else the bundle's own onnxruntime graph) keeps its place unless the
  fastest challenger beats it by :data:`MARGIN`.
- **No back end whose numbers depend on the thread count.** The winner's outputs at 1 thread
  and at :func:`check_threads` threads (its warm-up's) on the same window must be bit-identical,
  or it is left out (remembered as skipped, with why) and the next is taken. Measured on base and
  tiny.en (real speech, an Intel Xeon with AMX): onnxruntime int8 and OpenVINO f32, bf16 and
  int8 give bit-identical outputs at 1, 2, 3, 4 and 8 threads on a 30-s window, and at 1, 2 and
  4 threads on windows of 200 to 3000 frames.

Candidates are built, timed and freed one at a time (a warm-up, then up to :data:`RUNS` timed
runs within a share of :data:`BUDGET_S`), so that the first use of a large model never holds
several compiled encoders at once. Within a process a choice is also kept in memory (a cache
that cannot be written must not give two loads two answers), and measurements are serialised
(in the process by a lock, between processes by a lock file beside the memo).

Candidates are the bundle's own onnxruntime graph (int8 or fp32, as installed) and, where the
``openvino`` package imports, the fp32 graph compiled by OpenVINO in f32, its fp16-weight copy
in bf16 and, for an int8 bundle, its int8 weights under OpenVINO's int8 products
(:mod:`.encoders`). One that
cannot be built or run is skipped (and remembered as skipped, with why).
"""

from __future__ import annotations

import gc
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

MEMO_FILE = ".encoder-choice.json"  # in the models folder (else the user cache, unhidden)
LEGACY_MEMO_FILE = MEMO_FILE  # in a bundle folder: as2d before one choice per model
MEMO_VERSION = 2  # 1: per thread count, in the bundle folder
MAX_ENTRIES = 64  # models × machines × library versions seen
MARGIN = 0.10  # a challenger replaces the incumbent only when this much faster
RUNS = 3  # timed runs per candidate after its warm-up
BUDGET_S = 8.0  # timed runs past each candidate's first stop after its share of this
WARMUP_DROP = 2.5  # a warm-up this much slower than the best warm-up is not timed further
ROUND_DROP = 1.5  # a candidate whose timed run is this much slower than the best is done
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
    threads: int = 0  # the thread count it was measured with

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



def measuring_threads() -> int:
    """The thread count the candidates are timed with, whatever the caller runs with: every
    core this process may use (what ``--threads`` defaults to)."""
    from as2d.runtime.sessions import cpu_count

    return cpu_count()


def check_threads() -> int:
    """The thread count whose outputs a candidate's 1-thread outputs must equal: the measuring
    count, and at least 2 (a 1-core machine still splits the work in two)."""
    return max(2, measuring_threads())


def key(candidates: Sequence[EncoderCandidate], model: dict, settings: dict | None = None
        ) -> dict:
    """The full key of one choice: this machine, the model (:func:`as2d.runtime.whisper.
    encoders.model_identity`: its content, not its folder), the candidates and any compile
    ``settings`` their speed depends on. No thread count: one choice serves every count."""
    k = {"version": MEMO_VERSION, "machine": machine(), "model": dict(sorted(model.items())),
         "candidates": [c.name for c in candidates]}
    if settings:
        k["settings"] = dict(sorted(settings.items()))
    return k


def digest(k: dict) -> str:
    return hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:24]


# -- the memo ----------------------------------------------------------------------------------

def _writable_folder(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def memo_path(bundle_dir: Path | None = None) -> Path | None:
    """The memo file, one for every model of a models folder: ``.encoder-choice.json`` in the
    folder that holds the bundle (beside the models folder's other memos), outside the bundle
    folder so that a re-install keeps it; where that cannot be written, ``encoder-choice.json``
    in the user cache (``~/.cache/as2d/``); None when neither can (then a choice lasts as long
    as the process)."""
    if bundle_dir is not None:
        parent = Path(bundle_dir).resolve().parent
        if os.access(parent, os.W_OK | os.X_OK):
            return parent / MEMO_FILE
    try:
        from platformdirs import user_cache_dir

        folder = Path(user_cache_dir("as2d", appauthor=False))
        if _writable_folder(folder):
            return folder / MEMO_FILE.lstrip(".")
    except Exception:  # noqa: BLE001 - no user cache: a choice per process
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


def _write_entries(path: Path, entries: dict) -> bool:
    while len(entries) > MAX_ENTRIES:  # oldest first (dicts keep insertion order)
        entries.pop(next(iter(entries)))
    text = json.dumps({"version": MEMO_VERSION, "entries": entries}, indent=1, sort_keys=True)
    return write_replacing(path, lambda tmp: tmp.write_text(text))


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
    return _write_entries(path, entries)


def _entry_choice(entry: dict, how: str = "remembered") -> EncoderChoice:
    return EncoderChoice(entry["choice"], how, dict(entry.get("seconds") or {}),
                         dict(entry.get("skipped") or {}), int(entry.get("threads") or 0))


def _entries_of(path: Path | None, model: dict) -> list[dict]:
    """The memo's well-formed entries for ``model`` (any machine), oldest first."""
    model = dict(sorted(model.items()))
    return [e for e in read_memo(path).values()
            if isinstance(e, dict) and isinstance(e.get("key"), dict)
            and e["key"].get("model") == model and isinstance(e.get("choice"), str)]


def remembered_here(model: dict, bundle_dir: Path | None = None) -> list[EncoderChoice]:
    """The choices remembered for ``model`` that hold on this machine with these libraries
    (``as2d models list`` shows them): one, unless candidates were narrowed
    (``$AS2D_OPENVINO_PRECISION``, ``--encoder openvino``)."""
    here = machine()
    return [_entry_choice(e) for e in _entries_of(memo_path(bundle_dir), model)
            if e["key"].get("machine") == here]


def _legacy_choice(bundle_dir: Path, names: set[str]) -> str | None:
    """What an older as2d chose for this bundle on this machine (its memo in the bundle folder,
    one choice per thread count): the choice for :func:`measuring_threads`, else for the most
    threads. The incumbent of the first measurement after an upgrade."""
    here = machine()
    found: list[tuple[bool, int, str]] = []
    for e in read_memo(Path(bundle_dir) / LEGACY_MEMO_FILE).values():
        if (isinstance(e, dict) and isinstance(e.get("key"), dict)
                and e["key"].get("machine") == here and e.get("choice") in names):
            t = int(e.get("threads") or 0)
            found.append((t == measuring_threads(), t, e["choice"]))
    return max(found)[-1] if found else None


def incumbent(path: Path | None, model: dict, candidates: Sequence[EncoderCandidate],
              bundle_dir: Path | None = None) -> str:
    """The candidate a challenger must beat by :data:`MARGIN`: the latest choice remembered for
    this model (before a library or CPU changed), else an older as2d's choice for the bundle,
    else the first candidate (the bundle's own onnxruntime graph)."""
    names = {c.name for c in candidates}
    for e in reversed(_entries_of(path, model)):
        if e["choice"] in names:
            return e["choice"]
    if bundle_dir is not None:
        old = _legacy_choice(bundle_dir, names)
        if old is not None:
            return old
    return candidates[0].name


def forget(model: dict, bundle_dir: Path | None = None) -> int:
    """Forget every choice remembered for ``model`` (on any machine, so that the next
    measurement starts from the default, not from an earlier winner), and an older as2d's memo
    in ``bundle_dir``; how many were forgotten. ``as2d models measure-encoder``."""
    path = memo_path(bundle_dir)
    n = 0
    with _lock, _file_lock(_lock_path(path)):
        if path is not None:
            model = dict(sorted(model.items()))
            entries = read_memo(path)
            gone = [d for d, e in entries.items() if isinstance(e, dict)
                    and isinstance(e.get("key"), dict) and e["key"].get("model") == model]
            for d in gone:
                entries.pop(d)
            if gone:
                _write_entries(path, entries)
            n += len(gone)
        if bundle_dir is not None:
            legacy = Path(bundle_dir) / LEGACY_MEMO_FILE
            if legacy.is_file():
                legacy.unlink(missing_ok=True)
                n += 1
        _chosen.clear()
    return n


_lock = threading.RLock()  # one measurement at a time in this process
_chosen: dict[tuple[str, str], EncoderChoice] = {}  # (memo location, key digest) → choice


def _lock_path(memo: Path | None) -> Path | None:
    """One lock beside the memo (``.encoder-choice.lock``): two models measured at once (two
    workers, the drafter beside the target) would each slow the other's candidates."""
    return memo.with_suffix(".lock") if memo is not None else None


@contextmanager
def _file_lock(path: Path | None):
    """Another process measuring: wait for it (then read what it found, if it was this
    model)."""
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


def _digest(outputs: dict) -> str:
    """A digest of every output of one run, bit for bit."""
    h = hashlib.sha256()
    for name, value in sorted(outputs.items()):
        a = np.ascontiguousarray(value)
        h.update(f"{name} {a.dtype} {a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def outputs_digest(encoder, mel: np.ndarray) -> str:
    """A digest of every output of one run of ``mel``, bit for bit."""
    return _digest(encoder.run(mel))


class _Recording:
    """An encoder whose runs also keep a digest of their outputs (the warm-up's is what the
    thread check compares, so the count timed needs no second build)."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.digest: str | None = None

    def __getattr__(self, name: str):
        return getattr(self.encoder, name)

    def run(self, mel: np.ndarray, run_options=None) -> dict:
        out = self.encoder.run(mel, run_options) if run_options is not None else \
            self.encoder.run(mel)
        self.digest = _digest(out)
        return out


def window(n_mels: int) -> np.ndarray:
    """A 30-s window of log-mel-like values: the encoder's cost does not depend on them."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, n_mels, WINDOW_FRAMES), dtype=np.float32) * 0.4 - 0.2)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:200]


Build = Callable[[EncoderCandidate, int], object]  # (candidate, threads) → encoder


def measure(candidates: Sequence[EncoderCandidate], build: Build, mel: np.ndarray,
            threads: int, runs: int | None = None, budget_s: float | None = None,
            digests: dict[str, str] | None = None) -> tuple[dict[str, float], dict[str, str]]:
    """Time each candidate on ``mel`` with ``threads`` threads, **one at a time**: build it, run
    it once (a warm-up: first runs allocate, OpenVINO's more than onnxruntime's), then up to
    ``runs`` timed runs (past the first, only within its share of ``budget_s``), and free it
    before the next is built, so that memory holds one compiled encoder at a time. A
    candidate's time is its best timed run.

    A candidate whose warm-up took :data:`WARMUP_DROP` times the best warm-up so far is not
    timed (its time is its warm-up's), and one whose timed run is :data:`ROUND_DROP` times the
    best so far is not timed again: it cannot win, and the first use of a model should not wait
    on it. Returns each candidate's time (seconds per window) and the skipped ones with why;
    ``digests``, when given, receives each candidate's warm-up outputs' digest.
    """
    runs = RUNS if runs is None else runs
    budget_s = BUDGET_S if budget_s is None else budget_s
    share = budget_s / max(1, len(candidates))
    skipped: dict[str, str] = {}
    seconds: dict[str, float] = {}
    best_warm = best = math.inf
    for c in candidates:
        enc = rec = None
        try:
            start = time.perf_counter()
            enc = build(c, threads)
            rec = _Recording(enc)
            warm = time_run(rec, mel)
            if digests is not None and rec.digest is not None:
                digests[c.name] = rec.digest
            rec = None
            best_warm = min(best_warm, warm)
            seconds[c.name] = warm
            if warm > WARMUP_DROP * best_warm:
                continue
            timed = math.inf
            for i in range(max(1, runs)):
                if i and (time.perf_counter() - start > share or timed > ROUND_DROP * best):
                    break
                timed = min(timed, time_run(enc, mel))
            seconds[c.name] = timed
            best = min(best, timed)
        except Exception as exc:  # noqa: BLE001 - any back end may fail here; the rest serve
            skipped[c.name] = _why(exc)
            seconds.pop(c.name, None)
        finally:
            enc = rec = None  # its sessions, compiled model and thread pools go before the next
            gc.collect()
    return seconds, skipped


def pick(seconds: dict[str, float], order: Sequence[EncoderCandidate], incumbent_name: str
         ) -> str | None:
    """The choice among the candidates measured: the incumbent, unless the fastest other one
    takes less than ``1 - MARGIN`` of its time (a near-tie keeps it). Without a time for the
    incumbent, the fastest (a tie goes to the earlier one in ``order``)."""
    ranked = [c.name for c in order if c.name in seconds and math.isfinite(seconds[c.name])]
    if not ranked:
        return None
    fastest = min(ranked, key=lambda n: seconds[n])
    if incumbent_name not in ranked:
        return fastest
    if seconds[fastest] < (1.0 - MARGIN) * seconds[incumbent_name]:
        return fastest
    return incumbent_name


def thread_invariant(c: EncoderCandidate, build: Build, mel: np.ndarray,
                     counts: Sequence[int], known: dict[int, str] | None = None) -> str | None:
    """None when ``c``'s outputs on ``mel`` are bit-identical at each thread count of
    ``counts`` (built and freed one at a time) and those ``known`` (thread count → digest),
    else why not."""
    seen: dict[int, str] = dict(known or {})
    for t in counts:
        if t in seen:
            continue
        enc = None
        try:
            enc = build(c, t)
            seen[t] = outputs_digest(enc, mel)
        finally:
            enc = None
            gc.collect()
    if len(set(seen.values())) > 1:
        return ("its output depends on the thread count (" + " and ".join(map(str, sorted(seen)))
                + " threads differ)")
    return None


def choose(bundle_dir: Path, candidates: Sequence[EncoderCandidate], model: dict, build: Build,
           n_mels: int, note: Callable[[str], None] | None = None, model_name: str = "",
           settings: dict | None = None) -> EncoderChoice:
    """The choice among ``candidates`` for ``model`` (its content) on this machine, whatever
    thread count the caller runs with; ``build(candidate, threads)`` makes an encoder.

    A remembered choice is taken as it is; otherwise the candidates are measured
    (:func:`measure`; ``note`` says so once), the incumbent kept unless beaten by
    :data:`MARGIN` (:func:`pick`), a winner whose outputs depend on the thread count left out
    (:func:`thread_invariant`), and the result remembered. Raises ``RuntimeError`` when no
    candidate runs.
    """
    k = key(candidates, model, settings)
    d = digest(k)
    path = memo_path(bundle_dir)
    where = str(path or Path(bundle_dir).resolve())
    with _lock:
        known = _chosen.get((where, d)) or _remembered(path, d, candidates)
        if known is not None:
            _chosen[(where, d)] = known
            return known
        with _file_lock(_lock_path(path)):
            known = _remembered(path, d, candidates)  # measured meanwhile by another process
            if known is not None:
                _chosen[(where, d)] = known
                return known
            choice = _measure_and_pick(bundle_dir, path, candidates, model, build, n_mels,
                                       note, model_name)
            if path is not None:
                _write_memo(path, k, choice, _load())
            _chosen[(where, d)] = choice
    return choice


def _measure_and_pick(bundle_dir: Path, path: Path | None,
                      candidates: Sequence[EncoderCandidate], model: dict, build: Build,
                      n_mels: int, note: Callable[[str], None] | None,
                      model_name: str) -> EncoderChoice:
    threads = measuring_threads()
    held = incumbent(path, model, candidates, bundle_dir)
    # The incumbent first: it is always timed in full, and the others' warm-ups compare to it.
    order = sorted(candidates, key=lambda c: c.name != held)
    load = _load()
    if note:
        busy = ""
        if load is not None and load[0] > load[1]:
            busy = (f"; the CPU is busy (load {load[0]:.1f} on {load[1]} cores), which may "
                    f"mislead it: `as2d models measure-encoder {model_name or 'NAME'}` "
                    "measures again")
        note(f"choosing the encoder back end for {model_name or Path(bundle_dir).name} "
             f"on this CPU (once, for every thread count): timing "
             f"{', '.join(c.name for c in order)} on a 30-s window, {threads} "
             f"thread{'s' if threads != 1 else ''}{busy}")
    mel = window(n_mels)
    digests: dict[str, str] = {}
    seconds, skipped = measure(order, build, mel, threads, digests=digests)
    counts = sorted({1, check_threads()})
    while True:
        best = pick(seconds, candidates, held)
        if best is None:
            raise RuntimeError("no encoder back end runs here: " + "; ".join(
                f"{n}: {why}" for n, why in skipped.items()))
        known = {threads: digests[best]} if best in digests else {}
        try:
            why = thread_invariant(EncoderCandidate.parse(best), build, mel, counts, known)
        except Exception as exc:  # noqa: BLE001 - ran while timed, fails now: not to trust
            why = _why(exc)
        if why is None:
            break
        skipped[best] = why
        seconds.pop(best)
    return EncoderChoice(best, "measured", {n: round(s, 4) for n, s in seconds.items()},
                         skipped, int(threads))


def _remembered(path: Path | None, d: str,
                candidates: Sequence[EncoderCandidate]) -> EncoderChoice | None:
    entry = read_memo(path).get(d)
    if not isinstance(entry, dict) or entry.get("choice") not in {c.name for c in candidates}:
        return None
    return _entry_choice(entry)


def forget_in_process() -> None:
    """Drop the choices kept in memory (tests: a new key or memo is read afresh)."""
    with _lock:
        _chosen.clear()
