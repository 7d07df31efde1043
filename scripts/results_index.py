"""Writes bench/results/README.md from bench/results/index.json, and checks the index.

Every raw benchmark output the docs quote lives in ``bench/results/``; ``index.json`` says, per
file, what it measured, with which command, on which machine and when. The docs pages and
``scripts/plots.py`` read the files; ``tests/test_docs.py`` checks that every file is indexed and
that every ``bench/results/NAME`` the README or a docs page names is in the index.

    python scripts/results_index.py          # rewrite bench/results/README.md
    python scripts/results_index.py --check  # exit 1 if a file is missing from the index or absent
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
INDEX = RESULTS / "index.json"


def load() -> dict[str, dict]:
    return json.loads(INDEX.read_text(encoding="utf-8"))["files"]


def problems(files: dict[str, dict]) -> list[str]:
    """Files present but not indexed, and indexed files absent (unless a branch brings them)."""
    present = {p.name for p in RESULTS.iterdir() if p.name not in ("index.json", "README.md")}
    out = [f"not in index.json: {n}" for n in sorted(present - files.keys())]
    out += [f"indexed but absent: {n}" for n in sorted(files.keys() - present)
            if not files[n].get("branch")]
    return out


def render(files: dict[str, dict]) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Raw outputs of the benchmark scripts, one file per run, named by what was measured,",
        "the CPU (`zen3`, `zen4`; none: the Intel Xeon of that day) and the date. The README and",
        "the documentation quote figures only from these files; `scripts/plots.py` draws the",
        "performance plots from them. This table is written from `index.json` by",
        "`python scripts/results_index.py`.",
        "",
        "| file | date | machine | what it measured | command |",
        "|---|---|---|---|---|",
    ]
    for name, e in sorted(files.items(), key=lambda kv: (kv[1]["date"], kv[0])):
        note = f" (comes with branch `{e['branch']}`)" if e.get("branch") else ""
        lines.append(f"| `{name}` | {e['date']} | {e['machine']} | {e['what']}{note} | "
                     f"`{e['command']}` |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check the index")
    args = ap.parse_args()
    files = load()
    bad = problems(files)
    for b in bad:
        print(b, file=sys.stderr)
    if not args.check:
        (RESULTS / "README.md").write_text(render(files), encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
