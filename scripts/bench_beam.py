#!/usr/bin/env python
"""Beam search side by side, whole process (issue 26): as2d greedy, as2d beam 5 target-only,
as2d beam 5 speculative (AS²D), faster-whisper beam 5 and greedy, on the same base weights.

Every side is one process that transcribes every file of the set, timed from start to exit
(interpreter, imports, model loading, all windows, output), as a user runs it. Rounds are
interleaved (each side once per round) so that other load on the machine hits every side
alike; the table gives medians of wall and CPU seconds (user + system: on a machine shared with
other work, CPU seconds say more than wall time about the cost of a side). Temperature 0 only
(no fallback) on every side, language "en", timestamps on, 2 threads, int8 on both: the
comparison is of decoding, not of fallback rules.

* ``greedy``      — ``as2d transcribe -l en --temperature 0`` (AS²D, the default decoder)
* ``beam``        — ``... --decoder target --beam-size 5`` (the target alone)
* ``beam-spec``   — ``... --decoder as2d --beam-size 5`` (speculative beam search)
* ``fw-beam``     — faster-whisper ``beam_size=5`` (its default), ``temperature=0``
* ``fw-greedy``   — faster-whisper ``beam_size=1``

WER is pooled over the files with a reference (Whisper's English normaliser and jiwer, as
scripts/bench_e2e.py does, whose helpers this script uses). ``identical``: beam and beam-spec
must write the same tokens (lossless); a mismatch makes the exit code 3.

    python scripts/bench_e2e.py --make-local-set /tmp/clips   # this machine's real speech
    python scripts/bench_beam.py /tmp/clips --rounds 2 --json beam.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("bench_e2e", HERE / "bench_e2e.py")
e2e = importlib.util.module_from_spec(spec)
sys.modules["bench_e2e"] = e2e
spec.loader.exec_module(e2e)

SIDES = ("greedy", "beam", "beam-spec", "fw-beam", "fw-greedy")
AS2D_ARGS = {"greedy": ["--decoder", "as2d"],
             "beam": ["--decoder", "target", "--beam-size", "5"],
             "beam-spec": ["--decoder", "as2d", "--beam-size", "5"]}


def fw_worker(model_dir: str, threads: int, beam: int, out: str, files: list[str]) -> int:
    from faster_whisper import WhisperModel

    model = WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=threads,
                         num_workers=1)
    results = {}
    for path in files:
        segs, _ = model.transcribe(path, language="en", beam_size=beam, best_of=1,
                                   temperature=0.0, without_timestamps=False,
                                   condition_on_previous_text=True, vad_filter=False)
        texts = []
        for s in segs:
            print(s.text.strip(), flush=True)
            texts.append(s.text)
        results[path] = {"text": "".join(texts)}
    Path(out).write_text(json.dumps(results), encoding="utf-8")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fw-cache", type=Path,
                    default=Path.home() / ".cache" / "as2d-bench" / "whisper-base-ct2")
    ap.add_argument("--fw-worker", nargs=4, help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.fw_worker:
        model_dir, beam, out, threads = args.fw_worker
        return fw_worker(model_dir, int(threads), int(beam), out, [str(p) for p in args.inputs])
    sides = [s for s in args.sides.split(",") if s]
    clips = e2e.collect_clips(args.inputs, False, [])
    files = [str(c.path) for c in clips]
    audio_s = sum(c.seconds for c in clips)
    fw_model = str(e2e.ct2_base_folder(args.fw_cache)) if any(s.startswith("fw") for s in sides) \
        else ""
    work = Path(tempfile.mkdtemp(prefix="bench-beam-"))

    def command(side: str, out: Path) -> list[str]:
        if side.startswith("fw"):
            beam = "5" if side == "fw-beam" else "1"
            return [sys.executable, str(Path(__file__).resolve()), "--fw-worker", fw_model, beam,
                    str(out / "fw.json"), str(args.threads), *files]
        return ["as2d", "transcribe", "-l", "en", "--threads", str(args.threads),
                "--temperature", "0", "--temperature-increment-on-fallback", "0",
                "-f", "json", "-o", str(out), *AS2D_ARGS[side], *files]

    print(f"{len(clips)} files, {audio_s:.1f} s of audio, "
          f"{sum(c.reference is not None for c in clips)} with a reference; "
          f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.2f}", flush=True)
    walls: dict[str, list[float]] = {s: [] for s in sides}
    cpus: dict[str, list[float]] = {s: [] for s in sides}
    texts: dict[str, dict[str, str]] = {}
    tokens: dict[str, dict] = {}
    for r in range(args.rounds):
        for side in sides:
            out = work / f"r{r}-{side}"
            out.mkdir(parents=True)
            wall, _first, cpu, _rss, rc, _n = e2e.timed_process(
                command(side, out), dict(os.environ), out / "stderr.txt", 3600)
            if rc != 0:
                print(f"{side}: exit {rc}\n{e2e.tail(out / 'stderr.txt')}", file=sys.stderr)
                return 1
            walls[side].append(wall)
            cpus[side].append(cpu)
            if side.startswith("fw"):
                doc = json.loads((out / "fw.json").read_text(encoding="utf-8"))
                texts[side] = {k: v["text"] for k, v in doc.items()}
            else:
                texts[side], tokens[side] = e2e.read_as2d_json(out, clips)
            print(f"round {r + 1} {side:9s} {wall:7.2f} s (cpu {cpu:.1f} s)", flush=True)
    rows = {}
    for side in sides:
        med = statistics.median(walls[side])
        w, n, words = e2e.wer(clips, texts[side])
        rows[side] = {"wall_s": round(med, 3), "walls": [round(x, 3) for x in walls[side]],
                      "cpu_s": round(statistics.median(cpus[side]), 3),
                      "rtfx": round(audio_s / med, 2), "wer": None if w is None else round(w, 4),
                      "wer_clips": n, "wer_words": words}
    identical = None
    if "beam" in tokens and "beam-spec" in tokens:
        identical = tokens["beam"] == tokens["beam-spec"]
    print(f"\n{'side':10s} {'wall s':>8s} {'RTFx':>6s} {'cpu s':>7s} {'WER':>7s}")
    for side, row in rows.items():
        wer = "–" if row["wer"] is None else f"{100 * row['wer']:.2f}%"
        print(f"{side:10s} {row['wall_s']:8.2f} {row['rtfx']:6.2f} {row['cpu_s']:7.2f} {wer:>7s}")
    if identical is not None:
        print(f"beam-spec tokens identical to beam: {identical}")
    if args.json:
        args.json.write_text(json.dumps({"files": len(clips), "audio_s": audio_s,
                                         "rounds": args.rounds, "sides": rows,
                                         "identical": identical}, indent=1))
    return 3 if identical is False else 0


if __name__ == "__main__":
    sys.exit(main())
