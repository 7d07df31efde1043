"""The server's small pieces that issue #45 fixed, without a server (the fast lane): the key
comparison, the stale-upload sweep, the signals that stop it gracefully.
tests/test_serve_hostile.py checks the same on a running server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("fastapi")


def test_the_key_is_compared_as_utf8_bytes():
    from as2d.server.application import key_ok

    key = "clé-ü"
    wire = lambda raw: "Bearer " + raw.decode("latin-1")  # noqa: E731 - how Starlette reads it
    assert key_ok(key, wire(key.encode("utf-8")))
    assert not key_ok(key, wire(key.encode("latin-1")))
    assert not key_ok(key, wire(b"cl"))
    assert key_ok("ascii-key", "Bearer ascii-key") and key_ok("ascii-key", "bearer ascii-key ")
    assert not key_ok("ascii-key", "Basic ascii-key") and not key_ok("k", None)
    assert key_ok(None, None)


def test_only_uploads_of_processes_that_are_gone_are_swept(tmp_path):
    from as2d.server.uploads import remove_stale_uploads, upload_prefix

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = proc.pid
    stale = tmp_path / f"as2d-upload-{dead}-a1b2c3"
    mine = tmp_path / f"{upload_prefix()}zz9"
    kept = [mine, tmp_path / "as2d-upload-x1y2z3", tmp_path / f"as2d-upload-{dead}-a.b",
            tmp_path / f"as2d-upload-{2**70}-big", tmp_path / "unrelated"]
    for p in [stale, *kept]:
        p.write_text("x")
    folder = tmp_path / f"as2d-upload-{dead}-folder"
    folder.mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-target"
    outside.write_text("keep")
    link = tmp_path / f"as2d-upload-{dead}-link"
    link.symlink_to(outside)
    assert remove_stale_uploads(str(tmp_path)) == 1
    assert not stale.exists() and all(p.exists() for p in kept)
    assert folder.is_dir() and link.is_symlink() and outside.read_text() == "keep"
    assert mine.name.startswith(f"as2d-upload-{os.getpid()}-")
    assert remove_stale_uploads(str(tmp_path / "no-such-folder")) == 0


@pytest.mark.serial
def test_sighup_stops_the_server_gracefully_unless_ignored():
    from as2d.server.application import _stop_signals

    before = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert _stop_signals((signal.SIGINT, signal.SIGTERM)) == [
            signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
        assert signal.SIGHUP not in _stop_signals((signal.SIGINT, signal.SIGTERM))
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_model_over_the_memory_budget_is_a_503():
    from as2d.server.api_errors import APIError
    from as2d.server.model_choice import check_budget

    check_budget(None, 5000, 500, "tiny.en-int8")  # no budget: anything loads
    check_budget(2000, 900, 300, "tiny.en-int8")  # 900 + 2 x 300 fits
    try:
        check_budget(1200, 900, 300, "tiny.en-int8")
    except APIError as exc:
        assert exc.status == 503 and exc.code == "memory_budget" and "1200 MB" in exc.message
    else:
        raise AssertionError("no 503")


class _Writer:
    def __init__(self) -> None:
        self.data = bytearray()

    def writelines(self, parts) -> None:
        for p in parts:
            self.data += p

    def write(self, b) -> None:
        self.data += b

    async def drain(self) -> None:
        pass


def _wyoming_handler(max_sessions: int = 8, sessions=()):
    """A Wyoming connection's handler on a backend that never decodes."""
    from types import SimpleNamespace

    from as2d.server.wyoming import WyomingHandler

    def no_detector():
        raise RuntimeError("no voice detector here")

    backend = SimpleNamespace(
        settings=SimpleNamespace(max_sessions=max_sessions), sessions=set(sessions),
        require_ready=lambda: None, gate=SimpleNamespace(forget=lambda owner: None),
        engine=SimpleNamespace(new_voice_detector=no_detector, live_session=lambda *a, **k:
                               SimpleNamespace(start=lambda: None, abort=lambda: None,
                                               wait=lambda timeout: True)))
    writer = _Writer()
    return WyomingHandler(asyncio.StreamReader(), writer, backend), writer, backend


def _errors(writer: _Writer) -> list[str]:
    import json

    lines = [json.loads(x) for x in bytes(writer.data).split(b"\n") if x.startswith(b"{")]
    return [x.get("code") for x in lines if "code" in x]


@pytest.mark.parametrize("data, payload, code", [
    ({"rate": 16000, "width": 2, "channels": 1}, b"\0\0\0", "invalid_audio"),  # odd bytes
    ({"rate": 0, "width": 2, "channels": 1}, b"\0\0", "invalid_audio"),
    ({"rate": 16000, "width": 3, "channels": 2}, b"\0" * 7, "invalid_audio"),
    ({"rate": 16000, "width": 5, "channels": 1}, b"\0" * 5, "invalid_audio"),
    ({"rate": 16000, "width": 2, "channels": 3}, b"\0" * 6, "invalid_audio"),
    ({"rate": 16000, "channels": 1}, b"\0\0", "invalid_event"),  # no width
])
def test_a_bad_wyoming_chunk_is_an_error_event(data, payload, code):
    pytest.importorskip("wyoming")
    from wyoming.event import Event

    async def go():
        handler, writer, _ = _wyoming_handler()
        keep = await handler.handle_event(Event("audio-chunk", data, payload))
        return keep, writer

    keep, writer = asyncio.run(go())
    assert keep is False and _errors(writer) == [code]


def test_a_bad_audio_start_and_an_unexpected_failure_are_error_events():
    pytest.importorskip("wyoming")
    from wyoming.event import Event

    async def go():
        handler, writer, _ = _wyoming_handler()
        await handler.handle_event(Event("audio-start", {"rate": 16000, "width": 0,
                                                         "channels": 1}))
        handler2, writer2, backend = _wyoming_handler()
        backend.require_ready = lambda: 1 / 0
        await handler2.handle_event(Event("describe"))
        return writer, writer2

    w1, w2 = asyncio.run(go())
    assert _errors(w1) == ["invalid_audio"] and _errors(w2) == ["server_error"]


def test_wyoming_previews_count_against_max_sessions():
    pytest.importorskip("wyoming")
    from wyoming.event import Event

    start = Event("audio-start", {"rate": 16000, "width": 2, "channels": 1})

    async def go():
        full, w_full, _ = _wyoming_handler(max_sessions=1, sessions={"ws-1"})
        refused = await full.handle_event(start)
        handler, w_ok, backend = _wyoming_handler(max_sessions=1)
        ok = await handler.handle_event(start)
        counted = len(backend.sessions)
        await handler.disconnect()
        return refused, w_full, ok, w_ok, counted, backend

    refused, w_full, ok, w_ok, counted, backend = asyncio.run(go())
    assert refused is False and _errors(w_full) == ["too_many_sessions"]
    assert ok is True and not _errors(w_ok)
    assert counted == 1 and not backend.sessions  # counted while it runs, freed after


def test_an_end_of_speech_decode_skips_the_request_queue():
    """The HTTP queue is full (a request decodes, --max-queue 0): a request gets 429, a
    final (Wyoming's end of speech) still decodes, after the running one (the gate)."""
    import threading

    from as2d.server.api_errors import APIError
    from as2d.server.backend import Backend, ServeSettings

    backend = Backend(ServeSettings(max_queue=0), lambda s, p: object(), log=lambda m: None)
    backend.state = "ready"
    release, order = threading.Event(), []

    def slow():
        release.wait(5)
        order.append("request")
        return "request"

    async def go():
        backend.bind()
        first = asyncio.ensure_future(backend.run_decode(slow))
        while not backend.slot.busy or backend.gate.holder is None:
            await asyncio.sleep(0.01)
        with pytest.raises(APIError) as refused:
            await backend.run_decode(lambda: "refused")
        final = asyncio.ensure_future(backend.run_decode(lambda: order.append("final") or "f",
                                                         kind="final"))
        while not backend.gate.waiting:
            await asyncio.sleep(0.01)
        release.set()
        return refused.value.status, await first, await final

    try:
        assert asyncio.run(go()) == (429, "request", "f")
        assert order == ["request", "final"]
    finally:
        backend.close()


def test_a_chosen_model_is_not_unloaded_while_a_request_holds_it():
    """``engine()`` pins the model until the request's task ends, the decode until its
    cleanup; the reaper unloads it only after both (and logs, not dies, on a failure)."""
    from types import SimpleNamespace

    from as2d.server.model_choice import Models

    closed, logs = [], []

    class Engine:
        def close(self):
            closed.append(self)

    from as2d.server.backend import ServeSettings

    backend = SimpleNamespace(settings=ServeSettings(model_ttl=0.01),
                              model_name="base-int8", log=logs.append,
                              engine_factory=lambda settings, progress: Engine())
    models = Models(backend)
    models.choosable = lambda: {"tiny": 1.0}
    models.canonical = lambda name: name

    async def request(hold: asyncio.Event, got: list):
        got.append(await models.engine("tiny"))
        await hold.wait()

    async def go():
        hold, got = asyncio.Event(), []
        task = asyncio.ensure_future(request(hold, got))
        while not got:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        kept = models.unload_idle(0.0)  # the request still holds it
        pinned = models.pin(got[0])  # its decode, started before the request ends
        hold.set()
        await task
        await asyncio.sleep(0)
        kept_by_decode = models.unload_idle(0.0)
        models.unpin(pinned)
        gone = models.unload_idle(0.0)
        models.unload_idle = lambda ttl: 1 / 0
        reaper = asyncio.ensure_future(models.reaper())
        await asyncio.sleep(1.2)
        alive = not reaper.done()
        reaper.cancel()
        return kept, kept_by_decode, gone, alive

    kept, kept_by_decode, gone, alive = asyncio.run(go())
    assert kept == [] and kept_by_decode == [] and gone == ["tiny"] and len(closed) == 1
    assert alive and any("ZeroDivisionError" in m for m in logs)
