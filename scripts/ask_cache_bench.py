"""Whole-process times of ``as2d ask``: a first question, and follow-ups with the transcript
cached (issue #46), before and after, side by side.

    python scripts/ask_cache_bench.py --before 24ceafc --after HEAD --rounds 5 \\
        --out bench/results/ask_cache_zen4_2026-12-06.json

Each revision is exported (``git archive``) into a folder of its own and run as
``python -m as2d ask`` with it first on ``PYTHONPATH``, so both are measured as committed,
with the same interpreter, models folder and encoder choice. Three measurements:

1. **first question on a short clip** (≤ 30 s, no transcript cached): before and after
   interleaved, ``--rounds`` each (each run with a fresh, empty transcript cache of its own,
   so it transcribes, hashes and writes its entry);
2. **a 10-minute recording made of many short clips** (the LibriVox and cards clips of
   pocketsphinx-testdata, moonshine-voice's three assets and the repository's sample, with
   half a second of silence between them, repeated to 10 minutes): the first question after
   (transcribes, keeps the transcript), then follow-up questions, each a new process, with the
   cache warm; and before, where every question transcribes the whole recording again
   (``--long-before`` rounds: each is a whole transcription).

3. with ``--follow-up-before`` (a before revision that has the transcript cache too):
   follow-up questions about the long recording by before and after interleaved, each round
   the same question by both, on the same warm cache, and whether they answer alike.

Wall time per process and its CPU time (user + system, from ``getrusage``) are recorded: on a
shared machine the wall time carries other people's load, the CPU time much less of it. Each
exported tree is byte-compiled first (``compileall``), as ``pip install`` leaves an installed
package: a process does not spend its start compiling the sources (where
``PYTHONDONTWRITEBYTECODE`` is set, it otherwise would every time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")
SHORT_QUESTION = "Who had leisure to consider?"
LONG_QUESTIONS = [
    "Who had leisure to consider?",
    "What was the age of wisdom?",
    "What did Nagg ask for?",
    "How many times did the speaker fail?",
    "What did the Dashwoods inherit?",
    "What season was it?",
    "Who was the heir of Norland?",
]


def export(rev: str, into: Path) -> Path:
    """``rev`` as the importable package ``as2d`` (the layout pyproject.toml maps)."""
    src = into / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = into / "pkg" / "as2d"
    shutil.copytree(src / "as2d_cli", pkg)
    (pkg / "runtime").symlink_to(src / "runtime")
    (pkg / "models").symlink_to(src / "models")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(pkg), str(src / "runtime"),
                    str(src / "models")], check=True, env={**os.environ,
                                                           "PYTHONDONTWRITEBYTECODE": ""})
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                            capture_output=True, text=True).stdout.strip()
    return into / "pkg", commit


def clips() -> list[Path]:
    out = sorted(LIBRIVOX.glob("*.wav")) + sorted(CARDS.glob("*.wav"))
    try:
        import moonshine_voice

        assets = Path(moonshine_voice.__file__).parent / "assets"
        out += [assets / n for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav")]
    except ImportError:
        pass
    return out + [ROOT / "samples" / "sense_and_sensibility.wav"]


def long_recording(path: Path, seconds: float = 600.0) -> float:
    import numpy as np
    import soundfile as sf

    from as2d.runtime.audio import load_audio

    parts, total, gap = [], 0, np.zeros(8000, np.float32)
    pieces = []
    for c in clips():
        a = load_audio(c)
        pieces.append(np.asarray(a.samples, np.float32).copy())
        a.close()
    while total < seconds * 16000:  # whole clips, until the recording reaches ``seconds``
        p = pieces[len(parts) // 2 % len(pieces)]
        parts += [p, gap]
        total += len(p) + len(gap)
    sf.write(path, np.concatenate(parts), 16000, subtype="PCM_16")
    return total / 16000


def run(pkg: Path, args: list[str], env: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "as2d", "ask", *args],
                       env={**env, "PYTHONPATH": str(pkg)}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"as2d ask failed ({p.returncode}):\n{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "answer": p.stdout.strip()}


def summary(runs: list[dict]) -> dict | None:
    if not runs:
        return None
    return {"n": len(runs), "wall_median_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "wall_min_s": round(min(r["wall_s"] for r in runs), 3),
            "cpu_median_s": round(statistics.median(r["cpu_s"] for r in runs), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="24ceafc")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--long-before", type=int, default=1,
                    help="whole re-transcriptions of the long recording to time (before)")
    ap.add_argument("--short", default=str(ROOT / "samples" / "sense_and_sensibility.wav"))
    ap.add_argument("--contexts", default="",
                    help="also time follow-ups with --context N for these N (comma-separated): "
                         "a bounded prompt")
    ap.add_argument("--skip-first", action="store_true",
                    help="leave out the first-question comparison on the short clip")
    ap.add_argument("--follow-up-before", action="store_true",
                    help="the before revision has the transcript cache too: time its "
                         "follow-ups interleaved with after's on the same warm cache")
    ap.add_argument("--skip-long", action="store_true",
                    help="only the first-question comparison on the short clip")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ask-cache-bench-"))
    models = os.environ.get("AS2D_MODELS_DIR", str(ROOT / ".cache" / "models"))
    env = {k: v for k, v in os.environ.items() if k != "AS2D_TRANSCRIPT_CACHE"}
    env["AS2D_MODELS_DIR"] = models
    env.pop("PYTHONPATH", None)
    before_pkg, before_commit = export(a.before, work / "before")
    after_pkg, after_commit = export(a.after, work / "after")
    for pkg in (before_pkg, after_pkg):  # the exported tree, not the editable install
        where = subprocess.run([sys.executable, "-c", "import as2d; print(as2d.__file__)"],
                               env={**env, "PYTHONPATH": str(pkg)}, capture_output=True,
                               text=True, check=True).stdout.strip()
        assert where.startswith(str(pkg)), where
    from as2d.runtime.sessions import cpu_model_name

    doc = {"command": " ".join(sys.argv), "machine": cpu_model_name(),
           "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(),
           "shared_machine": True, "before": before_commit, "after": after_commit,
           "python": platform.python_version()}
    short = ["-q", "--no-live", a.short, SHORT_QUESTION]
    # warm-up: the OS file cache, the encoder choice, the LLM's stored prompt head
    run(after_pkg, short, {**env, "AS2D_TRANSCRIPT_CACHE": "off"})
    first = {"before": [], "after": []}
    for i in range(0 if a.skip_first else a.rounds):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for which in order:
            pkg = before_pkg if which == "before" else after_pkg
            # A fresh cache of its own for each (a shared one would answer the second from
            # the first one's entry, where both revisions keep transcripts).
            cache = work / f"cache-first-{i}-{which}"
            first[which].append(run(pkg, short, {**env, "AS2D_TRANSCRIPT_CACHE": str(cache)}))
        print("first", i, first["before"][-1]["wall_s"], first["after"][-1]["wall_s"],
              flush=True)
    doc["first_question_short_clip"] = None if a.skip_first else {
        "clip": a.short, "question": SHORT_QUESTION,
        "before": summary(first["before"]), "after": summary(first["after"]),
        "after_over_before_wall": round(summary(first["after"])["wall_median_s"]
                                        / summary(first["before"])["wall_median_s"], 3),
        "after_over_before_cpu": round(summary(first["after"])["cpu_median_s"]
                                       / summary(first["before"])["cpu_median_s"], 3),
        # (the answer's line: after prints its evidence under it)
        "same_answers": len({x["answer"].splitlines()[0]
                             for x in first["after"] + first["before"]}) == 1,
        "runs": first}

    if a.skip_long:
        doc["load_average_at_end"] = os.getloadavg()
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps({k: v for k, v in doc["first_question_short_clip"].items()
                          if k != "runs"}, indent=1))
        shutil.rmtree(work, ignore_errors=True)
        return
    long = work / "long.wav"
    seconds = long_recording(long)
    cache = work / "cache-long"
    lenv = {**env, "AS2D_TRANSCRIPT_CACHE": str(cache)}
    cold = run(after_pkg, ["-q", "--no-live", str(long), LONG_QUESTIONS[0]], lenv)
    print("long first (after)", cold["wall_s"], flush=True)
    follow = []
    for i in range(a.rounds):
        q = LONG_QUESTIONS[1 + i % (len(LONG_QUESTIONS) - 1)]
        follow.append({**run(after_pkg, ["-q", "--no-live", str(long), q], lenv),
                       "question": q})
        print("long follow-up (after)", follow[-1]["wall_s"], flush=True)
    bounded = {}
    for n in [int(x) for x in a.contexts.split(",") if x.strip()]:
        bounded[n] = []
        for i in range(a.rounds):
            q = LONG_QUESTIONS[1 + i % (len(LONG_QUESTIONS) - 1)]
            bounded[n].append({**run(after_pkg, ["-q", "--no-live", "--context", str(n),
                                                 str(long), q], lenv), "question": q})
            print(f"long follow-up (after, --context {n})", bounded[n][-1]["wall_s"],
                  flush=True)
    both = {"before": [], "after": []}
    for i in range(a.rounds if a.follow_up_before else 0):
        q = LONG_QUESTIONS[1 + i % (len(LONG_QUESTIONS) - 1)]
        for which in (("before", "after") if i % 2 == 0 else ("after", "before")):
            pkg = before_pkg if which == "before" else after_pkg
            both[which].append({**run(pkg, ["-q", "--no-live", str(long), q], lenv),
                                "question": q})
        print("long follow-up before/after", both["before"][-1]["wall_s"],
              both["after"][-1]["wall_s"], flush=True)
    old = []
    for i in range(a.long_before):
        q = LONG_QUESTIONS[1 + i % (len(LONG_QUESTIONS) - 1)]
        old.append({**run(before_pkg, ["-q", "--no-live", str(long), q], env), "question": q})
        print("long follow-up (before)", old[-1]["wall_s"], flush=True)
    doc["long_recording"] = {
        "seconds": round(seconds, 1), "clips": [str(c) for c in clips()],
        "first_question_after": cold,
        "follow_up_after": summary(follow), "follow_up_before": summary(old),
        "follow_up_after_with_context": {str(n): summary(r) for n, r in bounded.items()},
        "runs_after_with_context": {str(n): r for n, r in bounded.items()},
        "follow_up_before_over_after_wall": round(summary(old)["wall_median_s"]
                                                  / summary(follow)["wall_median_s"], 1)
        if old else None,
        "runs_after": follow, "runs_before": old}
    if a.follow_up_before:
        pairs = list(zip(both["before"], both["after"]))
        doc["long_recording"]["follow_up_interleaved"] = {
            "before": summary(both["before"]), "after": summary(both["after"]),
            "after_over_before_wall": round(summary(both["after"])["wall_median_s"]
                                            / summary(both["before"])["wall_median_s"], 3),
            "after_over_before_cpu": round(summary(both["after"])["cpu_median_s"]
                                           / summary(both["before"])["cpu_median_s"], 3),
            "same_answer_line": sum(b["answer"].splitlines()[:1] == f["answer"].splitlines()[:1]
                                    for b, f in pairs),
            "same_answer_and_evidence": sum(b["answer"] == f["answer"] for b, f in pairs),
            "questions": len(pairs)}
        doc["long_recording"]["runs_interleaved"] = both
    doc["load_average_at_end"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    if doc["first_question_short_clip"]:
        print(json.dumps({k: v for k, v in doc["first_question_short_clip"].items()
                          if k != "runs"}, indent=1))
    print(json.dumps({k: v for k, v in doc["long_recording"].items()
                      if not k.startswith("runs") and k != "clips"}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
