"""``as2d batch`` on a real two-node Ray cluster that loses a node mid-archive (issue #45,
"many machines for real").

The cluster: two network namespaces made for the test, joined by a veth pair with private
addresses that exist only inside them (10.251.0.1/24 and 10.251.0.2/24; nothing is routed
anywhere else). A Ray head (``ray start --head``, one CPU) runs in the first, a Ray worker node
(``ray start --address``, one CPU) in the second, each with its own ``--temp-dir``; ``as2d
batch --ray HEAD:PORT -j 2`` runs in the head's namespace, so one actor is on each node. The
filesystem is shared, as a cluster filesystem would be. Once the worker node's actor has done
a file (so it is in the middle of its next one), every process in the worker's namespace (its
raylet, agents and actor) is killed with SIGKILL: the node is gone.

What must hold: the batch finishes (exit 0) within its time bound; the manifest has exactly
one row per file, every one ``done``, and the file the dead node was on names it in
``lost_workers``; every output is byte for byte ``as2d transcribe``'s (same options: one
thread, the same drafter; a copy's, its original's but for the path its JSON names); and
nothing of the cluster is left (no process in either namespace, no namespace). Teardown kills
the processes of the test's namespaces by id (``ray stop`` would not do: it kills every Ray
process on the machine, in any namespace) before deleting them.

Skipped only where this machine cannot make network namespaces (not root, no ``ip``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

# Network namespaces, a Ray head on a fixed port and nodes killed mid-run: run alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[1]
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
HEAD_IP, WORKER_IP = "10.251.0.1", "10.251.0.2"
BATCH_TIMEOUT = 300  # the whole batch, on a loaded 2-core machine
START_TIMEOUT = 120  # each `ray start`


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def _netns_unavailable() -> str | None:
    """Why this machine cannot make network namespaces for the test, or None."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    probe = f"as2d-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []


def _kill_all(ns: str, sig: int) -> None:
    for pid in _pids(ns):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class TwoNodeCluster:
    """A Ray head and a Ray worker node, each in a network namespace of its own."""

    def __init__(self, env: dict) -> None:
        tag = os.getpid() % 100000
        self.head_ns, self.worker_ns = f"as2d-{tag}-head", f"as2d-{tag}-worker"
        self.port = 20000 + tag % 20000  # apart from any other run's head
        self.address = f"{HEAD_IP}:{self.port}"
        self.env = env
        self.temp = [tempfile.mkdtemp(prefix="as2d-rh-", dir="/tmp"),
                     tempfile.mkdtemp(prefix="as2d-rw-", dir="/tmp")]
        self.made: list[str] = []

    def exec(self, ns: str, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *cmd]

    def _ray_start(self, ns: str, *args: str) -> None:
        proc = subprocess.run(
            self.exec(ns, sys.executable, "-m", "ray.scripts.scripts", "start",
                      "--num-cpus=1", "--disable-usage-stats",
                      "--object-store-memory=100000000", *args),
            env=self.env, capture_output=True, text=True, timeout=START_TIMEOUT)
        assert proc.returncode == 0, f"ray start in {ns} failed:\n{proc.stderr[-3000:]}"

    def up(self) -> None:
        for ns in (self.head_ns, self.worker_ns):
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        tag = self.head_ns.split("-")[1]
        vh, vw = f"a2h{tag}", f"a2w{tag}"  # made inside the namespaces, never in the host's
        _ip("link", "add", vh, "netns", self.head_ns, "type", "veth", "peer", "name", vw,
            "netns", self.worker_ns)
        for ns, dev, addr in ((self.head_ns, vh, HEAD_IP), (self.worker_ns, vw, WORKER_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        self._ray_start(self.head_ns, "--head", "--include-dashboard=false",
                        f"--node-ip-address={HEAD_IP}",
                        f"--port={self.port}", f"--temp-dir={self.temp[0]}")
        self._ray_start(self.worker_ns, f"--address={self.address}",
                        f"--node-ip-address={WORKER_IP}", f"--temp-dir={self.temp[1]}")

    def kill_worker_node(self) -> list[int]:
        pids = _pids(self.worker_ns)
        _kill_all(self.worker_ns, signal.SIGKILL)
        return pids

    def down(self) -> None:
        """Every process of both namespaces ended (TERM, then KILL), then the namespaces and
        the temp dirs removed; idempotent."""
        for ns in self.made:
            _kill_all(ns, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(_pids(ns) for ns in self.made) and time.monotonic() < deadline:
            time.sleep(0.2)
        for ns in self.made:
            _kill_all(ns, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_pids(ns) for ns in self.made) and time.monotonic() < deadline:
            time.sleep(0.2)
        for ns in list(self.made):
            if not _pids(ns):  # never delete one with a process left (it would live on)
                _ip("netns", "del", ns, check=False)
                self.made.remove(ns)
        for d in self.temp:
            shutil.rmtree(d, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What is left of the cluster: namespaces, processes started under its temp dirs."""
        left = [f"netns {ns}" for ns in _ip("netns", "list").stdout.split()
                if ns in (self.head_ns, self.worker_ns)]
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                if any(d in cmd for d in self.temp):
                    left.append(f"pid {proc.name}: {cmd.replace(chr(0), ' ')[:120]}")
        return left


@pytest.fixture
def archive(tmp_path, bundle):
    clips = sorted(LIBRIVOX.glob("*.wav"))
    if len(clips) < 5:
        pytest.skip("pocketsphinx-testdata is not installed")
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    bundle("base")
    bundle("tiny.en")
    folder = tmp_path / "archive"
    (folder / "more").mkdir(parents=True)
    for clip in clips:
        shutil.copy(clip, folder / clip.name)
    # Five more files (copies, under names of their own): work left for the head's actor
    # after the worker node dies, even where the worker's actor is up late.
    for clip in clips:
        shutil.copy(clip, folder / "more" / f"again-{clip.name}")
    return folder


def _rows(out: Path) -> list[dict]:
    path = out / "manifest.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a row being written
            pass
    return rows


def _worker_pid(row: dict) -> int:
    return int(row["worker"].rsplit(":", 1)[1])


def test_batch_survives_a_worker_node_killed_mid_archive(archive, models_root, tmp_path):
    env = dict(os.environ, AS2D_MODELS_DIR=str(models_root), PYTHONPATH=str(ROOT),
               RAY_AUTH_MODE="disabled")  # the cluster is reachable from its namespaces only
    env.pop("RAY_ADDRESS", None)
    files = sorted(str(p) for p in archive.rglob("*.wav"))
    originals = sorted(str(p) for p in archive.glob("*.wav"))  # more/ holds their copies
    timings = {}

    # The reference: `as2d transcribe` of the five originals, one thread (batch's default),
    # same formats, decoded while the cluster comes up (the cluster's start is mostly waiting).
    t0 = time.monotonic()
    plain = subprocess.Popen(
        [sys.executable, "-m", "as2d", "transcribe", *originals, "-o", str(tmp_path / "plain"),
         "-f", "txt,json", "-t", "1", "-q"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    cluster = TwoNodeCluster(env)
    out = tmp_path / "out"
    log = tmp_path / "batch.log"
    killed: list[int] = []
    try:
        cluster.up()
        timings["cluster up"] = time.monotonic() - t0
        _, plain_err = plain.communicate(timeout=BATCH_TIMEOUT)
        assert plain.returncode == 0, plain_err
        timings["transcribe"] = time.monotonic() - t0
        t0 = time.monotonic()
        with open(log, "w") as stderr:
            batch = subprocess.Popen(
                cluster.exec(cluster.head_ns, sys.executable, "-m", "as2d", "batch",
                             str(archive), "-o", str(out), "-f", "txt,json", "-j", "2",
                             "-t", "1", "--ray", cluster.address, "--no-live"),
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + BATCH_TIMEOUT
            while batch.poll() is None and time.monotonic() < deadline:
                if not killed:
                    on_worker = set(_pids(cluster.worker_ns))
                    if any(_worker_pid(r) in on_worker for r in _rows(out)):
                        # The worker node's actor has done a file and is on its next one.
                        killed = cluster.kill_worker_node()
                        timings["killed at"] = time.monotonic() - t0
                time.sleep(0.1)
            if batch.poll() is None:
                batch.kill()
                batch.wait(30)
                pytest.fail(f"as2d batch did not finish in {BATCH_TIMEOUT} s:\n"
                            f"{log.read_text()[-4000:]}")
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.wait(30)
        timings["batch"] = time.monotonic() - t0
    finally:
        if plain.poll() is None:
            plain.kill()
            plain.wait(30)
        cluster.down()
    stderr = log.read_text()
    print("\n" + stderr + "\n" + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert not cluster.leftovers(), cluster.leftovers()
    assert killed, f"the worker node's actor never finished a file:\n{stderr}"
    assert batch.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr

    # Every file exactly once, done; the one the dead node was on says so.
    rows = _rows(out)
    assert sorted(r["path"] for r in rows) == files, stderr
    assert {r["status"] for r in rows} == {"done"}, rows
    lost = [r for r in rows if r.get("lost_workers")]
    assert len(lost) == 1 and lost[0]["attempts"] == 2, rows
    assert lost[0]["worker"].split("@")[0] not in lost[0]["lost_workers"]
    assert _worker_pid(lost[0]) not in killed  # redone on the head's actor
    assert f"worker {lost[0]['lost_workers'][0]} died on" in stderr

    # Byte for byte `as2d transcribe`'s files, and nothing else (no .part left); a copy's
    # files are its original's but for the source path its JSON names.
    expected = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert len(expected) == 2 * len(originals)
    copies = [f"again-{name}" for name in expected]
    assert sorted(p.name for p in out.iterdir()) == sorted(expected + copies + ["manifest.jsonl"])
    for name, copy in zip(expected, copies):
        reference = (tmp_path / "plain" / name).read_bytes()
        assert (out / name).read_bytes() == reference, name
        if name.endswith(".json"):
            got, want = json.loads((out / copy).read_text()), json.loads(reference)
            assert got.pop("source") == str(archive / "more" / copy.replace(".json", ".wav"))
            want.pop("source")
            assert got == want, copy
        else:
            assert (out / copy).read_bytes() == reference, copy
