"""Choose the abstention threshold of ``as2d ask`` on the dev split (issue #46).

Usage: ``python scripts/ask_calibrate.py DEV.json [--target 0.9] [--json out.json]``

``DEV.json`` is a ``scripts/ask_bench.py --split dev --abstain 0 --json`` run: every answer
judged (evidence, kind, yes/no) but none withheld for its support, each with its
``confidence`` (the share of the question's words said around its passage) and, for a span
the model chose, its ``margin`` over the next candidate. For each pair (support s, margin m)
a chosen span below both is withheld, and the model's own answer below min(s, 0.5) (the
readings and located times are not weighed); coverage, precision, answerable hits and
unanswerable questions recognised are reported. The pair printed as chosen is the one with
the most right answers among those whose precision reaches ``--target``, else the most
precise: the answerer's constants (:data:`as2d.runtime.ask.judge.ABSTAIN_BELOW`,
:data:`~as2d.runtime.ask.judge.MARGIN`) are that pair, chosen on the rows of
``bench/results/ask-ablation-dev.json`` (``--json bench/results/ask-calibration-dev.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from as2d.runtime.ask.judge import GENERATED_BELOW  # noqa: E402
from bench.ask_score import question_table, score  # noqa: E402

NOT_SAID = "The recording does not say."


def withheld_below(rows: list[dict], t: float, m: float) -> list[dict]:
    out = []
    for r in rows:
        c, g = r.get("confidence"), r.get("margin")
        if not r["abstained"] and c is not None and (
                (r["method"] == "extracted" and c < t and g is not None and g < m)
                or (r["method"] == "generated" and c < min(t, GENERATED_BELOW))):
            r = {**r, "answer": NOT_SAID, "abstained": True}
        out.append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = [r for r in json.loads(args.run.read_text())["answers"] if r["split"] == "dev"]
    table = question_table()
    sweep = []
    for m in (0.0, 0.5, 1.0, 1.5, 2.0, 1e9):
        for t in [round(0.1 * i, 2) for i in range(0, 11)] + [1.01]:
            s = score(withheld_below(rows, t, m), table)
            sweep.append(dict(threshold=t, margin=m, **{k: s[k] for k in (
                "coverage", "precision", "answer_or_first_evidence", "unanswerable_recognised",
                "yes_no", "answered", "right")}))
            print(f"s {t:4.2f} m {m:5.1f} coverage {s['coverage']:.3f} precision "
                  f"{s['precision']:.3f} right {s['right']} answer/evidence "
                  f"{s['answer_or_first_evidence']:.3f} unanswerable "
                  f"{s['unanswerable_recognised']} yes/no {s['yes_no']}")
    ok = [x for x in sweep if (x["precision"] or 0) >= args.target]
    chosen = max(ok, key=lambda x: (x["right"], -x["threshold"], -x["margin"])) if ok else \
        max(sweep, key=lambda x: (x["precision"] or 0, -x["threshold"]))
    print(f"chosen: support {chosen['threshold']}, margin {chosen['margin']} (precision "
          f"{chosen['precision']}, coverage {chosen['coverage']})")
    if args.json:
        args.json.write_text(json.dumps(dict(run=str(args.run), target=args.target,
                                             chosen=chosen, sweep=sweep), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
