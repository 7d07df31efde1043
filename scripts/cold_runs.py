"""Whole `as2d` processes, cold, timed side by side: what a user waits for one command.

Each configuration is an `as2d` command line (after ``as2d``); every round runs each of them
once, in turn, so that a machine whose speed drifts between minutes (a shared VM) drifts under
all of them alike. Prints the median, min and max wall time of each and the ratio of each
median to the first configuration's, and the median CPU time (user + system: on a busy shared
machine it carries much less of the others' load than the wall time); ``--json`` keeps every
run.

    python scripts/cold_runs.py --rounds 8 \\
        "auto=transcribe -q clip.wav" "drafter=transcribe -q --drafter tiny.en clip.wav"
    python scripts/cold_runs.py "ask=ask -q clip.wav 'Who called?'" \\
        "target=ask -q --decoder target clip.wav 'Who called?'"

A configuration is ``LABEL=ARGS`` (ARGS split like a shell line), or ``LABEL@PYTHON=ARGS`` to
run it with another interpreter (another install of as2d: a change against the commit it
starts from). Each run's peak resident memory is kept beside its wall time, with what each
interpreter runs (as2d, onnxruntime, OpenVINO versions) and, for a command that writes to
``-o DIR``, a digest of every file there after its last run. A failed run stops the benchmark
with its stderr.

    python scripts/cold_runs.py --rounds 3 "before@/tmp/venv-base/bin/python=transcribe -q \
        -o /tmp/before long.wav" "after=transcribe -q -o /tmp/after long.wav"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def parse_config(text: str) -> tuple[str, str | None, list[str]]:
    """``LABEL[@PYTHON]=ARGS`` → (label, interpreter or None, args)."""
    label, sep, args = text.partition("=")
    label, _, python = label.partition("@")
    if not sep or not label.strip() or not args.strip():
        raise argparse.ArgumentTypeError(f"expected LABEL[@PYTHON]=ARGS, not {text!r}")
    return label.strip(), python.strip() or None, shlex.split(args)


def run_once(args: list[str], python: str) -> tuple[float, float, float]:
    """One whole process: its wall time (s), peak resident memory (MB) and CPU time (s)."""
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen([python, "-m", "as2d", *args], stdout=subprocess.DEVNULL,
                             stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise SystemExit(f"cold_runs: `as2d {shlex.join(args)}` failed ({p.returncode}):"
                             f"\n{err.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime  # (kB on Linux)


def outputs_digest(args: list[str]) -> dict[str, str] | None:
    """sha256 of each file a command wrote under its ``-o``/``--output-dir`` (None: none)."""
    import hashlib
    from pathlib import Path

    for flag in ("-o", "--output-dir"):
        if flag in args[:-1]:
            folder = Path(args[args.index(flag) + 1])
            return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
                    for p in sorted(folder.iterdir()) if p.is_file()}
    return None


def versions(python: str) -> str:
    code = ("from importlib.metadata import version as v\n"
            "out = []\n"
            "for name in ('as2d', 'onnxruntime', 'openvino'):\n"
            "    try: out.append(f'{name} {v(name)}')\n"
            "    except Exception: pass\n"
            "print(', '.join(out))")
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", type=parse_config, metavar="LABEL=ARGS")
    ap.add_argument("--rounds", type=int, default=6, help="measured rounds (default 6)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="rounds run first and discarded (file cache, model memos; default 1)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to run as2d")
    ap.add_argument("--json", metavar="OUT", help="write every run's wall time as JSON")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        ap.error("--rounds must be 1 or more and --warmup 0 or more")
    labels = [label for label, _, _ in args.configs]
    if len(set(labels)) != len(labels):
        ap.error("labels must differ")
    walls: dict[str, list[float]] = {label: [] for label in labels}
    peaks: dict[str, list[float]] = {label: [] for label in labels}
    cpus: dict[str, list[float]] = {label: [] for label in labels}
    load_start = os.getloadavg()
    for r in range(args.warmup + args.rounds):
        for label, python, cmd in args.configs:
            wall, peak, cpu = run_once(cmd, python or args.python)
            if r >= args.warmup:
                walls[label].append(wall)
                peaks[label].append(peak)
                cpus[label].append(cpu)
    base = statistics.median(walls[labels[0]])
    print(f"{'configuration':24} {'median s':>9} {'min':>7} {'max':>7}  vs {labels[0]:12} "
          f"{'peak MB':>8} {'CPU s':>7}")
    for label in labels:
        w = walls[label]
        med = statistics.median(w)
        print(f"{label:24} {med:9.3f} {min(w):7.3f} {max(w):7.3f}  {med / base:.2f}x"
              f"{'':11} {statistics.median(peaks[label]):8.0f} "
              f"{statistics.median(cpus[label]):7.3f}")
    outputs = {label: outputs_digest(cmd) for label, _, cmd in args.configs}
    written = [o for o in outputs.values() if o is not None]
    if len(written) > 1:
        same = all(o == written[0] for o in written)
        print(f"outputs: {'identical' if same else 'DIFFER'} across the configurations")
    if args.json:
        doc = {"rounds": args.rounds, "warmup": args.warmup,
               "load_average": {"start": load_start, "end": os.getloadavg()},
               "configs": {label: {"args": cmd, "python": python or args.python,
                                   "versions": versions(python or args.python),
                                   "outputs_sha256": outputs[label],
                                   "wall_s": walls[label],
                                   "median_s": statistics.median(walls[label]),
                                   "peak_rss_mb": peaks[label],
                                   "median_peak_rss_mb": statistics.median(peaks[label]),
                                   "cpu_s": cpus[label],
                                   "median_cpu_s": statistics.median(cpus[label])}
                           for label, python, cmd in args.configs}}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
