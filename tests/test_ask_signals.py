"""``as2d ask`` stopped by a signal before its first window is committed (issue #45): the exit
code says it was the signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), as ``as2d transcribe``'s
does, with one line saying nothing was transcribed; never exit 1 with "no speech found",
which would blame the recording.

A real ``as2d ask`` process on a recording of four windows (the test sample, four times); the
signal is sent when it reports the detected language, before the first window's text. Should
the first window be committed first on a fast machine, the command answers from it and still
exits ``128 + signal``: both are accepted, exit 1 is not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Signals sent on a process's first output: run alone, not beside another worker.
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "sense_and_sensibility.wav"
TIMEOUT = 300


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory) -> Path:
    import soundfile as sf

    audio, rate = sf.read(str(SAMPLE), dtype="int16")
    path = tmp_path_factory.mktemp("ask-signals") / "four-windows.wav"
    sf.write(str(path), np.concatenate([audio] * 4), rate)
    return path


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                      (signal.SIGINT, 130)])
def test_a_signal_before_the_first_window_is_its_exit_code(long_wav, models_root, sig, code):
    proc = subprocess.Popen(
        [sys.executable, "-m", "as2d", "ask", str(long_wav), "Who had leisure?",
         "--models-dir", str(models_root), "--no-live"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "detected language" in line:
                proc.send_signal(sig)
                break
        out, rest = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "".join(seen) + rest
    print(stderr)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "no speech found" not in stderr, stderr
    name = "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"
    if not out.strip():  # stopped before any text: said in one line
        assert f"as2d: {name} before any speech was transcribed: no answer" in stderr
