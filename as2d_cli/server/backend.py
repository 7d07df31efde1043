"""The server's one engine and the one decode slot every request queues for.

Models load once, on a thread, while the server already answers (``/health`` says
``loading``). Decoding is serialised: the target's sessions use every core, and two decodes
at once would only make both slower, so requests wait their turn in a bounded FIFO queue
(:class:`DecodeSlot`); beyond it a request is refused with 429 and ``Retry-After``.

A decode runs on a worker thread (onnxruntime releases the GIL; the event loop keeps serving
health checks, queued clients and the socket). A client that goes away cancels its work:
:meth:`Backend.cancel` stops the engine after its current pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
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
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    word_timestamps: bool = True  # prepare the alignment graph at start


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
    """One decode at a time, FIFO, at most ``max_queue`` waiting (then 429)."""

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
        self._active = False
        self._active_lock = threading.Lock()
        self._loaded = threading.Event()
        self.on_failed: Callable[[str], None] | None = None
        self.stopping = False
        self.load_started = False
        self.live_active = False  # a realtime session holds the slot
        self.started_monotonic = time.monotonic()

    # -- loading --------------------------------------------------------------------------------
    def bind(self) -> None:
        """Make the asyncio parts (called on the server's event loop)."""
        if self.slot is None:
            self.slot = DecodeSlot(self.settings.max_queue)

    def start_loading(self) -> None:
        self.load_started = True
        threading.Thread(target=self._load, name="as2d-serve-load", daemon=True).start()

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
        self.state = "ready"
        self._loaded.set()
        drafter = getattr(self.engine, "drafter_name", None)
        self.log(f"as2d: models ready in {self.load_seconds:.2f} s: {self.model_name}"
                 + (f" + drafter {drafter}" if drafter else "")
                 + (f", answering model {self.settings.llm}" if self.settings.llm else ""))

    def _failed(self, message: str) -> None:
        self.state, self.error = "failed", message
        self._loaded.set()
        if self.on_failed is not None:
            self.on_failed(message)

    def wait_loaded(self, timeout: float | None = None) -> bool:
        return self._loaded.wait(timeout)

    @property
    def model_name(self) -> str:
        target = getattr(self.engine, "target", None)
        return getattr(target, "name", None) or self.settings.model

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
    def submit(self, work: Callable[[], Any]) -> Future:
        """Run ``work`` (a decode) on the worker thread; :meth:`cancel` stops it."""

        def run():
            with self._active_lock:
                self._active = True
            try:
                return work()
            finally:
                with self._active_lock:
                    self._active = False

        return self.pool.submit(run)

    def cancel(self) -> None:
        """Stop the decode in progress after its current pass (its client went away)."""
        with self._active_lock:
            if self._active and self.engine is not None:
                self.engine.stop()
                self.log("as2d: a client went away; its decode was stopped")

    async def run_decode(self, work: Callable[[], Any],
                         disconnected: Callable[[], Any] | None = None) -> Any:
        """Wait for the slot, run ``work`` on the worker thread, and return its result.
        ``disconnected`` (an async callable) is polled; when the client is gone the decode
        is stopped and :class:`ClientGone` raised."""
        self.require_ready()
        slot = self.slot
        acquire = asyncio.ensure_future(slot.acquire())
        try:
            while not acquire.done():
                await asyncio.wait({acquire}, timeout=0.2)
                if not acquire.done() and disconnected is not None and await disconnected():
                    acquire.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await acquire
                    raise ClientGone
            acquire.result()  # 429 raised here
        except BaseException:
            if acquire.done() and not acquire.cancelled() and acquire.exception() is None:
                slot.release()
            raise
        try:
            self.require_ready()
            future = asyncio.wrap_future(self.submit(work))
            gone = False
            while not future.done():
                await asyncio.wait({future}, timeout=0.1)
                if not future.done() and not gone and disconnected is not None \
                        and await disconnected():
                    gone = True
                    self.cancel()
            if gone:
                with contextlib.suppress(Exception):
                    future.result()
                raise ClientGone
            return future.result()
        finally:
            slot.release()

    def close(self) -> None:
        engine = self.engine
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


class ClientGone(Exception):
    """The client disconnected; its work was stopped."""
