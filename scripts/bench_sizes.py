#!/usr/bin/env python
"""What AS²D would gain on larger Whisper models: a PROJECTION from measured costs.

No real Whisper small … large-v3 weights are reachable from these machines, but a model's cost
on a CPU does not depend on its weights. So this script makes full-size random-weight models
(small, medium, large-v3, large-v3-turbo: the true layers, heads, widths, mel bands and
vocabulary), converts each with CTranslate2's own converter into an int8 folder as
faster-whisper ships them, installs it into as2d as any user folder is installed, and times the
pieces of a decode on this CPU:

- ``E_t``: the target's encoder per 30-s window, on the back end as2d's ``--encoder auto``
  chooses by measurement (runtime/whisper/encoder_choice.py), 2 threads;
- ``c2s(1)``: a target-only decoder step (1 row, 2 threads, pools spinning: what
  ``--decoder target`` runs with, as2d_cli/engine.py ``plan_threads``; the projection takes
  target-only's best setting: the fastest of that, the same step without spinning, and one
  thread);
- ``c1(r)``, ``c2(r)``: a target verification pass of r = 1, 2, 4, 8, 16 rows on 1 thread (a
  core of its own: the cost of a pass when the drafter holds the other core) and on 2 threads
  (what AS²D's target session has: every pass once the drafter has finished);
- ``E_d``, ``c_d``: the drafter (tiny.en int8, 1 thread): encoder per 30-s window and a step;
- ``E_fw``, ``c_fw``: faster-whisper (CTranslate2 int8, 2 threads) on the same folder: encoder per
  window and per-token greedy decoding (the slope between two bounded generation lengths).

Decoder passes are timed at a KV length of ``KV_TOKENS`` (the prompt plus 40 tokens, the middle
of a window of speech). Acceptance cannot be measured with random weights: it comes from real
speech with the real base / tiny.en pair (``as2d transcribe --stats-json`` over the clips the
tests use): N tokens per 30 s of audio, τ tokens per target pass, k̄ candidates per verification
pass, and the share of passes with no candidate.

The projection, per 30-s window of continuous speech (what runs where, runtime/transcribe/as2d.py
and turns.py): the drafter waits while the target encodes a window it has already drafted, so
the encoder has both cores in both decoders; the drafter then works on one core for
``d = E_d + N·c_d`` seconds per window, while the target verifies on the other (1-thread
passes) and, for the rest of the window's passes, on both (2-thread passes):

    target-only   T_to  = E_t + N · c_to(1)   (c_to: target-only's best step, see c2s(1) above)
    AS²D          T_as  = E_t + max(d, P_v·c2(r̄) + P_a·c2(1) + d·(1 − c2(r̄)/c1(r̄)))
                  with P = N/τ passes, P_a = a·P of them alone (no candidate), P_v = P − P_a,
                  r̄ = 1 + k̄ rows per verification pass, d = E_d + N·c_d
    faster-whisper T_fw = E_fw + N · c_fw
    projected speed-up = T_to / T_as;  against faster-whisper = T_fw / T_as

(``c(r̄)`` is interpolated linearly between the measured row counts.) The ``d·(1 − c2/c1)``
term is the drafter's core: for d seconds the target's passes run at 1-thread speed. ``max(d,
…)``: a target faster than its drafter waits for nothing, it goes on alone, but it cannot use
candidates that do not exist yet, so the drafter's time bounds the window. Left out: the start
of a file (the drafter's first window beside the target's first encoder), the log-mel, the
scheduler's Python (tens of µs a pass), and that the adaptive budget would choose k against a
larger target's own costs (k̄ is base's). A projection, not a measurement of AS²D on these
models: the acceptance of a real small … large-v3 against tiny.en is unknown here.

    python scripts/bench_sizes.py                     # all four sizes (~15 min, folders cached)
    python scripts/bench_sizes.py --sizes small,large-v3-turbo --repeats 3
    python scripts/bench_sizes.py --no-fw             # skip faster-whisper

Folders and bundles are cached under ``~/.cache/as2d-bench`` (``--cache``), so later runs skip the
conversions; the JSON goes to ``bench/results/bench-sizes-2026-12-02.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: real width (d_model) of each size; layers, heads, mels and vocabulary come from the
# tests' table of true shapes (tests/test_any_whisper.py ARCHS).
WIDTHS = {"small": 768, "medium": 1024, "large-v3": 1280, "large-v3-turbo": 1280}
GOALS = {"small": 1.8, "medium": 2.2, "large-v3": 2.2}  # issue #23's projected speed-ups
ROWS = (1, 2, 4, 8, 16)
KV_GENERATED = 40  # decoder passes timed after the prompt and this many tokens
FW_LENGTHS = (8, 72)  # faster-whisper per token: slope between these generation lengths
DEFAULT_CACHE = Path.home() / ".cache" / "as2d-bench"
DEFAULT_JSON = ROOT / "bench" / "results" / "bench-sizes-2026-12-02.json"
THREADS = 2


# -- the projection (pure arithmetic: tests/test_bench_sizes.py) -------------------------------

def interpolate(table: dict[int, float], rows: float) -> float:
    """Cost of a pass of ``rows`` rows from costs measured at a few row counts (linear between
    them, the last segment's slope past the largest)."""
    xs = sorted(table)
    if rows <= xs[0]:
        return table[xs[0]]
    for lo, hi in zip(xs, xs[1:]):
        if rows <= hi:
            return table[lo] + (table[hi] - table[lo]) * (rows - lo) / (hi - lo)
    lo, hi = xs[-2], xs[-1]
    return table[hi] + (table[hi] - table[lo]) * (rows - hi) / (hi - lo)


def project(*, enc_target: float, step_target_only: float, pass_1t: dict[int, float],
            pass_2t: dict[int, float], enc_drafter: float, step_drafter: float, tokens: float,
            tokens_per_pass: float, candidates_per_pass: float, alone_share: float,
            enc_fw: float | None = None, step_fw: float | None = None) -> dict:
    """One 30-s window's projected seconds (formula in the module docstring). ``pass_1t`` /
    ``pass_2t``: the target's pass cost by rows on 1 / 2 threads; ``candidates_per_pass``: k̄
    over the passes that verified candidates; ``alone_share``: passes with none."""
    passes = tokens / tokens_per_pass
    alone = alone_share * passes
    verify = passes - alone
    rows = 1 + candidates_per_pass
    c1, c2 = interpolate(pass_1t, rows), interpolate(pass_2t, rows)
    drafter = enc_drafter + tokens * step_drafter
    decode = verify * c2 + alone * pass_2t[1] + drafter * (1 - c2 / c1)
    as2d_decode = max(drafter, decode)
    target_only_decode = tokens * step_target_only
    out = {
        "target_only_s": enc_target + target_only_decode,
        "as2d_s": enc_target + as2d_decode,
        "target_only_decode_s": target_only_decode,
        "as2d_decode_s": as2d_decode,
        "drafter_busy_s": drafter,
        "drafter_bound": drafter >= decode,
        "passes": passes,
        "rows_per_verify_pass": rows,
    }
    out["speedup"] = out["target_only_s"] / out["as2d_s"]
    out["decode_speedup"] = target_only_decode / as2d_decode
    if enc_fw is not None and step_fw is not None:
        out["faster_whisper_s"] = enc_fw + tokens * step_fw
        out["vs_faster_whisper"] = out["faster_whisper_s"] / out["as2d_s"]
        out["target_only_vs_faster_whisper"] = out["faster_whisper_s"] / out["target_only_s"]
    return out


# -- helpers ---------------------------------------------------------------------------------

def median_s(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after a warm-up (bench_primitives' timing)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_primitives import median_ms

    return median_ms(fn, repeats) / 1000


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def child(args: list[str], timeout: float = 3600) -> dict:
    """Run a stage of this script in a process of its own (one full-size model in memory at a
    time, peak RSS per stage); its last stdout line is its JSON result."""
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"bench_sizes: stage {args} failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ct2_dir(cache: Path, size: str) -> Path:
    return cache / "ct2" / f"faster-whisper-{size}-random-int8"


# -- stage: a full-size CTranslate2 folder -----------------------------------------------------

def build_folder(size: str, cache: Path) -> dict:
    """Random transformers Whisper of ``size``'s true config (the tests' helper, at full width,
    in float16 to halve the memory) → CTranslate2's converter → an int8 folder."""
    import ctranslate2
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    import test_any_whisper as t

    final = ct2_dir(cache, size)
    hf = cache / f"hf-{size}"
    tmp = final.with_name(final.name + ".tmp")
    for p in (hf, tmp):
        shutil.rmtree(p, ignore_errors=True)
    torch.set_default_dtype(torch.float16)
    t0 = time.perf_counter()
    t._hf_model(size, hf, width=WIDTHS[size])  # seeded by the helper
    made = time.perf_counter() - t0
    gc.collect()
    ctranslate2.converters.TransformersConverter(
        str(hf), copy_files=["tokenizer.json", "preprocessor_config.json"],
        load_as_float16=True).convert(str(tmp), quantization="int8", force=True)
    converted = time.perf_counter() - t0 - made
    shutil.rmtree(hf)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    return {"random_init_s": round(made, 1), "ct2_convert_s": round(converted, 1),
            "peak_rss_mb": round(peak_rss_mb()),
            "model_bin_mb": round((final / "model.bin").stat().st_size / 2**20)}


def install(size: str, cache: Path) -> dict:
    """as2d's normal path for a user folder (``as2d models install --from DIR``): convert into
    the bench's own models folder (int8), timed, with this process's peak RSS."""
    from as2d.models.install import install_user_folder

    root = cache / "models"
    before = set(root.iterdir()) if root.is_dir() else set()
    t0 = time.perf_counter()
    bundle = Path(getattr(install_user_folder(ct2_dir(cache, size), "int8", root), "path", ""))
    return {"install_s": round(time.perf_counter() - t0, 1), "peak_rss_mb": round(peak_rss_mb()),
            "bundle": str(bundle), "converted": bundle not in before}


# -- stage: as2d's costs -------------------------------------------------------------------------

def _passes(model, ctx, repeats: int) -> dict[int, float]:
    tk = model.tokenizer
    state = model.decoder_state(ctx)
    out = {}
    try:
        state.forward(tk.sot_sequence("en" if model.multilingual else None)
                      + [tk.no_timestamps] + [440] * KV_GENERATED)
        for rows in ROWS:
            def one(rows=rows):
                length = state.length
                state.forward([440] * rows)
                state.truncate(length)
            out[rows] = median_s(one, repeats)
    finally:
        model.release(state)
    return out


def measure_target(size: str, cache: Path, repeats: int) -> dict:
    import numpy as np

    from as2d.loading import load_whisper

    folder, models = str(ct2_dir(cache, size)), cache / "models"
    t0 = time.perf_counter()
    # Target-only's model: every core, pools spinning, encoder chosen by measurement (auto).
    model = load_whisper(folder, None, models, THREADS, role="target", encoder="auto", spin=True)
    load_s = time.perf_counter() - t0
    choice = model.encoder_choice
    rng = np.random.default_rng(0)
    mel = (rng.standard_normal((1, model.dims.n_mels, 3000)) * 0.3).astype(np.float32)
    enc = median_s(lambda: model.encode(mel), repeats)
    ctx = model.encode(mel)
    target_only = _passes(model, ctx, repeats * 2)
    del model
    gc.collect()
    # AS²D's target: the same threads, pools not spinning (the drafter shares the cores); and
    # the same passes on one thread, a model of its own.
    model = load_whisper(folder, None, models, THREADS, role="target", encoder="onnxruntime")
    two = _passes(model, ctx, repeats * 2)
    del model
    gc.collect()
    model = load_whisper(folder, None, models, 1, role="target", encoder="onnxruntime")
    one = _passes(model, ctx, repeats * 2)
    return {"encoder_s": enc, "encoder_choice": choice.name, "encoder_how": choice.how,
            "encoder_candidates_s": choice.seconds, "first_load_s": round(load_s, 1),
            "pass_target_only_2t_spin": target_only, "pass_as2d_1t": one,
            "pass_as2d_2t": two, "dims": model.dims.__dict__, "peak_rss_mb": round(peak_rss_mb())}


def measure_drafter(repeats: int) -> dict:
    import numpy as np

    from as2d.loading import load_whisper

    model = load_whisper("tiny.en", None, None, 1, role="drafter", encoder="auto")
    rng = np.random.default_rng(0)
    mel = (rng.standard_normal((1, model.dims.n_mels, 3000)) * 0.3).astype(np.float32)
    enc = median_s(lambda: model.encode(mel), repeats)
    steps = _passes(model, model.encode(mel), repeats * 2)
    return {"model": model.name, "encoder_s": enc, "encoder_choice": model.encoder_choice.name,
            "step_s": steps[1], "threads": 1}


# -- stage: faster-whisper on the same folder ----------------------------------------------------

def measure_fw(size: str, cache: Path, repeats: int) -> dict:
    import ctranslate2
    import numpy as np
    from faster_whisper import WhisperModel
    from faster_whisper.tokenizer import Tokenizer

    fw = WhisperModel(str(ct2_dir(cache, size)), device="cpu", compute_type="int8",
                      cpu_threads=THREADS, num_workers=1)
    n_mels = fw.feature_extractor.mel_filters.shape[0]
    rng = np.random.default_rng(0)
    mel = (rng.standard_normal((1, n_mels, 3000)) * 0.3).astype(np.float32)
    features = ctranslate2.StorageView.from_array(mel)
    enc = median_s(lambda: fw.model.encode(features, to_cpu=False), repeats)
    encoded = fw.model.encode(features, to_cpu=False)
    tk = Tokenizer(fw.hf_tokenizer, fw.model.is_multilingual, task="transcribe", language="en")
    prompt = list(tk.sot_sequence) + [tk.no_timestamps]

    def generate(length: int) -> int:  # greedy, end of text suppressed: exactly ``length``
        res = fw.model.generate(encoded, [prompt], beam_size=1, max_length=length,
                                suppress_tokens=[-1, tk.eot], suppress_blank=False)
        return len(res[0].sequences_ids[0])

    made = {n: generate(n) for n in FW_LENGTHS}
    short, long_ = (median_s(lambda n=n: generate(n), repeats) for n in FW_LENGTHS)
    step = (long_ - short) / (made[FW_LENGTHS[1]] - made[FW_LENGTHS[0]])
    return {"encoder_s": enc, "step_s": step, "generated": made, "compute_type": "int8",
            "threads": THREADS, "peak_rss_mb": round(peak_rss_mb())}


# -- stage: acceptance on real speech with the real base / tiny.en pair -------------------------

def _pooled(audio_s: float, tokens: int, passes: int, offered: int, accepted: int,
            alone: int) -> dict:
    verify = passes - alone
    return {"audio_seconds": audio_s, "committed_tokens": tokens, "target_passes": passes,
            "candidates_offered": offered, "candidates_accepted": accepted,
            "passes_alone": alone, "tokens_per_30s": 30 * tokens / audio_s,
            "tokens_per_pass": tokens / passes,
            "candidates_per_verify_pass": offered / max(1, verify),
            "alone_share": alone / passes, "acceptance": accepted / max(1, offered)}


def measure_acceptance() -> dict:
    """Tokens per target pass on real speech with the real base / tiny.en pair, in two regimes:
    ``as_run``, the command as a user runs it (on 2 cores base's drafter is often behind: a
    pass with nothing to verify goes alone), and ``drafter_ahead``, each file's draft complete
    before the target decodes it: the regime of a target several times slower than its drafter
    (tiny.en needs about half a second a window, small … large-v3 several), which the projection
    uses. Same engine classes, same adaptive budget; only when candidates arrive differs."""
    sys.path.insert(0, str(ROOT / "tests"))
    before = os.environ.get("AS2D_ENCODER")
    from conftest import real_clips  # the clips the tests use

    if before is None:  # conftest pins the tests' encoder; the bench uses auto
        os.environ.pop("AS2D_ENCODER", None)
    clips = [str(c.path) for c in real_clips()]
    out = DEFAULT_CACHE / "acceptance"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "as2d", "transcribe", "-l", "en", "--decoder", "as2d",
           "--model", "base", "--drafter", "tiny.en", "--threads", str(THREADS),
           "--stats-json", str(out / "stats.json"), "-o", str(out), "-f", "txt", *clips]
    subprocess.run(cmd, check=True, capture_output=True, timeout=900)
    files = json.loads((out / "stats.json").read_text())
    f = [x["summary"] for x in files]
    as_run = _pooled(sum(x["audio_seconds"] for x in f), sum(x["committed_tokens"] for x in f),
                     sum(x["target_passes"] for x in f), sum(x["candidates_offered"] for x in f),
                     sum(x["candidates_accepted"] for x in f), sum(x["passes_alone"] for x in f))
    return {"clips": len(clips), "as_run": as_run, "drafter_ahead": _drafter_ahead(clips),
            "command": "as2d transcribe -l en --decoder as2d --model base --drafter tiny.en "
                       f"--threads {THREADS} --stats-json … (the tests' real clips)"}


def _drafter_ahead(clips: list[str]) -> dict:
    from as2d.loading import load_whisper
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import Verified
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    class DrafterFirst(AS2D):
        """AS²D whose target starts a window only once the file's draft is complete."""

        def source(self, window):
            give_up = time.monotonic() + 120
            while (self.stream is not None and not self.stream.finished
                   and time.monotonic() < give_up):
                time.sleep(0.005)
            return super().source(window)

    target = load_whisper("base", None, None, THREADS, role="target")
    drafter = load_whisper("tiny.en", None, None, 1, role="drafter")
    passes: list = []
    listen = lambda e: passes.append(e) if isinstance(e, Verified) else None  # noqa: E731
    run = LongFormTranscriber(target, DrafterFirst(target, drafter), listen)
    audio_s = 0.0
    tokens = 0
    for path in clips:
        audio = load_audio(path)
        audio_s += audio.duration
        tokens += sum(len(s.tokens) for s in run.transcribe(audio, TranscribeOptions(
            language="en")))
    return _pooled(audio_s, sum(len(p.committed) for p in passes), len(passes),
                   sum(p.offered for p in passes), sum(p.accepted for p in passes),
                   sum(1 for p in passes if not p.offered)) | {"segment_tokens": tokens}


# -- the report -------------------------------------------------------------------------------

def target_only_step(t: dict) -> float:
    """Target-only's best step: 2 threads with spinning pools (what it runs with), without, or
    1 thread (faster on a busy machine, where a neighbour takes the second core)."""
    return min(t["pass_target_only_2t_spin"][1], t["pass_as2d_2t"][1], t["pass_as2d_1t"][1])


def project_size(m: dict, drafter: dict, acceptance: dict) -> dict:
    t, fw, acc = m["target"], m.get("fw"), acceptance["drafter_ahead"]
    return project(
        enc_target=t["encoder_s"], step_target_only=target_only_step(t),
        pass_1t=t["pass_as2d_1t"], pass_2t=t["pass_as2d_2t"],
        enc_drafter=drafter["encoder_s"], step_drafter=drafter["step_s"],
        tokens=acc["tokens_per_30s"], tokens_per_pass=acc["tokens_per_pass"],
        candidates_per_pass=acc["candidates_per_verify_pass"], alone_share=acc["alone_share"],
        enc_fw=fw["encoder_s"] if fw else None, step_fw=fw["step_s"] if fw else None)


def markdown(results: dict, drafter: dict, acceptance: dict) -> str:
    def ms(s: float) -> str:
        return f"{1000 * s:.0f}"

    lines = [
        "| size | encoder s / 30-s window: as2d (`auto` → back end), faster-whisper | "
        "target-only step ms (best of 2 threads, 1 thread) | "
        "AS²D pass ms by rows 1/2/4/8/16, 1 thread | "
        "same, 2 threads | faster-whisper ms / token | **projected** s / window: target-only, "
        "AS²D, faster-whisper | **projected** AS²D speed-up (decoding alone) | AS²D vs "
        "faster-whisper | issue #23's goal |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for size, m in results.items():
        t, fw, p = m["target"], m.get("fw"), m["projection"]
        goal = GOALS.get(size)
        met = "—" if goal is None else f"≥ {goal}×, ahead of faster-whisper: " + (
            "**met**" if p["speedup"] >= goal and p.get("vs_faster_whisper", 0) > 1
            else "**not met**")
        cells = [
            size,
            f"{t['encoder_s']:.2f} ({t['encoder_choice']}), "
            + (f"{fw['encoder_s']:.2f}" if fw else "—"),
            ms(target_only_step(t)),
            "/".join(ms(t["pass_as2d_1t"][r]) for r in ROWS),
            "/".join(ms(t["pass_as2d_2t"][r]) for r in ROWS),
            ms(fw["step_s"]) if fw else "—",
            f"{p['target_only_s']:.2f}, {p['as2d_s']:.2f}, "
            + (f"{p['faster_whisper_s']:.2f}" if fw else "—"),
            f"{p['speedup']:.2f}× ({p['decode_speedup']:.2f}×)"
            + (" drafter-bound" if p["drafter_bound"] else ""),
            f"{p['vs_faster_whisper']:.2f}×" if fw else "—",
            met]
        lines.append("| " + " | ".join(cells) + " |")
    acc = acceptance["drafter_ahead"]
    lines += ["", (
        f"Drafter {drafter['model']} (1 thread): encoder {drafter['encoder_s']:.3f} s per 30-s "
        f"window ({drafter['encoder_choice']}), step {ms(drafter['step_s'])} ms. Acceptance on "
        f"real speech (base / tiny.en, {acceptance['clips']} clips, "
        f"{acc['audio_seconds']:.0f} s, draft ahead of the target): N = "
        f"{acc['tokens_per_30s']:.0f} tokens per 30 s, τ = {acc['tokens_per_pass']:.2f} "
        f"tokens per target pass, k̄ = {acc['candidates_per_verify_pass']:.2f} candidates per "
        f"verification pass, {100 * acc['alone_share']:.0f} % of passes alone, acceptance "
        f"{100 * acc['acceptance']:.1f} %.")]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="small,medium,large-v3,large-v3-turbo")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (median)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON)
    ap.add_argument("--no-fw", action="store_true", help="skip faster-whisper")
    ap.add_argument("--reuse", action="store_true",
                    help="take the measurements kept in the cache by an earlier run")
    ap.add_argument("--build-only", action="store_true", help="make the folders, measure nothing")
    ap.add_argument("--stage", nargs=2, metavar=("STAGE", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:  # a child process: one stage, its JSON on the last line
        stage, size = args.stage
        fn = {"build": lambda: build_folder(size, args.cache),
              "install": lambda: install(size, args.cache),
              "target": lambda: measure_target(size, args.cache, args.repeats),
              "fw": lambda: measure_fw(size, args.cache, args.repeats),
              "drafter": lambda: measure_drafter(args.repeats),
              "acceptance": measure_acceptance}[stage]
        print(json.dumps(fn()))
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for s in sizes:
        if s not in WIDTHS:
            raise SystemExit(f"bench_sizes: error: unknown size {s!r} (one of {', '.join(WIDTHS)})")
    common = ["--cache", str(args.cache), "--repeats", str(args.repeats)]
    results: dict = {}
    for size in sizes:  # conversions: recorded in the cache the first time they run
        m = results[size] = {}
        record = args.cache / f"conversion-{size}.json"
        made = json.loads(record.read_text()) if record.is_file() else {}
        if not (ct2_dir(args.cache, size) / "model.bin").is_file():
            print(f"[{size}] making the random full-size folder …", flush=True)
            made = {"build": child(["--stage", "build", size, *common])}
        print(f"[{size}] installing into as2d (int8) …", flush=True)
        installed = child(["--stage", "install", size, *common])
        if installed["converted"] or "install" not in made:
            made["install"] = installed
        record.write_text(json.dumps(made))
        m.update(made)
    if args.build_only:
        return 0
    load = os.getloadavg()

    def measured(stage: str, size: str = "-") -> dict:
        """A measuring stage's result, kept in the cache (``--reuse`` takes it from there)."""
        kept = args.cache / "measured" / f"{stage}-{size}.json"
        if args.reuse and kept.is_file():
            got = json.loads(kept.read_text())
        else:
            print(f"[{size}] {stage} …", flush=True)
            start = os.getloadavg()[0]
            got = child(["--stage", stage, size, *common])
            got["load_average"] = [round(start, 2), round(os.getloadavg()[0], 2)]
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(got))
        for name, value in got.items():  # JSON keys are strings: rows back to numbers
            if name.startswith("pass_"):
                got[name] = {int(r): v for r, v in value.items()}
        return got

    acc = measured("acceptance")
    drafter = measured("drafter")
    for size in sizes:
        m = results[size]
        m["target"] = measured("target", size)
        if not args.no_fw:
            m["fw"] = measured("fw", size)
        m["projection"] = project_size(m, drafter, acc)
    table = markdown(results, drafter, acc)
    doc = {"what": "PROJECTION of AS²D's end-to-end speed-up per 30-s window from costs measured "
                   "on full-size random-weight models and acceptance measured on real speech "
                   "with base / tiny.en (formula in scripts/bench_sizes.py)",
           "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "threads": THREADS,
                       "load_average_start": load, "load_average_end": os.getloadavg(),
                       "load_average_note": "1-min load average around each measuring stage "
                                            "is in that stage's load_average (start, end)"},
           "repeats": args.repeats, "kv_tokens_generated": KV_GENERATED,
           "reused_measurements": args.reuse,
           "acceptance": acc, "drafter": drafter, "sizes": results, "markdown": table}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(table)
    print(f"\nload average {load[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
          f"wrote {args.json}")
    return 0


def _cpu() -> str:
    from as2d.runtime.sessions import cpu_flags, cpu_model_name

    amx = " with AMX" if any(f.startswith("amx") for f in cpu_flags()) else ""
    return cpu_model_name() + amx


if __name__ == "__main__":
    sys.exit(main())
