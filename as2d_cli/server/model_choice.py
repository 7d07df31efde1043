"""A model per request: ``model=`` chooses among the installed Whisper models.

The server's own model (``--model``) stays loaded. Another installed one (a name ``as2d models
list`` shows: ``tiny.en``, ``base-fp32``, a converted folder's name) is loaded when a request
first names it, kept while requests use it, and unloaded once nobody has used it for
``--model-ttl`` seconds (its memory returned to the system). ``--preload`` loads some at start
(they are unloaded after the TTL like the others). A name that is no installed model (OpenAI's
``whisper-1``, ...) means the server's own model, as before.

``--memory-budget-mb``: a model is loaded only if the server's resident memory plus the model's
estimated size (twice its files: weights and the runtime's working buffers) stays within it;
otherwise the request gets 503 ``memory_budget`` rather than a machine that swaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from as2d.runtime.sessions import give_back_memory
from as2d.server.api_errors import APIError


@dataclass
class Loaded:
    engine: object
    last_used: float
    in_use: int = 0


def rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def manifest_languages(manifest: dict) -> tuple[str, ...]:
    """The language codes a Whisper bundle transcribes, read from its manifest without
    loading it: ("en",) for an English-only vocabulary, else the first ``n_vocab - 51766``
    of Whisper's languages in token order (99 for most models, 100 from large-v3 on; the
    rule Whisper's own tokenizer uses)."""
    from as2d.runtime.whisper.languages import LANGUAGE_NAMES

    n_vocab = int(manifest.get("dims", {}).get("n_vocab", 0))
    if n_vocab < 51865:
        return ("en",)
    return tuple(list(LANGUAGE_NAMES)[:n_vocab - 51766])


def installed_whisper_languages(models_dir: str | None
                                ) -> dict[str, tuple[float, tuple[str, ...]]]:
    """The installed Whisper models a request may name → (their size in MB, their language
    codes) (a catalog name without a precision means its default precision)."""
    from as2d.models.bundle import installed_bundles
    from as2d.models.bundle import models_dir as root_of
    from as2d.models.catalog import CATALOG

    out: dict[str, tuple[float, tuple[str, ...]]] = {}
    for b in installed_bundles(root_of(models_dir)):
        if b.manifest.get("kind", "whisper") != "whisper":
            continue
        out[b.name] = (b.size() / 1e6, manifest_languages(b.manifest))
    for entry in CATALOG.values():
        full = f"{entry.name}-{entry.default_precision}"
        if entry.kind == "whisper" and full in out:
            out[entry.name] = out[full]
    return out


def check_budget(budget_mb: float | None, resident_mb: float, model_mb: float,
                 name: str) -> None:
    """503 when loading ``name`` would take the server past ``--memory-budget-mb``."""
    if budget_mb is None:
        return
    need = resident_mb + 2 * model_mb
    if need > budget_mb:
        raise APIError(503, f"loading {name} would take the server to about {need:.0f} MB, "
                            f"over its memory budget of {budget_mb:.0f} MB (as2d serve "
                            "--memory-budget-mb); use the server's own model or retry once "
                            "another model was unloaded", param="model", code="memory_budget",
                       headers={"Retry-After": "30"})


class Models:
    """The extra models of one server (the backend's own engine is not among them)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.loaded: dict[str, Loaded] = {}
        # Guards ``loaded`` and every ``in_use``: the reaper (event loop), the loads (executor
        # threads) and the decodes (worker threads) all touch them.
        self._lock = threading.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        self._listed: tuple[float, dict[str, tuple[float, tuple[str, ...]]]] = (-1e9, {})

    def _installed(self) -> dict[str, tuple[float, tuple[str, ...]]]:
        """The installed Whisper models (read from disk at most every 10 s)."""
        at, names = self._listed
        if time.monotonic() - at > 10:
            names = installed_whisper_languages(self.backend.settings.models_dir)
            self._listed = (time.monotonic(), names)
        return names

    def choosable(self) -> dict[str, float]:
        """The installed Whisper models → their size in MB."""
        return {name: size for name, (size, _) in self._installed().items()}

    def languages(self, name: str) -> tuple[str, ...]:
        """The language codes of the installed model ``name`` (() when it is not one)."""
        return self._installed().get(name, (0.0, ()))[1]

    def listed(self) -> dict[str, str]:
        """The extra models a request may name, one name each → the model it loads: the
        catalog's short name (``tiny.en``) for its default precision, else the bundle's."""
        out: dict[str, str] = {}
        for name in sorted(self.choosable(), key=lambda n: (len(n), n)):
            full = self.canonical(name)
            if full is not None and full not in out.values():
                out[name] = full
        return out

    def canonical(self, name: str | None) -> str | None:
        """The extra model ``name`` means, or None for the server's own."""
        if not name:
            return None
        own = {self.backend.settings.model, self.backend.model_name}
        sizes = self.choosable()
        if name not in sizes or name in own:
            return None
        from as2d.models.catalog import CATALOG

        entry = CATALOG.get(name)
        full = f"{name}-{entry.default_precision}" if entry is not None else name
        return None if full in own else full

    async def engine(self, name: str | None):
        """The engine for a request's ``model`` (loading it if needed), pinned (never
        unloaded) until the calling task ends; the decode started meanwhile pins it again
        (:meth:`pin`, until the decode's cleanup), so it stays while either needs it."""
        full = self.canonical(name)
        if full is None:
            return self.backend.engine
        lock = self._locks.setdefault(full, asyncio.Lock())
        async with lock:
            with self._lock:
                got = self.loaded.get(full)
                if got is not None:
                    self._pin(got)
            if got is None:
                check_budget(self.backend.settings.memory_budget_mb, rss_mb(),
                             self.choosable().get(full, 0.0), full)
                got = await asyncio.get_running_loop().run_in_executor(None, self._load, full)
                with self._lock:  # just loaded (last used now): the reaper leaves it
                    self._pin(got)
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(lambda _: self._unpin(got))
        else:  # pragma: no cover - always called from a request's task
            self._unpin(got)
        return got.engine

    def _pin(self, got: Loaded) -> None:  # under self._lock
        got.in_use += 1
        got.last_used = time.monotonic()

    def _unpin(self, got: Loaded) -> None:
        with self._lock:
            got.in_use -= 1
            got.last_used = time.monotonic()

    def pin(self, engine) -> Loaded | None:
        """Mark ``engine`` in use (None: not one of these models); :meth:`unpin` it after."""
        with self._lock:
            got = next((g for g in self.loaded.values() if g.engine is engine), None)
            if got is not None:
                self._pin(got)
        return got

    def unpin(self, got: Loaded | None) -> None:
        if got is not None:
            self._unpin(got)

    def _load(self, full: str) -> Loaded:
        from as2d.loading import ModelError

        t0 = time.perf_counter()
        try:  # the backend's engine factory (as2d.engine's front door), with this model
            engine = self.backend.engine_factory(replace(self.backend.settings, model=full),
                                                 lambda m: self.backend.log(f"as2d: {m}"))
        except ModelError as exc:
            raise APIError(503, f"the model {full} could not be loaded: {exc}", param="model",
                           code="model_unavailable") from None
        with self._lock:
            got = self.loaded[full] = Loaded(engine, time.monotonic())
        self.backend.log(f"as2d: model {full} loaded in {time.perf_counter() - t0:.2f} s "
                         "(for the requests that name it)")
        return got

    def preload(self, names: tuple[str, ...]) -> None:
        """On the loading thread, after the server's own model."""
        for name in names:
            if name not in self.choosable():
                raise APIError(503, f"{name} is not an installed Whisper model (as2d models "
                                    "list shows them; as2d models install NAME adds one)")
            full = self.canonical(name)
            with self._lock:
                missing = full is not None and full not in self.loaded
            if missing:
                self._load(full)

    @contextlib.contextmanager
    def using(self, engine):
        """Mark ``engine`` in use while a decode runs on it (never unloaded meanwhile)."""
        got = self.pin(engine)
        try:
            yield
        finally:
            self.unpin(got)

    def unload_idle(self, ttl: float) -> list[str]:
        """Unload the models nobody used for ``ttl`` seconds; their names."""
        now = time.monotonic()
        with self._lock:
            gone = [n for n, g in self.loaded.items()
                    if g.in_use <= 0 and now - g.last_used >= ttl]
            engines = [self.loaded.pop(name).engine for name in gone]
        for engine in engines:  # nobody holds them: unpinned, and out of ``loaded``
            with contextlib.suppress(Exception):
                engine.close()
        del engines
        if gone:
            gc.collect()
            give_back_memory()
            self.backend.log(f"as2d: unloaded {', '.join(gone)} (unused for {ttl:g} s)")
        return gone

    async def reaper(self) -> None:
        ttl = self.backend.settings.model_ttl
        while ttl > 0:
            await asyncio.sleep(min(5.0, max(0.5, ttl / 4)))
            try:
                self.unload_idle(ttl)
            except Exception as exc:  # noqa: BLE001 - the reaper never dies silently
                with contextlib.suppress(Exception):
                    self.backend.log(f"as2d: unloading idle models failed "
                                     f"({type(exc).__name__}: {exc})")

    def close(self) -> None:
        with self._lock:
            loaded = list(self.loaded.values())
            self.loaded.clear()
        for got in loaded:
            with contextlib.suppress(Exception):
                got.engine.close()
