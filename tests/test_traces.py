"""No traces left behind: a plain run writes only where the README says, and uses no network.

onnxruntime's telemetry wrote ``$TMPDIR/.ses`` and a device id under ``~/.cache/Microsoft``;
OpenVINO's converter wrote a client id under ``~/intel`` and looked up its analytics host
(:mod:`as2d.runtime.quiet` turns both off). One real ``as2d transcribe`` under strace, with a
fresh ``TMPDIR`` and ``HOME``, checks all of it at once. The OpenVINO encoder is asked for
explicitly so its import is checked on every machine, not only on AMX CPUs where ``auto``
picks it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# One 3-s sentence ("He might even have been made amiable himself."): what is traced is the
# run's start-up, models and decoding, whatever the recording's length.
SAMPLE = Path("/usr/share/pocketsphinx/test/data/librivox/"
              "sense_and_sensibility_01_austen_64kb-0930.wav")


# The opt-outs themselves (as2d must set them), the XDG folders (HOME decides), and the CI
# markers that OpenVINO's telemetry reads as an opt-out (CI=true is set where this suite runs).
_NOT_INHERITED = ("ORT_DISABLE_TELEMETRY", "RAY_USAGE_STATS_ENABLED", "XDG_CACHE_HOME",
                  "XDG_DATA_HOME", "XDG_CONFIG_HOME", "CI", "TF_BUILD", "JENKINS_URL")


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _openvino_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def test_a_plain_transcribe_leaves_no_trace_and_opens_no_network_socket(tmp_path, bundle,
                                                                       models_root):
    strace = shutil.which("strace")
    assert strace, "strace is needed (scripts/test.sh installs it: apt-get install strace)"
    bundle("base"), bundle("tiny.en")  # converted before the run, not during it
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env.update(HOME=str(home), TMPDIR=str(tmp), AS2D_MODELS_DIR=str(models_root))
    if _openvino_installed():
        env["AS2D_ENCODER"] = "openvino"
    log = tmp_path / "strace.txt"
    # --seccomp-bpf: only the traced calls stop a thread (every thread and child process is
    # still traced: -f), not each of the run's system calls.
    p = subprocess.run([strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=socket,connect",
                        "-o", str(log), sys.executable, "-m", "as2d", "transcribe", str(SAMPLE),
                        "--drafter", "tiny.en"],  # both models (one window: else no drafter)
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "amiable" in p.stdout  # the run really transcribed

    assert _tree(tmp) == [], "TMPDIR changed"
    assert _tree(home) == [], "files written under HOME"

    calls = [ln for ln in log.read_text().splitlines() if re.search(r"\b(socket|connect)\(", ln)]
    assert log.exists()  # strace ran; no call at all is the good case
    network = [ln for ln in calls if re.search(r"AF_INET6?\b|AF_PACKET|sin6?_addr", ln)]
    assert network == [], "network sockets:\n" + "\n".join(network[:10])


def test_the_opt_outs_keep_a_users_own_choice(monkeypatch):
    from as2d.runtime.quiet import QUIET_ENV, quiet_dependencies

    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    quiet_dependencies()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == QUIET_ENV["RAY_USAGE_STATS_ENABLED"]
    assert QUIET_ENV["ORT_DISABLE_TELEMETRY"] == "1"


@pytest.mark.skipif(not _openvino_installed(), reason="OpenVINO is installed on Linux x86-64")
def test_openvino_imported_by_as2d_binds_its_no_op_telemetry(tmp_path):
    """In a fresh process: the converter's telemetry is OpenVINO's stub, nothing under HOME,
    and ``openvino_telemetry`` is not left blocked in ``sys.modules``."""
    code = ("from as2d.runtime.whisper.encoders import openvino_available\n"
            "assert openvino_available()\n"
            "import openvino.tools.ovc.telemetry_utils as t\n"
            "print(t.tm.__name__)\n"
            "import sys\n"
            "assert 'openvino_telemetry' not in sys.modules\n")
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env["HOME"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "openvino.tools.ovc.telemetry_stub"
    assert _tree(tmp_path) == []
