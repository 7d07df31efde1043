"""Where one whole ``as2d ask`` process spends its time (issue #46: a follow-up question's
whole-process time): the command run in this process under cProfile, then its seconds split
into the stages a follow-up goes through, each the cumulative time of the function that does
it (imports nest in the rest, so the stages overlap where noted).

    AS2D_TRANSCRIPT_CACHE=/tmp/cache python scripts/ask_process_profile.py \\
        --out bench/results/ask-process-profile.json --label short -- \\
        ask -q --no-live clip.wav "What season was it?"

Several ``--label``/command pairs are not supported: one process per run, as a user starts
it (run the script once per command; ``--out`` adds to the file's runs when it exists).
The profiler slows Python code (imports, the answer rules) far more than onnxruntime's
passes: read the split as shares, the whole-process times from ``scripts/cold_runs.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path

# stage: (file suffix, function name); cumulative seconds of the outermost calls
STAGES = {
    "imports": ("<frozen importlib._bootstrap>", "_find_and_load"),
    "waiting_for_the_answering_model": ("as2d_cli/engine.py", "answerer_from"),
    "answer_whole": ("ask/answer.py", "ask"),  # the stages below are parts of it
    "prefill": ("llm/lm.py", "prefill"),
    "scoring_candidates": ("ask/answer.py", "score_candidates"),
    "calibrating_candidates": ("ask/answer.py", "calibrate"),
    "generating": ("speculative/candidates.py", "run"),
    "re_ranking_passages": ("ask/rerank.py", "question_likelihoods"),
}


def stage_seconds(stats: pstats.Stats) -> dict[str, float]:
    out = {stage: 0.0 for stage in STAGES}
    out["onnxruntime_passes"] = 0.0
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if path == "~" and "onnxruntime" in name and name.endswith(".run>"):
            out["onnxruntime_passes"] += ct
        for stage, (suffix, fn) in STAGES.items():
            if name == fn and path.endswith(suffix):
                out[stage] += ct
    return {k: round(v, 3) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--top", type=int, default=25, help="functions kept, by cumulative time")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the as2d arguments")
    a = ap.parse_args()
    args = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not args:
        ap.error("give the as2d command after --")
    load = os.getloadavg()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    profile = cProfile.Profile()
    exit_code = None

    def leave(code: int) -> None:  # as2d ends with os._exit: the profile is kept first
        nonlocal exit_code
        exit_code = code
        raise SystemExit(code)

    import as2d.cli.app as app

    app_exit, app.os._exit = app.os._exit, leave
    sys.argv = ["as2d", *args]
    profile.enable()
    try:
        app.entry()
    except SystemExit as exc:
        exit_code = exc.code if exit_code is None else exit_code
    finally:
        profile.disable()
        app.os._exit = app_exit
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative")
    top = []
    for (path, line, name), (_cc, nc, tt, ct, _c) in sorted(
            stats.stats.items(), key=lambda kv: -kv[1][3])[:a.top]:
        top.append({"function": f"{Path(path).name}:{line}({name})", "calls": nc,
                    "own_s": round(tt, 3), "cumulative_s": round(ct, 3)})
    run = {"label": a.label, "command": ["as2d", *args], "exit_code": exit_code,
           "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
           "load_average_at_start": [round(x, 2) for x in load],
           "stages_s": {k: v for k, v in stage_seconds(stats).items()}, "top": top}
    doc = json.loads(a.out.read_text()) if a.out.exists() else {
        "script": "scripts/ask_process_profile.py", "note": __doc__.split("\n\n")[0],
        "python_dont_write_bytecode": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
        "runs": []}
    doc["runs"].append(run)
    a.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    sys.stderr.write(json.dumps({k: v for k, v in run.items() if k != "top"}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
