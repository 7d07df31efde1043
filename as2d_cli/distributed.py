"""Transcribe an archive on a Ray cluster: actors that load the models once, dynamic dispatch
(longest file first), a JSONL manifest that makes a run resumable, and no terminal code.

The pieces:

- :func:`discover` turns inputs (files, folders searched recursively, list files) into
  :class:`BatchJob` s, sorted longest first (the duration from the file's header where libsndfile
  can read one, else its size).
- :class:`Manifest` is ``OUT/manifest.jsonl``: one row per file per run, appended and flushed
  as each file ends (identity: absolute path, size, mtime; status, duration, wall, worker,
  error, attempts). A file whose last row is ``done`` and whose outputs exist is skipped by
  the next run; ``failed`` ones are tried again.
- :class:`BatchWorker` is the Ray actor: it loads the target and drafter once (through
  :mod:`as2d.engine`, like every face), runs the
  same engine as ``as2d transcribe`` and writes the outputs itself, atomically
  (:class:`as2d.writers.FileOutputs`: temp file + rename), to the shared output folder.
- :func:`run_batch` keeps one file in flight per actor, and sends files only to actors that
  are up (models loaded); a file that raises is retried (``retries``) and then recorded as
  ``failed``; an actor that dies or cannot be reached (killed, out of memory, its node lost)
  is given up for good, its file goes back to the front of the queue for the actors that
  are up, and a replacement is started (one Ray cannot place, on a cluster that lost a node,
  holds no file and is ended with the run); every file is recorded once, by the driver;
  a first Ctrl-C, SIGTERM or SIGHUP stops dispatching and waits for the files in
  flight (each is written and recorded), a second one gives them up (nothing half-written is
  left, and none of them is recorded, so the next run does them).

Ray is imported here only; the engine (:mod:`as2d.runtime`) knows nothing of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

AUDIO_EXTENSIONS = frozenset(
    ".wav .flac .ogg .oga .mp3 .opus .aiff .aif .au .caf .m4a .aac .wma .webm .mp4 .m4v "
    ".mkv .mov .avi .mpg .mpeg .ts .amr".split())
LIST_EXTENSIONS = frozenset({".txt", ".lst", ".list"})
MANIFEST = "manifest.jsonl"


class BatchError(Exception):
    """Something the user can fix: an input that does not exist, no Ray installed, ..."""


# -- inputs -----------------------------------------------------------------------------------
@dataclass
class BatchJob:
    """One input file: its identity (absolute path, size, mtime), its expected length, and the
    output name (``stem``) it was given for the whole archive."""

    path: str
    size: int
    mtime_ns: int
    duration: float | None = None  # from the header; None when it cannot be read cheaply
    stem: str = ""
    source: str = ""  # the path as the user gave or found it (written into the json)
    attempts: int = 0
    lost_on: list[str] = field(default_factory=list)  # workers that died on it

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.path, self.size, self.mtime_ns)

    @property
    def weight(self) -> float:
        """What "longest first" sorts by: seconds, or bytes at 16 kHz 16-bit mono."""
        return self.duration if self.duration is not None else self.size / 32000.0


def _header_duration(path: Path) -> float | None:
    try:
        import soundfile

        info = soundfile.info(str(path))
        return info.frames / info.samplerate if info.samplerate else None
    except Exception:  # not libsndfile's (mp4, m4a, ...) or damaged: the size will do
        return None


def _expand(inputs: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*")
                                if q.suffix.lower() in AUDIO_EXTENSIONS and q.is_file()))
        elif p.suffix.lower() in LIST_EXTENSIONS and p.is_file():
            base = p.parent
            for line in p.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    q = Path(line)
                    found.extend(_expand([q if q.is_absolute() else base / q]))
        elif p.exists():
            found.append(p)
        else:
            raise BatchError(f"{raw}: no such file or folder")
    return found


def discover(inputs: Iterable[str | Path]) -> list[BatchJob]:
    """The files to transcribe, once each, longest first, each with its own output stem.

    Stems are given in path order (``x``, then ``x-2`` for a second ``x.wav`` elsewhere), so
    the same archive always gets the same names, whichever files are already done.
    """
    seen: dict[str, BatchJob] = {}
    for p in _expand(inputs):
        absolute = os.path.abspath(p)
        if absolute in seen:
            continue
        st = p.stat()
        seen[absolute] = BatchJob(absolute, st.st_size, st.st_mtime_ns, _header_duration(p),
                             source=str(p))
    taken: set[str] = set()
    for job in sorted(seen.values(), key=lambda j: j.path):
        stem = Path(job.path).stem or "audio"
        name, n = stem, 2
        while name in taken:
            name, n = f"{stem}-{n}", n + 1
        taken.add(name)
        job.stem = name
    return sorted(seen.values(), key=lambda j: (-j.weight, j.path))


# -- manifest ---------------------------------------------------------------------------------
class Manifest:
    """``OUT/manifest.jsonl``: rows appended, flushed and fsynced one file at a time, so an
    interrupted run (Ctrl-C, a killed driver) keeps every row it wrote."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / MANIFEST
        self.rows: list[dict] = []
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:  # a last line cut by a crash: ignored
                    continue

    def last(self) -> dict[tuple, dict]:
        """The latest row of each file identity."""
        out = {}
        for row in self.rows:
            out[(row.get("path"), row.get("size"), row.get("mtime_ns"))] = row
        return out

    def is_done(self, job: BatchJob) -> bool:
        row = self.last().get(job.identity)
        return bool(row and row.get("status") == "done"
                    and all(Path(p).exists() for p in row.get("outputs", [])))

    def append(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.rows.append(row)


# -- the worker -------------------------------------------------------------------------------
@dataclass
class WorkerSpec:
    """What every actor loads and how it decodes: picklable, sent once per actor."""

    engine: object  # as2d.engine.EngineSpec (shares_cores: actors may share a node's cores)
    options: object  # as2d.runtime.transcribe.longform.TranscribeOptions
    output_dir: str
    formats: list[str]
    subtitle: object  # as2d.writers.SubtitleOptions
    speakers: object = None  # runtime.speakers.speaker_options.SpeakerOptions: diarize each file


class BatchWorker:
    """A Ray actor's state: the models, loaded once, and the engine that runs every file."""

    def __init__(self, spec: WorkerSpec, name: str) -> None:
        from as2d import writers
        from as2d.engine import Engine

        self.spec = spec
        self.name = f"{name}@{socket.gethostname()}:{os.getpid()}"
        self.engine = Engine(spec.engine)
        self.outputs = writers.FileOutputs(Path(spec.output_dir), spec.formats, spec.subtitle)

    def ident(self) -> str:
        return self.name

    def close(self) -> None:
        """Release the engine (its decoding threads, sessions and memory) before the actor
        process is ended: the actor's process is killed afterwards either way, but an engine
        closed first ends its threads at a pass boundary instead of mid-write."""
        self.engine.close()

    def transcribe(self, path: str, stem: str, source: str) -> dict:
        """Transcribe one file and write its outputs; a row for the manifest. Errors are
        returned as rows (``failed``), with ``retry`` False for an unreadable input."""
        from as2d.runtime.audio import AudioError, display_name, load_audio
        from as2d.runtime.transcribe.longform import TranscriptionInfo

        start = time.perf_counter()
        row = {"worker": self.name}
        try:
            audio = load_audio(Path(path))
        except AudioError as exc:
            return {**row, "status": "failed", "error": str(exc), "retry": False,
                    "wall": round(time.perf_counter() - start, 3)}
        try:
            info = TranscriptionInfo(None, 0.0, audio.duration)
            speakers = (self.engine.diarize_beside(audio.samples, self.spec.speakers)
                        if self.spec.speakers is not None else None)
            try:
                segments = list(self.engine.transcribe(audio, self.spec.options, info))
            except BaseException:
                if speakers is not None:  # the file is retried or failed: no diarizing on
                    speakers.stop()
                raise
            doc = {"language": info.language, "duration": round(info.duration, 3),
                   "source": display_name(source), "model": self.engine.target.name,
                   "decoder": info.plan.decoder}
            if speakers is not None:
                from as2d.runtime.speakers.assign import label_transcript

                segments, fields = label_transcript(segments, speakers.result())
                doc.update(fields)
                row["speakers"] = len(fields["speakers"])
            # FileOutputs names files by the stem of what it is given: the archive's stem.
            written = self.outputs.write(f"{stem}.audio", segments, doc)
        except Exception as exc:
            return {**row, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                    "retry": True, "wall": round(time.perf_counter() - start, 3)}
        finally:
            audio.close()
        return {**row, "status": "done", "duration": round(audio.duration, 3),
                "language": info.language, "segments": len(segments),
                "outputs": [str(p) for p in written],
                "wall": round(time.perf_counter() - start, 3)}


# -- the driver -------------------------------------------------------------------------------
@dataclass
class Event:
    """What the driver reports: ``kind`` is ``start`` (a file sent to a worker), ``end`` (a
    row recorded), ``lost`` (a worker died; the file goes back in the queue), ``worker`` (an
    actor is up), ``stopping`` (first interrupt) or ``note``."""

    kind: str
    worker: str = ""
    job: BatchJob | None = None
    row: dict | None = None
    text: str = ""


@dataclass
class BatchResult:
    total: int = 0  # files in the archive
    skipped: int = 0  # done by an earlier run
    done: int = 0
    failed: int = 0
    interrupted: bool = False
    signal: int | None = None  # the signal that stopped the run (SIGINT, SIGTERM, SIGHUP)
    audio_seconds: float = 0.0
    wall: float = 0.0
    rows: list[dict] = field(default_factory=list)


def ray_init(address: str | None, num_cpus: int | None = None) -> bool:
    """Connect to Ray (``address`` "" or None: a local cluster on this machine; ``auto`` or
    ``ray://host:port``: an existing one). True when this call started the connection (and
    so should end it)."""
    try:
        import ray
    except ImportError:
        raise BatchError("Ray is not installed: pip install 'as2d[ray]'") from None
    if ray.is_initialized():
        return False
    import logging

    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    with keep_signal_handlers(ray):
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=num_cpus, **kwargs)
    return True


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextlib.contextmanager
def keep_signal_handlers(ray):
    """``ray.init`` that leaves this process's handlers of SIGINT, SIGTERM and SIGHUP as they
    were, and holds those signals while Ray starts.

    Ray's start-up installs its own SIGTERM handlers (``sys.exit(15)`` while it starts, then
    one that ends its processes and exits 1), and its core worker installs a C-level
    failure handler that prints a stack dump (``*** SIGTERM received at time=...``). Either
    would stop ``as2d batch`` without the files in flight finishing, with 15 or 1 for an
    exit code. Here, in this process only (the actors keep theirs), Ray's Python handlers
    are not set while it starts (its ``ray._private`` helper is passed over) nor its C-level
    one (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, read from ``ray._private.ray_constants``),
    where this Ray has them, and the handlers that were there before are set again
    afterwards. A signal that arrives during the start-up is held until Ray has started (a
    start-up cut anywhere leaves Ray's state half made, and its shutdown may crash); Ray is
    then shut down and the signal raised again, for the command's own handler (exit ``128 +
    signal``). A second signal stops the start-up at once."""
    pending: list[int] = []

    def defer(signum, frame) -> None:
        if pending:  # a second one: stop now, whatever state Ray's start-up is in
            raise KeyboardInterrupt
        pending.append(signum)

    saved = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None and threading.current_thread() is threading.main_thread() \
                and signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays so
            saved[sig] = signal.signal(sig, defer)
    private = getattr(ray, "_private", None)
    utils = getattr(private, "utils", None)
    constants = getattr(private, "ray_constants", None)
    setter = getattr(utils, "set_sigterm_handler", None)
    if setter is not None:
        utils.set_sigterm_handler = lambda handler: None
    dump = getattr(constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", None)
    if dump is not None:  # this process only (read when its core worker starts)
        constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        yield
    except BaseException:  # stopped (or failed) mid-start: leave nothing of Ray running
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise
    finally:
        if setter is not None:
            utils.set_sigterm_handler = setter
        if dump is not None:
            constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = dump
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if pending:  # stopped while Ray started: end it, then the signal takes its usual course
        with contextlib.suppress(Exception):
            ray.shutdown()
        signal.raise_signal(pending[0])


def default_actors(threads: int) -> int:
    """Actors for the cluster: its CPUs divided by the threads each actor uses."""
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, cpus // max(1, threads))


def run_batch(jobs: list[BatchJob], spec: WorkerSpec, *, actors: int, retries: int = 2,
              on_event: Callable[[Event], None] = lambda e: None,
              handles: dict | None = None, note_after: float = 60.0) -> BatchResult:
    """Transcribe ``jobs`` (those not done yet) on ``actors`` Ray actors; every outcome goes
    to ``OUT/manifest.jsonl`` as it happens. ``handles``, when given, is filled with the live
    actors by name (tests use it to kill one).

    A file is only ever sent to an actor that is up (its models loaded), so an actor Ray
    cannot place (a replacement on a cluster that lost a node, more actors than CPUs) holds
    no file: the others take them all, and it is ended with the run. Waiting that long
    (``note_after`` seconds) with files left and no actor up is said once (a ``note``)."""
    import ray
    from ray.exceptions import RayActorError, RayError

    manifest = Manifest(Path(spec.output_dir))
    result = BatchResult(total=len(jobs))
    queue: list[BatchJob] = []
    for job in jobs:
        if manifest.is_done(job):
            result.skipped += 1
        else:
            queue.append(job)
    if not queue:
        return result
    remote = ray.remote(num_cpus=max(1, spec.engine.threads))(BatchWorker)
    live = handles if handles is not None else {}
    serial = 0
    starting: dict = {}  # ident ObjectRef -> name: actors being placed or loading the models
    idle: list[str] = []  # actors that are up and have no file
    inflight: dict = {}  # transcribe ObjectRef -> (worker name, job)
    ever_up = False  # an actor has loaded the models: a later start failure is not fatal
    start_failures = 0  # actors that died before they were up, since one last came up
    stopping = False
    started = time.perf_counter()
    waiting_since: float | None = None  # files left, none in flight, no actor up
    noted = False

    def start_actor() -> None:
        nonlocal serial
        serial += 1
        name = f"w{serial}"
        live[name] = remote.remote(spec, name)
        starting[live[name].ident.remote()] = name

    def forget(name: str) -> None:
        """An actor that is gone (or given up on): killed for good, in case it is not."""
        handle = live.pop(name, None)
        if handle is not None:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)

    def record(job: BatchJob, row: dict, name: str) -> None:
        full = {"path": job.path, "size": job.size, "mtime_ns": job.mtime_ns,
                "stem": job.stem, "attempts": job.attempts, **row}
        full.pop("retry", None)
        if job.lost_on:
            full["lost_workers"] = list(job.lost_on)
        full["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        manifest.append(full)
        result.rows.append(full)
        if full["status"] == "done":
            result.done += 1
            result.audio_seconds += full.get("duration") or 0.0
        else:
            result.failed += 1
        on_event(Event("end", name, job, full))

    def dispatch(announce: bool = True) -> list[Event]:
        """A file to each idle actor; the ``start`` events, sent (or, not ``announce``d,
        returned)."""
        sent = []
        while idle and queue and not stopping and not interrupts:
            name = idle.pop(0)
            job = queue.pop(0)
            job.attempts += 1
            ref = live[name].transcribe.remote(job.path, job.stem, job.source)
            inflight[ref] = (name, job)
            sent.append(Event("start", name, job))
            if announce:
                on_event(sent[-1])
        return sent

    def came_up(ref) -> None:
        """An actor's ``ident`` answered: it is up (it takes a file at once), or it died."""
        nonlocal ever_up, start_failures
        name = starting.pop(ref)
        try:
            ident = ray.get(ref)
        except RayError as exc:
            if not ever_up and (getattr(exc, "actor_init_failed", True)
                                or not isinstance(exc, RayActorError)):
                # The models cannot load (on the first actors): one error, not a retry loop.
                raise BatchError(f"a worker could not load the models: {_cause(exc)}"
                                 ) from None
            forget(name)
            start_failures += 1
            replace = not stopping and queue and start_failures <= retries + actors
            on_event(Event("note", name, text=f"worker {name} died before it was up "
                                               f"({_cause(exc)})"
                                               + ("; starting another" if replace else "")))
            if replace:
                start_actor()
            return
        ever_up = True
        start_failures = 0
        if stopping or interrupts or not queue:  # nothing for it: ended now, not at the end
            forget(name)
            return
        idle.append(name)
        # Its file is sent before it is said to be up (a signal sent on seeing "ready" finds
        # the file in flight), and said to start after.
        sent = dispatch(announce=False)
        on_event(Event("worker", name, text=ident))
        for event in sent:
            on_event(event)

    def finished(ref) -> None:
        name, job = inflight.pop(ref)
        try:
            row = ray.get(ref)
        except RayActorError as exc:
            # The actor died (killed, out of memory, its node lost) or cannot be reached: it
            # is given up for good, and the file is tried again on another one. The file is
            # recorded once, by this loop, whatever the lost actor may still have written
            # (each output is replaced whole, never half-written).
            job.lost_on.append(name)
            forget(name)
            on_event(Event("lost", name, job, text=str(exc).splitlines()[0]))
            if job.attempts <= retries:
                queue.insert(0, job)
            else:
                record(job, {"status": "failed", "worker": name,
                             "error": f"worker died {job.attempts} times on it"}, name)
            if not stopping and queue:
                start_actor()
            return
        except RayError as exc:
            row = {"status": "failed", "worker": name, "retry": True,
                   "error": str(exc).splitlines()[0]}
        if row["status"] == "failed" and row.get("retry") and job.attempts <= retries:
            queue.insert(0, job)
        else:
            record(job, row, name)
        idle.append(name)

    interrupts: list[int] = []

    def on_sigint(signum, frame) -> None:
        # First Ctrl-C, SIGTERM or SIGHUP: a flag the loop reads between files (so no row is
        # cut in half and the files in flight finish); second: KeyboardInterrupt, which drops
        # the files in flight.
        if interrupts:
            raise KeyboardInterrupt
        interrupts.append(signum)
        result.signal = signum

    def stop() -> None:
        nonlocal stopping
        stopping = True
        result.interrupted = True
        on_event(Event("stopping", text=f"{len(inflight)} file(s) in flight"))

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:  # nohup
                previous[sig] = signal.signal(sig, on_sigint)
    try:
        for _ in range(min(actors, len(queue))):
            start_actor()
        while inflight or (queue and starting and not stopping):
            if interrupts and not stopping:
                stop()
                continue
            ready, _ = ray.wait([*inflight, *starting], num_returns=1, timeout=0.5)
            for ref in ready:
                if ref in starting:
                    came_up(ref)
                else:
                    finished(ref)
            dispatch()
            if queue and not inflight and not stopping:
                waiting_since = waiting_since or time.perf_counter()
                if not noted and time.perf_counter() - waiting_since > note_after:
                    noted = True
                    on_event(Event("note", text=(
                        f"waiting for the cluster to start a worker ({len(starting)} "
                        f"asked, {max(1, spec.engine.threads)} CPU each; "
                        f"{len(queue)} file(s) left)")))
            else:
                waiting_since = None
        if interrupts or (queue and stopping):
            result.interrupted = True
        elif queue:  # every actor died before it was up, and no more are started
            raise BatchError(f"no worker is left to do {len(queue)} file(s): each one "
                             "started died before it was up")
    except KeyboardInterrupt:
        result.interrupted = True  # second interrupt: what is in flight is given up
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Actors in flight (a second Ctrl-C) or never up are killed at once; idle ones close.
        _retire(ray, live, busy={name for name, _ in inflight.values()} | set(
            starting.values()))
        live.clear()
        result.wall = time.perf_counter() - started
    return result


def _retire(ray, live: dict, busy: set[str], wait: float = 10.0) -> None:
    """End the actors: idle ones close their engines first (bounded by ``wait`` seconds in
    all), then every actor is killed; one still busy (a second Ctrl-C gave its file up) is
    killed at once."""
    closing = []
    for name, handle in live.items():
        if name not in busy:
            try:
                closing.append(handle.close.remote())
            except Exception:  # the actor is already gone
                pass
    if closing:
        try:
            ray.wait(closing, num_returns=len(closing), timeout=wait)
        except Exception:  # an actor died while closing: it is killed below either way
            pass
    for handle in list(live.values()):
        try:
            ray.kill(handle)
        except Exception:
            pass


def _cause(exc: Exception) -> str:
    """The last line of a remote traceback: the error that killed the actor."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:300]


def as_dict(job: BatchJob) -> dict:
    return asdict(job)
