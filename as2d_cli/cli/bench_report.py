"""Rendering of ``as2d bench``: rich tables on the terminal and an optional PNG."""

from __future__ import annotations

import sys
from pathlib import Path


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}×"


def print_report(report: dict, results, show_windows: bool = False, stream=sys.stdout) -> None:
    from rich.console import Console
    from rich.table import Table

    # Piped output keeps full configuration names instead of rich's 80-column default.
    console = Console(file=stream, highlight=False,
                      width=None if stream.isatty() else 150)
    console.print(f"[bold]as2d bench[/]  {len(report['items'])} recordings, "
                  f"{report['audio_seconds']:.1f} s of audio, median of {report['repeats']} "
                  f"repeats after {report['warmup']} warm-up; threads {report['threads']}")
    if report.get("search", "greedy") != "greedy":
        console.print(f"  search: {report['search']}")
    for model, encoder in (report.get("encoders") or {}).items():
        console.print(f"  encoder of {model}: {encoder}")
    for target, block in report["targets"].items():
        t = Table(title=f"target {target}: {block['windows']} windows", title_justify="left")
        for col in ("configuration", "decode tok/s", "× target", "RTF", "× target",
                    "accept", "slower windows", "of oracle", "WER"):
            t.add_column(col, justify="left" if col == "configuration" else "right")
        for row in sorted(block["configs"], key=lambda r: (r["decoder"] != "target",
                                                           r["decoder"] != "as2d",
                                                           -r["throughput"])):
            style = "bold green" if row["decoder"] == "as2d" else (
                "bold" if row["decoder"] == "target" else "")
            t.add_row(row["config"].split("/", 1)[1], f"{row['throughput']:.1f}",
                      _ratio(row["speedup"]), f"{row['rtf']:.2f}", _ratio(row["rtf_ratio"]),
                      _pct(row["acceptance"]) if row["decoder"] != "target" else "-",
                      _pct(row["slower_share"]) if row["decoder"] != "target" else "-",
                      _pct(row["of_oracle"]), _pct(row["wer"]), style=style)
        console.print(t)
        sd = [r for r in block["configs"] if r["decoder"] == "sd"]
        if sd:
            share = sum(r["slower_share"] or 0 for r in sd) / len(sd)
            console.print(f"  SD baselines: {100 * share:.1f}% of windows slower than "
                          f"target-only on average; oracle {block['oracle_throughput']} tok/s, "
                          f"wins: {block['oracle_wins']}")
        for row in block["configs"]:
            if row.get("beam_steps_per_pass"):
                console.print(f"  {row['config']}: {row['beam_steps_per_pass']:.2f} beam steps "
                              "per pass")
        same = report.get("identical_text", {}).get(target)
        console.print(f"  transcripts identical across all configurations: "
                      f"{'yes' if same else 'NO'}")
    if show_windows:
        for r in results:
            w = Table(title=r.config.name, title_justify="left")
            for col in ("file", "window", "tokens", "decode s", "tok/s", "passes", "accepted"):
                w.add_column(col)
            for x in r.windows:
                w.add_row(x.source, str(x.window), str(x.tokens), f"{x.decode_seconds:.3f}",
                          f"{x.tokens / x.decode_seconds:.0f}" if x.decode_seconds else "-",
                          str(x.passes), f"{x.accepted}/{x.offered}")
            console.print(w)


def plot(report: dict, results, path: Path) -> None:
    """Throughput per configuration, and per-window speed-up over target-only."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from as2d.cli.errors import UserError

        raise UserError("--plot needs matplotlib: pip install 'as2d[bench]'") from None
    targets = list(report["targets"])
    fig, axes = plt.subplots(len(targets), 2, figsize=(13, 4.2 * len(targets)), squeeze=False)
    for row, target in enumerate(targets):
        block = report["targets"][target]
        cfgs = sorted(block["configs"], key=lambda r: (r["decoder"] != "target",
                                                       r["decoder"] != "as2d", r["config"]))
        names = [c["config"].split("/", 1)[1] for c in cfgs]
        colors = ["#888888" if c["decoder"] == "target" else "#2a9d4a" if c["decoder"] == "as2d"
                  else "#4a7ab5" for c in cfgs]
        ax = axes[row][0]
        ax.barh(names, [c["throughput"] for c in cfgs], color=colors)
        if block["oracle_throughput"]:
            ax.axvline(block["oracle_throughput"], color="#c0392b", ls="--", lw=1,
                       label="hindsight oracle")
            ax.legend(loc="lower right")
        ax.invert_yaxis()
        ax.set_xlabel("pooled decoding throughput (tokens/s)")
        ax.set_title(f"{target}: throughput per configuration")
        base = next(r for r in results if r.config.target == target and
                    r.config.decoder == "target")
        base_t = {(w.source, w.window): w.decode_seconds for w in base.windows}
        ax = axes[row][1]
        data, labels = [], []
        for r in results:
            if r.config.target != target or r.config.decoder == "target":
                continue
            data.append([base_t[(w.source, w.window)] / w.decode_seconds for w in r.windows
                         if w.decode_seconds and (w.source, w.window) in base_t])
            labels.append(r.config.name.split("/", 1)[1])
        if data:
            ax.boxplot(data, orientation="horizontal", tick_labels=labels, showfliers=True)
            ax.axvline(1.0, color="#888888", lw=1)
            ax.invert_yaxis()
        ax.set_xlabel("per-window speed-up over target-only (×)")
        ax.set_title(f"{target}: per-window speed-up")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
