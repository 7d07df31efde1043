"""Draws the documentation's performance plots from the result files in bench/results/.

The figures on docs/performance.md are pictures of these files, nothing else: when a result
file changes or a run is added here, run this script again and commit the images.

    pip install -e '.[docs]'               # matplotlib
    python scripts/plots.py                # writes docs/img/*.png
    python scripts/plots.py --out /tmp/p   # elsewhere (tests/test_docs.py does this)

Plots:
  rtf.png            real-time factor (audio s per wall s) by system, clip set and CPU
  speedup-window.png AS²D's decoding speed-up over the target alone, window by window
  acceptance.png     acceptance and decoding speed-up: classic SD's catalog against AS²D
  memory.png         peak resident memory of whole commands, by system and run
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

SIDES = {"as2d": "as2d (AS²D)", "target": "as2d target-only", "fw": "faster-whisper int8",
         "wcpp": "whisper.cpp q8_0"}
COLOURS = {"as2d": "#3f51b5", "target": "#9fa8da", "fw": "#ef6c00", "wcpp": "#8d6e63"}

# (label on the axis, result file): side-by-side runs of scripts/bench_e2e.py, one per group.
E2E_RUNS = [
    ("17 clips\nXeon AMX\n12-02", "bench-e2e-whispercpp-2026-12-02.json"),
    ("17 clips\nZen 4\n12-04", "bench-e2e-short-zen4-2026-12-04.json"),
    ("637-s file\nZen 4\n12-04", "bench-e2e-joined-zen4-2026-12-04.json"),
    ("17 clips\nZen 3\n12-02", "bench-e2e-zen3-d-2026-12-02.json"),
    ("637-s file\nZen 3\n12-02", "bench-e2e-joined-zen3-2026-12-02.json"),
]
BENCH_SETS = [("LibriVox, 5 clips", "bench-librivox.json"),
              ("4-minute recording", "bench-long.json")]


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def grouped_bars(ax, runs, metric: str, fmt: str) -> None:
    """One group per run, one bar per side the run measured."""
    width = 0.2
    for g, (_, name) in enumerate(runs):
        summary = load(name)["summary"]
        present = [s for s in SIDES if s in summary]
        for i, side in enumerate(present):
            x = g + (i - (len(present) - 1) / 2) * width
            value = summary[side][metric]
            ax.bar(x, value, width, color=COLOURS[side],
                   label=SIDES[side] if side not in ax.get_legend_handles_labels()[1] else None)
            ax.text(x, value, fmt.format(value), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(runs)), [label for label, _ in runs], fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    order = [labels.index(SIDES[s]) for s in SIDES if SIDES[s] in labels]
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, frameon=False)


def plot_rtf(plt, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    grouped_bars(ax, E2E_RUNS, "rtfx", "{:.1f}")
    ax.set_ylabel("× real time (audio s / wall s), higher is faster")
    ax.set_title("Whole commands side by side, 2 threads, base weights (medians)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "rtf.png", dpi=110)
    plt.close(fig)


def plot_memory(plt, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    grouped_bars(ax, E2E_RUNS[:3], "max_rss_mb", "{:.0f}")
    ax.set_ylabel("peak resident memory, MB (lower is better)")
    ax.set_title("Peak RSS of whole commands (max over a run's processes)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "memory.png", dpi=110)
    plt.close(fig)


def window_speedups(name: str) -> list[float]:
    """Target-only decode seconds over AS²D's, window by window (base int8 target)."""
    results = {r["config"]["name"]: r for r in load(name)["results"]}
    target = results["base-int8/target"]["windows"]
    as2d = results["base-int8/as2d:tiny.en-int8"]["windows"]
    return [t["decode_seconds"] / a["decode_seconds"] for t, a in zip(target, as2d)
            if a["decode_seconds"] > 0]


def plot_speedup_per_window(plt, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.8))
    x0 = 0
    for (label, name), colour in zip(BENCH_SETS, ("#3f51b5", "#26a69a")):
        s = window_speedups(name)
        xs = range(x0, x0 + len(s))
        ax.bar(xs, s, color=colour, label=f"{label} ({len(s)} windows)")
        x0 += len(s) + 1
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("decoding speed-up over target-only")
    ax.set_xlabel("30-s window")
    ax.set_xticks([])
    ax.set_title("AS²D per window: decoding time of the target alone / AS²D "
                 "(as2d bench, base int8 ← tiny.en int8)", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out / "speedup-window.png", dpi=110)
    plt.close(fig)


def plot_acceptance(plt, out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for ax, (label, name) in zip(axes, BENCH_SETS):
        configs = load(name)["summary"]["targets"]["base-int8"]["configs"]
        for c in configs:
            if c["decoder"] == "target":
                continue
            as2d = c["decoder"] == "as2d"
            ax.scatter(c["acceptance"] * 100, c["speedup"], s=60 if as2d else 25,
                       color="#3f51b5" if as2d else "#ef6c00", marker="*" if as2d else "o")
            tag = "AS²D" if as2d else f"{c['drafter'].replace('tiny.en-', '')} k{c['budget']}"
            ax.annotate(tag, (c["acceptance"] * 100, c["speedup"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("acceptance of offered candidates, %")
    axes[0].set_ylabel("decoding speed-up over target-only")
    fig.suptitle("Classic SD (drafter × budget) against AS²D: high acceptance is not speed",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "acceptance.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "as2d"
    args.out.mkdir(parents=True, exist_ok=True)
    for draw in (plot_rtf, plot_speedup_per_window, plot_acceptance, plot_memory):
        draw(plt, args.out)
    print(f"plots written to {args.out}")


if __name__ == "__main__":
    main()
