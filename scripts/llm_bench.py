"""Measure the answering LLM: decode latency, verification-pass cost, greedy samples.

Usage: ``python scripts/llm_bench.py [--models-dir DIR] [--precisions int8 fp32]
[--threads 1 2] [--context 64]``. Installs the bundles if needed (timing the conversion),
then for every precision and thread count reports the median latency of a single-token
step and of T-row passes (T = 1, 2, 4, 8, 16) after a ``--context``-token prefix, as
milliseconds and as a ratio to the single step: what speculative verification pays for
checking T−1 candidates at once. Configurations run side by side in one process, in
interleaved rounds; the minimum is printed beside the median because on a shared machine the
minimum is the better estimate of the uncontended cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from as2d.models.install import bundle_path, install  # noqa: E402
from as2d.runtime.ask.generate import greedy_generate  # noqa: E402
from as2d.runtime.llm.lm import CausalLM  # noqa: E402

PROMPTS = ["The Eiffel Tower is located in", "Once upon a time, there was a little",
           "Question: What is the boiling point of water?\nAnswer:"]


def _times_ms(fn, repeat: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def bench(lm: CausalLM, context: int, repeat: int) -> dict[int, list[float]]:
    """Per T, the times (ms) of ``repeat`` T-row passes after a ``context``-token prefix."""
    ids = lm.tokenizer.encode("The river rose slowly through the night. " * 40)[:context]
    st = lm.state()
    lm.prefill(st, ids)
    out = {}
    for t in (1, 2, 4, 8, 16):
        cand = ids[1 : t + 1]

        def step(cand=cand):
            st.forward(cand)
            st.truncate(context)

        out[t] = _times_ms(step, repeat)
    lm.release(st)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / ".cache" / "models")
    ap.add_argument("--precisions", nargs="+", default=["int8", "fp32"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new", type=int, default=24, help="greedy tokens per sample prompt")
    args = ap.parse_args()

    for precision in args.precisions:
        fresh = not (bundle_path("gemma-3-270m", precision, args.models_dir)
                     / "manifest.json").is_file()
        t0 = time.perf_counter()
        b = install("gemma-3-270m", precision, args.models_dir)
        note = f"converted in {time.perf_counter() - t0:.1f} s" if fresh else "already installed"
        sizes = {f: round((b.path / f).stat().st_size / 1e6, 1) for f in b.manifest["sha256"]}
        print(f"{b.name}: {note}; files (MB) {sizes}")

    models, times = {}, {}
    for precision in args.precisions:
        for threads in args.threads:
            t0 = time.perf_counter()
            models[precision, threads] = CausalLM(
                bundle_path("gemma-3-270m", precision, args.models_dir), threads)
            print(f"{precision} threads={threads}: session loaded in "
                  f"{time.perf_counter() - t0:.1f} s")
    for _ in range(args.rounds):
        for key, lm in models.items():
            for t, ts in bench(lm, args.context, args.repeat).items():
                times.setdefault(key, {}).setdefault(t, []).extend(ts)
    print(f"pass latency after a {args.context}-token prefix, ms: median (min), "
          "ratio of medians to T=1")
    for (precision, threads), res in times.items():
        one = statistics.median(res[1])
        row = "  ".join(f"T={t}: {statistics.median(ts):5.1f} ({min(ts):5.1f}) "
                        f"{statistics.median(ts) / one:.2f}x" for t, ts in res.items())
        print(f"  {precision} threads={threads} | {row}")
    for (precision, threads), lm in models.items():
        if threads != args.threads[-1]:
            continue
        print(f"greedy samples, {precision}, {threads} threads:")
        for prompt in PROMPTS:
            t0 = time.perf_counter()
            out = greedy_generate(lm, lm.tokenizer.encode(prompt), args.new)
            dt = time.perf_counter() - t0
            text = lm.tokenizer.decode(out, skip_special=False)
            print(f"    {prompt!r} → {text!r}  ({len(out) / dt:.1f} tok/s incl. prefill)")


if __name__ == "__main__":
    main()
