"""``as2d batch`` stopped by a signal (issue #45): SIGTERM or SIGHUP mid-work lets the file in
flight finish and be recorded, then exits ``128 + signal`` (143, 129) like ``as2d transcribe``;
a SIGTERM while Ray starts is held until it has started, Ray is shut down, and the exit is 143.
Never Ray's own handlers: no ``*** SIGTERM received at time=...`` dump, no exit 1 or 15.

Each case is a real ``as2d batch`` process with its own local Ray (its own module, so no other
test's Ray runs beside it), bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Signals sent on a process's first output: run alone, not beside another worker.
pytestmark = pytest.mark.serial

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CLIPS = [f"sense_and_sensibility_01_austen_64kb-{n}.wav" for n in ("0880", "0930", "0890",
                                                                     "0920")]
TIMEOUT = 240


@pytest.fixture
def archive(tmp_path, bundle):
    if not all((LIBRIVOX / c).is_file() for c in CLIPS):
        pytest.skip("pocketsphinx-testdata is not installed")
    bundle("base")
    bundle("tiny.en")
    folder = tmp_path / "archive"
    folder.mkdir()
    for name in CLIPS:
        shutil.copy(LIBRIVOX / name, folder / name)
    return folder


def _batch(archive: Path, out: Path, models_root: Path, sig: int, when: str | float):
    """Run ``as2d batch`` (one actor), send ``sig`` once stderr shows ``when`` (a string) or
    after ``when`` seconds; (exit code, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "as2d", "batch", str(archive), "-o", str(out), "-j", "1",
         "--models-dir", str(models_root), "--no-live"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        if isinstance(when, str):
            for line in proc.stderr:
                seen.append(line)
                if when in line:
                    break
        else:
            time.sleep(when)
        proc.send_signal(sig)
        _, rest = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(seen) + rest


def _clean(stderr: str) -> None:
    assert "Traceback" not in stderr and "SIGTERM received" not in stderr, stderr
    assert "logging.cc" not in stderr, stderr


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_mid_work_keeps_the_file_in_flight(archive, models_root, tmp_path, sig, code):
    out = tmp_path / "out"
    rc, stderr = _batch(archive, out, models_root, sig, "worker w1 ready")
    _clean(stderr)
    assert rc == code, stderr
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    done = [r for r in rows if r["status"] == "done"]
    # The file in flight was finished, written and recorded; no new one was started.
    assert 1 <= len(done) < len(CLIPS) and len(done) == len(rows), stderr
    for row in done:
        assert all(Path(p).is_file() for p in row["outputs"])
    assert not list(out.glob("*.part"))


def test_sigterm_while_ray_starts_exits_143(archive, models_root, tmp_path):
    out = tmp_path / "out"
    rc, stderr = _batch(archive, out, models_root, signal.SIGTERM, 2.0)
    _clean(stderr)
    assert rc == 143, stderr
    assert "stopped by SIGTERM" in stderr or "interrupted" in stderr, stderr
