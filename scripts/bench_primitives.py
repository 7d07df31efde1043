#!/usr/bin/env python
"""What one encoder run and one decoder pass cost on this CPU, by thread count.

The arithmetic behind AS²D's schedule on a small machine: how much the target's encoder gains
from a second thread (a lot), how much its decoder does (little), what a verification pass of
k rows costs against a single-row pass, and what the drafter costs per window. Random log-mel
input (cost does not depend on the audio); medians of ``--repeats`` runs.

    python scripts/bench_primitives.py                    # base target, tiny.en drafter, int8
    python scripts/bench_primitives.py --target small --threads 1,2,4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def measure(spec: str, role: str, threads: int, repeats: int, models_dir: str | None) -> dict:
    from as2d.loading import load_whisper

    model = load_whisper(spec, None, models_dir, threads, role=role, encoder="onnxruntime")
    rng = np.random.default_rng(0)
    mel = (rng.standard_normal((1, model.dims.n_mels, 3000)) * 0.3).astype(np.float32)
    out = {"encoder 30 s": median_ms(lambda: model.encode(mel), repeats),
           "encoder 10 s": median_ms(lambda: model.encode(mel[:, :, :1000]), repeats)}
    state = model.decoder_state(model.encode(mel))
    tk = model.tokenizer
    try:
        state.forward(tk.sot_sequence("en" if model.multilingual else None) + [440] * 60)
        for rows in (1, 2, 4, 8, 16):
            def one_pass(rows=rows):
                length = state.length
                state.forward([440] * rows)
                state.truncate(length)
            out[f"decoder pass, {rows} row(s)"] = median_ms(one_pass, repeats * 4)
    finally:
        model.release(state)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="base")
    ap.add_argument("--drafter", default="tiny.en")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models-dir", default=None)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    for spec, role in ((args.target, "target"), (args.drafter, "drafter")):
        rows = {t: measure(spec, role, t, args.repeats, args.models_dir) for t in threads}
        names = list(rows[threads[0]])
        print(f"\n{spec} ({role}), median ms")
        print(f"{'':28s}" + "".join(f"{f'{t} thread(s)':>14s}" for t in threads)
              + (f"{'ratio':>10s}" if len(threads) > 1 else ""))
        for name in names:
            vals = [rows[t][name] for t in threads]
            ratio = f"{vals[0] / vals[-1]:>9.2f}x" if len(threads) > 1 else ""
            print(f"{name:28s}" + "".join(f"{v:>14.1f}" for v in vals) + ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
