"""The server's one engine, and how its users take turns on it.

Models load once, on a thread, while the server already answers (``/health`` says
``loading``). Decoding is serialised: the target's sessions use every core, and two decodes
at once would only make both slower. HTTP requests wait their turn in a bounded FIFO queue
(:class:`DecodeSlot`); beyond it a request is refused with 429 and ``Retry-After``
(end-of-speech decodes, Wyoming's, skip that queue: the gate orders them). The
request that leaves that queue and the live sessions' decodes then take turns on the engine
through one :class:`~as2d.runtime.live.decode_gate.DecodeGate` (end-of-speech decodes first,
then round robin by owner, a request that waited too long promoted): a live session holds the
engine only while one of its decodes runs, so an idle one costs nothing but its socket.

A decode runs on a worker thread (onnxruntime releases the GIL; the event loop keeps serving
health checks, queued clients and the socket). A client that goes away cancels its work:
:meth:`Backend.cancel` stops the engine after its current pass. The slot is released when
the worker is done, never before, whatever becomes of the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from as2d.server.api_errors import APIError


@dataclass
class ServeSettings:
    """What ``as2d serve`` was asked (the models and the limits)."""

    model: str = "base"
    drafter: str = "auto"
    decoder: str = "as2d"
    precision: str | None = None
    threads: int = 0
    encoder: str | None = None
    models_dir: str | None = None
    llm: str | None = None
    max_upload_mb: float = 25.0
    max_queue: int = 8  # requests waiting for the decode slot before 429
    max_sessions: int = 8  # live sessions open at once; the next is refused
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    # A live session that gets no audio for this long is ended (its utterance finished and
    # sent) and its place freed for another (--max-sessions).
    idle_timeout: float = 10.0
    word_timestamps: bool = True  # prepare the alignment graph at start
    # A model per request (model_choice.py): loaded at start, unloaded after this idle time
    # (0: never), and the resident memory a load may not exceed (None: no limit).
    preload: tuple[str, ...] = ()
    model_ttl: float = 300.0
    memory_budget_mb: float | None = None


def make_engine(settings: ServeSettings, progress: Callable[[str], None]):
    """The engine, through its front door (``as2d.engine``). Raises ``ModelError``."""
    from as2d.engine import Engine, EngineSpec

    spec = EngineSpec(model=settings.model, precision=settings.precision,
                      drafter=settings.drafter, decoder=settings.decoder, budget="auto",
                      threads=settings.threads, drafter_threads=0, encoder=settings.encoder,
                      models_dir=settings.models_dir, llm=settings.llm, vad=True,
                      word_timestamps=settings.word_timestamps, shares_cores=True)
    return Engine(spec, progress=progress)


class DecodeSlot:
    """One HTTP request at a time, FIFO, at most ``max_queue`` waiting (then 429); the one
    let through then takes its turn on the engine with the live sessions (the gate)."""

    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self._lock = asyncio.Lock()
        self.waiting = 0
        self.busy_since: float | None = None

    def retry_after(self) -> int:
        return max(1, min(30, self.waiting + 1))

    async def acquire(self) -> None:
        if self._lock.locked() and self.waiting >= self.max_queue:
            raise APIError(429, f"the server is busy: {self.waiting} requests are already "
                                "waiting for the decoder; retry later",
                           code="queue_full", headers={"Retry-After": str(self.retry_after())})
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        self.busy_since = time.monotonic()

    def release(self) -> None:
        self.busy_since = None
        self._lock.release()

    @property
    def busy(self) -> bool:
        return self._lock.locked()


class RequestJob:
    """One decode on the worker thread. ``cancelled``: its client went away (the engine is
    stopped; a job not yet begun does not begin). ``engine``: the one it decodes with."""

    def __init__(self, engine=None) -> None:
        self.cancelled = False
        self.future: Future | None = None
        self.engine = engine


class Backend:
    """The loaded engine, its state, and the decode slot."""

    def __init__(self, settings: ServeSettings,
                 engine_factory: Callable[[ServeSettings, Callable[[str], None]], Any]
                 = make_engine, log: Callable[[str], None] = print) -> None:
        self.settings = settings
        self._factory = engine_factory
        self.log = log
        self.state = "loading"  # loading | ready | failed
        self.error: str | None = None
        self.engine = None
        self.load_seconds: float | None = None
        self.slot: DecodeSlot | None = None  # made on the event loop (see bind)
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="as2d-serve")
        self.final_pool = ThreadPoolExecutor(max_workers=max(2, settings.max_sessions),
                                             thread_name_prefix="as2d-serve-final")
        self._busy: RequestJob | None = None  # the job on the worker thread now
        self._busy_lock = threading.Lock()
        self._load_thread: threading.Thread | None = None
        self.on_failed: Callable[[str], None] | None = None
        self.stopping = False
        self.load_started = False
        from as2d.runtime.live.decode_gate import DecodeGate

        self.gate = DecodeGate()  # HTTP requests and live sessions take turns here
        from as2d.server.model_choice import Models

        self.models = Models(self)  # the other installed models a request may name
        self.sessions: set[str] = set()  # live sessions open now
        self.started_monotonic = time.monotonic()

    # -- loading --------------------------------------------------------------------------------
    def bind(self) -> None:
        """Make the asyncio parts (called on the server's event loop)."""
        if self.slot is None:
            self.slot = DecodeSlot(self.settings.max_queue)

    def start_loading(self) -> None:
        self.load_started = True
        self._load_thread = threading.Thread(target=self._load, name="as2d-serve-load",
                                             daemon=True)
        self._load_thread.start()

    def _load(self) -> None:
        from as2d.loading import ModelError

        t0 = time.perf_counter()
        try:
            self.engine = self._factory(self.settings, lambda msg: self.log(f"as2d: {msg}"))
        except ModelError as exc:
            self._failed(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - reported as one line, the server then exits
            self._failed(f"the models could not be loaded ({type(exc).__name__}: {exc})")
            return
        self.load_seconds = time.perf_counter() - t0
        try:
            self.models.preload(self.settings.preload)
        except Exception as exc:  # noqa: BLE001 - reported as one line, the server then exits
            self._failed(f"--preload: {getattr(exc, 'message', exc)}")
            return
        self.state = "ready"
        drafter = self.drafter_name
        self.log(f"as2d: models ready in {self.load_seconds:.2f} s: {self.model_name}"
                 + (f" + drafter {drafter}" if drafter else "")
                 + (f", answering model {self.settings.llm}" if self.settings.llm else ""))

    def _failed(self, message: str) -> None:
        self.state, self.error = "failed", message
        if self.on_failed is not None:
            self.on_failed(message)

    @property
    def engine_factory(self):
        return self._factory

    @property
    def model_name(self) -> str:
        if self.engine is None:
            return self.settings.model
        return self.engine.target.name

    @property
    def drafter_name(self) -> str | None:
        """The drafter the server loaded (None: the target decodes alone), not one request's:
        a request in a language no smaller model drafts runs without it."""
        return self.engine.loaded_drafter if self.engine is not None else None

    @property
    def decoder_name(self) -> str:
        """The decoder the server's requests use: the one asked for, or ``"target"`` where
        the loaded target cannot be verified against (rows not independent)."""
        return str(self.settings.decoder if self.engine is None else self.engine.decoder)

    def require_ready(self) -> None:
        """503 while loading (with Retry-After), failed or shutting down."""
        if self.stopping:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        if self.state == "loading":
            raise APIError(503, "the models are still loading; retry in a moment",
                           code="model_loading", headers={"Retry-After": "2"})
        if self.state == "failed":
            raise APIError(503, f"the models failed to load: {self.error}",
                           code="model_unavailable")

    # -- running work ---------------------------------------------------------------------------
    async def acquire(self, disconnected: Callable[[], Any] | None = None) -> None:
        """Wait for the decode slot (429 when the queue is full). ``disconnected`` (an async
        callable) is polled: a client gone while it waits raises :class:`ClientGone`. However
        this ends (the request task cancelled too), the slot is either held or not waited
        for any more: a wait left behind would take the slot later and keep it for ever."""
        slot = self.slot
        acquire = asyncio.ensure_future(slot.acquire())
        try:
            while not acquire.done():
                await asyncio.wait({acquire}, timeout=0.2)
                if not acquire.done() and disconnected is not None and await disconnected():
                    raise ClientGone
            acquire.result()  # 429 raised here
        except BaseException:
            if not acquire.done():
                acquire.cancel()  # asyncio.Lock hands the lock on if it was just granted
            elif not acquire.cancelled() and acquire.exception() is None:
                slot.release()
            raise

    async def start(self, work: Callable[[], Any], disconnected: Callable[[], Any] | None = None,
                    cleanup: Callable[[], None] | None = None, kind: str = "request",
                    engine=None) -> RequestJob:
        """Take the slot and start ``work`` on the worker thread. The slot is released, and
        ``cleanup`` called (on the event loop), when the worker is done with it, not when the
        request ends: a request cancelled mid-decode must not let the next decode onto the
        same engine, nor free what the decode still reads. ``cleanup`` runs exactly once,
        whatever happens (a 429 and a client gone while waiting included)."""
        # An end-of-speech decode (Wyoming's) does not queue behind the HTTP requests, nor
        # count against --max-queue: the gate puts it first, and keeps one decode at a time.
        from as2d.runtime.live.decode_gate import FINAL

        slot = None if kind == FINAL else self.slot
        # A model the request chose stays loaded until this decode is done with it.
        pinned = self.models.pin(engine) if engine is not None else None
        try:
            self.require_ready()
            if slot is not None:
                await self.acquire(disconnected)
        except BaseException:
            self.models.unpin(pinned)
            if cleanup is not None:
                cleanup()
            raise

        def finished() -> None:
            if slot is not None:
                slot.release()
            self.models.unpin(pinned)
            if cleanup is not None:
                cleanup()

        try:
            self.require_ready()
            job = self._submit(work, kind, engine)
        except BaseException:
            finished()
            raise
        loop = asyncio.get_running_loop()

        def done(_: Future) -> None:
            if not loop.is_closed():  # closed: the server has stopped, nothing waits any more
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(finished)

        job.future.add_done_callback(done)
        return job

    def _submit(self, work: Callable[[], Any], kind: str = "request", engine=None
                ) -> RequestJob:
        """``kind``: the gate's class of the decode (``final`` for an end-of-speech decode);
        ``engine``: the model it decodes with (None: the server's own)."""
        from as2d.runtime.live.decode_gate import FINAL

        job = RequestJob(engine or self.engine)

        def run():
            with self.gate.hold(f"request-{id(job)}", kind,
                                abandon=lambda: job.cancelled) as turn:
                with self._busy_lock:
                    if job.cancelled or turn is None:
                        raise ClientGone
                    self._busy = job
                try:
                    with self.models.using(job.engine):
                        return work()
                finally:
                    with self._busy_lock:
                        self._busy = None
                    self.gate.forget(f"request-{id(job)}")

        # Finals on threads of their own: they wait at the gate, not behind a request's
        # worker (nor it behind them, so a long-waiting request can still be promoted).
        pool = self.final_pool if kind == FINAL else self.pool
        job.future = pool.submit(run)
        return job

    def cancel(self, job: RequestJob) -> None:
        """Stop ``job`` (its client went away): after the engine's current pass if it runs,
        before it begins if it waits for the worker."""
        with self._busy_lock:
            if job.cancelled or job.future is None or job.future.done():
                return
            job.cancelled = True
            if self._busy is job and job.engine is not None:
                job.engine.stop()
        self.log("as2d: a client went away; its decode was stopped")

    def cancelled(self) -> bool:
        """Whether the job on this worker thread was cancelled (work checks between steps)."""
        job = self._busy
        return job is not None and job.cancelled

    def transcribe(self, audio, options, info, engine=None) -> Iterator:
        """The engine's segments for the job on the worker thread (``engine``: a model the
        request chose; None: the server's own). A cancel that came after the job began but
        before the engine's run did (the engine's stop reaches only a run in progress) stops
        it at the next pass."""
        engine = engine or self.engine
        for seg in engine.transcribe(audio, options, info):
            if self.cancelled():
                engine.stop()
            yield seg

    async def run_decode(self, work: Callable[[], Any],
                         disconnected: Callable[[], Any] | None = None,
                         cleanup: Callable[[], None] | None = None, kind: str = "request",
                         engine=None) -> Any:
        """Wait for the slot, run ``work`` on the worker thread, and return its result.
        ``disconnected`` (an async callable) is polled; when the client is gone the decode
        is stopped and :class:`ClientGone` raised. ``cleanup``, ``kind``: see :meth:`start`
        and :meth:`_submit`."""
        job = await self.start(work, disconnected, cleanup, kind, engine)
        future = asyncio.wrap_future(job.future)
        # Read the result even when nobody waits for it any more (no "never retrieved").
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            while not future.done():
                await asyncio.wait({future}, timeout=0.1)
                if not future.done() and disconnected is not None and await disconnected():
                    raise ClientGone
        except BaseException:
            self.cancel(job)  # the slot is released when the worker is done
            raise
        return future.result()

    def close(self, load_timeout: float = 60.0) -> None:
        """After the server stopped: let a model load in progress end (a thread left inside
        onnxruntime at exit may crash the process), stop a decode still running (the
        graceful shutdown timed out), wait for the worker, then free the engine."""
        self.stopping = True
        thread = self._load_thread
        if thread is not None and thread.is_alive():
            thread.join(load_timeout)
        engine = self.engine
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.stop()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.final_pool.shutdown(wait=True, cancel_futures=True)
        self.models.close()
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.close()


class ClientGone(Exception):
    """The client disconnected; its work was stopped."""
