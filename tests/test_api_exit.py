"""A script that never closes what the Python API gave it still exits normally (issue #45).

A decoding thread (the target's worker, the drafter, a session being built) still inside
onnxruntime when the interpreter finalizes aborted the process: exit 134, "terminate called
without an active exception". Each case is a real Python process, as a user's script runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory) -> Path:
    """About 100 s of speech: several windows, so decoding is still going when a script
    stops reading."""
    parts = [sf.read(p, dtype="float32")[0] for p in sorted(LIBRIVOX.glob("*.wav"))]
    if not parts:
        pytest.skip("needs pocketsphinx-testdata")
    path = tmp_path_factory.mktemp("exit") / "long.wav"
    sf.write(path, np.concatenate(parts * 4), 16000)
    return path


def _script(models_root: Path, body: str) -> subprocess.CompletedProcess:
    head = f"""
        import sys
        import as2d
        from as2d.runtime import events
        M = {str(models_root)!r}
    """
    env = dict(os.environ, AS2D_ENCODER="onnxruntime")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(head) + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


def _no_abort(p: subprocess.CompletedProcess) -> None:
    assert p.returncode not in (134, -6), p.stderr
    assert "terminate called" not in p.stderr, p.stderr


@pytest.mark.parametrize("one_shot", [False, True])
def test_a_script_that_stops_reading_midway_exits_cleanly(models_root, long_wav, one_shot):
    """One segment read, then the end of the script: the run still going is stopped and its
    threads joined at exit (aborted 3 runs in 4 before)."""
    call = (f"as2d.transcribe({str(long_wav)!r}, drafter='tiny.en', models_dir=M)" if one_shot
            else f"as2d.Transcriber('base', drafter='tiny.en', models_dir=M)"
                 f".transcribe({str(long_wav)!r})")
    p = _script(models_root, f"""
        segments, info = {call}
        print(next(iter(segments)).text)
        print("end of script")
    """)
    _no_abort(p)
    assert p.returncode == 0 and "end of script" in p.stdout, p.stderr


LISTENER = """
class Boom(Exception):
    pass

def listener(event):
    if isinstance(event, events.RunStarted):
        raise Boom("the listener failed")

t = as2d.Transcriber("base", drafter="tiny.en", listener=listener, models_dir=M)
"""


@pytest.mark.parametrize("caught", [True, False])
def test_a_listener_that_raises_leaves_nothing_running(models_root, long_wav, caught):
    """The listener raises on the run's first event, while the engine still builds a session
    on a thread; caught or not, the script ends without close(): exit 0, or 1 with the
    user's own traceback, never an abort."""
    run = f"for s in t.transcribe({str(long_wav)!r})[0]:\n    pass\n"
    if caught:
        run = ("try:\n" + textwrap.indent(run, "    ") + "except Boom as exc:\n"
               "    print('caught', exc)\nprint('end of script')\n")
    p = _script(models_root, LISTENER + run)
    _no_abort(p)
    if caught:
        assert p.returncode == 0 and "caught the listener failed" in p.stdout, p.stderr
    else:
        assert p.returncode == 1 and "Boom: the listener failed" in p.stderr, p.stderr
