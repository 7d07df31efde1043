"""Do two OpenVINO encoders' first runs at once hang a fresh process? (as2d's first window
encodes the target's window ahead and the drafter's at the same moment.)

Each round is a process of its own that compiles two encoders (base's and tiny.en's, bf16)
and runs both from two threads released together; one that has not finished within
``--timeout`` seconds counts as hung.

    python scripts/ov_first_run_race.py --rounds 40 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import threading, numpy as np
from as2d.runtime.whisper.encoders import OpenVINOEncoder
from as2d.models.install import ensure_openvino_graph
from as2d.loading import resolve_bundle_dir
encoders = []
for name in ("base", "tiny.en"):
    path = resolve_bundle_dir(name, None, None, kind="whisper")
    encoders.append(OpenVINOEncoder(ensure_openvino_graph(path, "f16w"), 1, "bf16",
                                    cache_dir=path / ".openvino_cache"))
gate = threading.Barrier(2)
mel = np.zeros((1, 80, 200), np.float32)
def first_run(encoder):
    gate.wait()
    encoder.run(mel)
threads = [threading.Thread(target=first_run, args=(e,)) for e in encoders]
[t.start() for t in threads]
[t.join() for t in threads]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    hung = failed = 0
    for _ in range(a.rounds):
        try:
            done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True,
                                  timeout=a.timeout)
            failed += done.returncode != 0
        except subprocess.TimeoutExpired:
            hung += 1
    print(f"{a.rounds} processes: {hung} hung, {failed} failed")
    if a.json:
        a.json.write_text(json.dumps({"rounds": a.rounds, "hung": hung, "failed": failed,
                                      "timeout_s": a.timeout}, indent=1) + "\n")


if __name__ == "__main__":
    main()
