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
- **A near-tie never flips it.** The incumbent (the back end chosen last for this model, on an
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
(in the process by a lock, between processes by a lock file beside the memo: two models
measured at once, two workers or the drafter beside the target, would slow each other's
candidates).

Candidates are the bundle's own onnxruntime graph (int8 or fp32, as installed) and, where the
``openvino`` package imports, the fp32 graph compiled by OpenVINO in f32, its fp16-weight copy
in bf16 and, for an int8 bundle, its int8 weights under OpenVINO's int8 products
(:mod:`.encoders`). One that cannot be built or run is skipped (and remembered as skipped,
with why).
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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from as2d.runtime.files import exclusive, user_cache, write_replacing
from as2d.runtime.sessions import cpu_count, machine

MEMO_FILE = ".encoder-choice.json"  # in the models folder (else the user cache, unhidden)
MEMO_VERSION = 2  # 1 (as2d 0.1.x): per thread count, in the bundle folder; no longer read
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

    @classmethod
    def remembered(cls, entry: dict) -> EncoderChoice:
        """The choice a memo entry holds."""
        return cls(entry["choice"], "remembered", dict(entry.get("seconds") or {}),
                   dict(entry.get("skipped") or {}), int(entry.get("threads") or 0))


def measuring_threads() -> int:
    """The thread count the candidates are timed with, whatever the caller runs with: every
    core this process may use (what ``--threads`` defaults to)."""
    return cpu_count()


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


# -- the memo: {"version": 2, "entries": {key digest: {"key", "choice", "seconds", ...}}} ----

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
    folder = user_cache()
    return folder / MEMO_FILE.lstrip(".") if folder is not None else None


def _entries(path: Path | None) -> dict[str, dict]:
    """The memo's well-formed entries (digest → entry), oldest first; empty when the memo is
    absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text()) if path is not None else {}
    except (OSError, ValueError):
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        return {}
    return {d: e for d, e in entries.items() if isinstance(e, dict)
            and isinstance(e.get("key"), dict) and isinstance(e.get("choice"), str)}


def _save(path: Path, entries: dict[str, dict]) -> bool:
    while len(entries) > MAX_ENTRIES:  # oldest first (dicts keep insertion order)
        entries.pop(next(iter(entries)))
    text = json.dumps({"version": MEMO_VERSION, "entries": entries}, indent=1, sort_keys=True)
    return write_replacing(path, lambda tmp: tmp.write_text(text))


def _of_model(entries: dict[str, dict], model: dict) -> dict[str, dict]:
    """The entries for ``model`` (on any machine), oldest first."""
    model = dict(sorted(model.items()))
    return {d: e for d, e in entries.items() if e["key"].get("model") == model}


def remembered_here(model: dict, bundle_dir: Path | None = None) -> list[EncoderChoice]:
    """The choices remembered for ``model`` that hold on this machine with these libraries
    (``as2d models list`` shows them): one, unless candidates were narrowed
    (``$AS2D_OPENVINO_PRECISION``, ``--encoder openvino``)."""
    here = machine()
    return [EncoderChoice.remembered(e)
            for e in _of_model(_entries(memo_path(bundle_dir)), model).values()
            if e["key"].get("machine") == here]


def forget(model: dict, bundle_dir: Path | None = None) -> int:
    """Forget every choice remembered for ``model`` (on any machine, so that the next
    measurement starts from the default, not from an earlier winner); how many were
    forgotten. ``as2d models measure-encoder``."""
    path = memo_path(bundle_dir)
    with _lock, exclusive(_lock_file(path)):
        entries = _entries(path)
        gone = _of_model(entries, model)
        if gone:
            _save(path, {d: e for d, e in entries.items() if d not in gone})
        _chosen.clear()
    return len(gone)


_lock = threading.RLock()  # one measurement at a time in this process
_chosen: dict[tuple[str, str], EncoderChoice] = {}  # (memo location, key digest) → choice


def _lock_file(memo: Path | None) -> Path | None:
    return memo.with_suffix(".lock") if memo is not None else None


def forget_in_process() -> None:
    """Drop the choices kept in memory (tests: a new key or memo is read afresh)."""
    with _lock:
        _chosen.clear()


# -- measuring ---------------------------------------------------------------------------------

def time_run(encoder, mel: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """Seconds one encoder run of ``mel`` takes, and its outputs (tests script the seconds)."""
    t0 = time.perf_counter()
    out = encoder.run(mel)
    return time.perf_counter() - t0, out


def outputs_digest(outputs: dict[str, np.ndarray]) -> str:
    """A digest of every output of one run, bit for bit."""
    h = hashlib.sha256()
    for name, value in sorted(outputs.items()):
        a = np.ascontiguousarray(value)
        h.update(f"{name} {a.dtype} {a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def window(n_mels: int) -> np.ndarray:
    """A 30-s window of log-mel-like values: the encoder's cost does not depend on them."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, n_mels, WINDOW_FRAMES), dtype=np.float32) * 0.4 - 0.2)


def short_reason(exc: BaseException) -> str:
    """The last line of an exception's message (a back end's errors run to pages), at most 200
    characters."""
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
    ``digests``, when given, receives each candidate's warm-up outputs' digest (what the thread
    check compares, so the count timed needs no second build).
    """
    runs = RUNS if runs is None else runs
    budget_s = BUDGET_S if budget_s is None else budget_s
    share = budget_s / max(1, len(candidates))
    skipped: dict[str, str] = {}
    seconds: dict[str, float] = {}
    best_warm = best = math.inf
    for c in candidates:
        enc = out = None
        try:
            start = time.perf_counter()
            enc = build(c, threads)
            warm, out = time_run(enc, mel)
            if digests is not None:
                digests[c.name] = outputs_digest(out)
            best_warm = min(best_warm, warm)
            seconds[c.name] = warm
            if warm > WARMUP_DROP * best_warm:
                continue
            timed = math.inf
            for i in range(max(1, runs)):
                if i and (time.perf_counter() - start > share or timed > ROUND_DROP * best):
                    break
                timed = min(timed, time_run(enc, mel)[0])
            seconds[c.name] = timed
            best = min(best, timed)
        except Exception as exc:  # noqa: BLE001 - any back end may fail here; the rest serve
            skipped[c.name] = short_reason(exc)
            seconds.pop(c.name, None)
        finally:
            enc = out = None  # its sessions, compiled model and thread pools go before the next
            gc.collect()
    return seconds, skipped


def pick(seconds: dict[str, float], order: Sequence[EncoderCandidate], incumbent: str
         ) -> str | None:
    """The choice among the candidates measured: the ``incumbent``, unless the fastest other
    one takes less than ``1 - MARGIN`` of its time (a near-tie keeps it). Without a time for
    the incumbent, the fastest (a tie goes to the earlier one in ``order``)."""
    ranked = [c.name for c in order if c.name in seconds and math.isfinite(seconds[c.name])]
    if not ranked:
        return None
    fastest = min(ranked, key=lambda n: seconds[n])
    if incumbent in ranked and seconds[fastest] >= (1.0 - MARGIN) * seconds[incumbent]:
        return incumbent
    return fastest


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
            seen[t] = outputs_digest(enc.run(mel))
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
    names = {c.name for c in candidates}

    def remembered() -> EncoderChoice | None:
        entry = _entries(path).get(d)
        return EncoderChoice.remembered(entry) if entry and entry["choice"] in names else None

    slot = (str(path or Path(bundle_dir).resolve()), d)
    with _lock:
        choice = _chosen.get(slot) or remembered()
        if choice is None:
            with exclusive(_lock_file(path)):
                choice = remembered()  # measured meanwhile by another process?
                if choice is None:
                    choice = _measure_and_pick(bundle_dir, path, candidates, model, build,
                                               n_mels, note, model_name)
                    if path is not None:
                        entries = _entries(path)
                        entries.pop(d, None)
                        entries[d] = {"key": k, **choice.to_dict(), "measured": time.strftime(
                            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": _load()}
                        _save(path, entries)
        _chosen[slot] = choice
    return choice


def _load() -> list | None:
    """The 1-minute load average and the cores this process may use (None where unknown): a
    measurement on a machine busy with other work is worth a warning and a record."""
    try:
        return [round(os.getloadavg()[0], 2), cpu_count()]
    except (OSError, AttributeError):  # no load average on this platform
        return None


def _measure_and_pick(bundle_dir: Path, path: Path | None,
                      candidates: Sequence[EncoderCandidate], model: dict, build: Build,
                      n_mels: int, note: Callable[[str], None] | None,
                      model_name: str) -> EncoderChoice:
    threads = measuring_threads()
    # The incumbent: the latest choice remembered for this model (before a library or CPU
    # changed), else the first candidate (the bundle's own onnxruntime graph). It is timed
    # first, in full, and the others' warm-ups compare to it.
    names = [c.name for c in candidates]
    held = next((e["choice"] for e in reversed(_of_model(_entries(path), model).values())
                 if e["choice"] in names), names[0])
    order = sorted(candidates, key=lambda c: c.name != held)
    if note:
        load = _load()
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
    # The winner's outputs at 1 thread and at several (at least 2, even on a 1-core machine)
    # must be the same bits.
    counts = sorted({1, max(2, threads)})
    while True:
        best = pick(seconds, candidates, held)
        if best is None:
            raise RuntimeError("no encoder back end runs here: " + "; ".join(
                f"{n}: {why}" for n, why in skipped.items()))
        known = {threads: digests[best]} if best in digests else {}
        try:
            why = thread_invariant(EncoderCandidate.parse(best), build, mel, counts, known)
        except Exception as exc:  # noqa: BLE001 - ran while timed, fails now: not to trust
            why = short_reason(exc)
        if why is None:
            break
        skipped[best] = why
        seconds.pop(best)
    return EncoderChoice(best, "measured", {n: round(s, 4) for n, s in seconds.items()},
                         skipped, int(threads))
