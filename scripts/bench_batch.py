"""One ``as2d transcribe`` process against ``as2d batch`` on a local Ray cluster.

    python3 scripts/bench_batch.py --files 50 --rounds 2

Layouts (threads in all are the same, 2): ``transcribe -t 2``; Ray with 1 actor × 2 threads;
Ray with 2 actors × 1 thread. Each runs end to end as a fresh process (Ray start, model load,
every file, shutdown) on N copies of the librivox clips, and on one clip alone; the difference
gives the steady cost per file, the one-clip run the fixed start-up. The runs are interleaved
round by round, so a busy neighbour on a shared machine slows every layout alike; the spread
over rounds is reported. Results as a table on stdout, the raw runs as JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")

LAYOUTS = {
    "transcribe -t 2": ["transcribe", "-t", "2", "-q"],
    "ray 1x2": ["batch", "-j", "1", "-t", "2", "--no-live"],
    "ray 2x1": ["batch", "-j", "2", "-t", "1", "--no-live"],
}


def make_archive(root: Path, n: int) -> tuple[list[Path], float]:
    import soundfile

    clips = sorted(LIBRIVOX.glob("*.wav"))
    files, seconds = [], 0.0
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        src = clips[i % len(clips)]
        dst = root / f"{i:03d}-{src.name}"
        shutil.copy(src, dst)
        files.append(dst)
        seconds += soundfile.info(str(dst)).duration
    return files, seconds


def run(layout: str, files: list[Path], out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["as2d", *LAYOUTS[layout][:1], *map(str, files), "-o", str(out),
           *LAYOUTS[layout][1:]]
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{layout} failed:\n{proc.stderr[-2000:]}")
    return wall


def worker_walls(out: Path) -> list[float]:
    manifest = out / "manifest.jsonl"
    if not manifest.exists():
        return []
    return [json.loads(line)["wall"] for line in manifest.read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("AS2D_ENCODER", "onnxruntime")
    tmp = Path(tempfile.mkdtemp(prefix="as2d-bench-batch-"))
    try:
        files, audio = make_archive(tmp / "in", args.files)
        runs: dict[str, dict[str, list]] = {k: {"all": [], "one": [], "file_wall": []}
                                            for k in LAYOUTS}
        for r in range(args.rounds):
            for layout in LAYOUTS:  # interleaved: every layout once per round
                out = tmp / "out"
                runs[layout]["one"].append(run(layout, files[:1], out))
                runs[layout]["all"].append(run(layout, files, out))
                runs[layout]["file_wall"].extend(worker_walls(out))
                print(f"round {r + 1} {layout}: {runs[layout]['all'][-1]:.1f} s "
                      f"(1 file: {runs[layout]['one'][-1]:.1f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    n = len(files)
    print(f"\n{n} files, {audio:.0f} s of audio ({args.rounds} rounds, interleaved; "
          f"median [min–max])\n")
    print("| layout | wall, all files (s) | wall, 1 file (s) | per extra file (s) | "
          "x real time | worker s/file |")
    print("|---|---|---|---|---|---|")
    base = None
    for layout, r in runs.items():
        per = [(a - o) / (n - 1) for a, o in zip(r["all"], r["one"])]
        fw = statistics.median(r["file_wall"]) if r["file_wall"] else float("nan")
        med = statistics.median(per)
        base = med if base is None else base
        print(f"| {layout} | {statistics.median(r['all']):.1f} [{min(r['all']):.1f}–"
              f"{max(r['all']):.1f}] | {statistics.median(r['one']):.1f} [{min(r['one']):.1f}–"
              f"{max(r['one']):.1f}] | {med:.3f} [{min(per):.3f}–{max(per):.3f}] | "
              f"{audio / statistics.median(r['all']):.1f} | "
              f"{'–' if fw != fw else f'{fw:.2f}'} |")
    if args.json:
        args.json.write_text(json.dumps({"files": n, "audio_s": audio, "runs": runs},
                                        indent=1))


if __name__ == "__main__":
    main()
