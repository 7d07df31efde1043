"""The server's small pieces that issue #45 fixed, without a server (the fast lane): the key
comparison, the stale-upload sweep, the signals that stop it gracefully.
tests/test_serve_hostile.py checks the same on a running server."""

from __future__ import annotations

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
