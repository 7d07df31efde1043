"""Choose the abstention bar of ``as2d ask`` on the dev split (issue #46).

Usage: ``python scripts/ask_calibrate.py DEV.json [--target 0.9] [--json out.json]``

``DEV.json`` is a ``scripts/ask_bench.py --split dev --abstain-below=-inf --json`` run: every
answer judged (evidence, kind, yes/no) but none withheld for its likelihood. A span the model
chose is withheld when the model's log-likelihood of it as the answer (``likelihood``; the
answer's own among ``candidates`` in a run from before the field) is below a bar ``L``; the
model's own answer when its passage says less than
:data:`~as2d.runtime.ask.judge.GENERATED_BELOW` of the question. For each ``L`` coverage,
precision, answerable hits and unanswerable questions recognised are reported.

Which bar: the least strict ``L`` whose dev precision, less its statistical error (the
one-sided 95 % Wilson lower bound over the answers it gives), reaches ``--target``. The
bound, not the precision itself: a bar set at exactly the target on the questions it is
scored on overstates its precision on questions it has not seen (the previous pair, chosen
at 0.90 on dev, gave 0.80 on test). As a check, the same choice is made on one half of the dev
clips and scored on the other, both ways, over ten random halvings (``held_out``). The
answerer's constant :data:`as2d.runtime.ask.judge.LIKELIHOOD_BELOW` is the bar printed as
chosen (``--json bench/results/ask-calibration-dev-likelihood.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from as2d.runtime.ask.judge import GENERATED_BELOW  # noqa: E402
from bench.ask_score import question_table, score  # noqa: E402

NOT_SAID = "The recording does not say."
BARS = tuple(round(-15.0 + 0.25 * i, 2) for i in range(53))  # -15 .. -2 nats
FIELDS = ("coverage", "precision", "answer_or_first_evidence", "unanswerable_recognised",
          "yes_no", "answered", "right")
Z = 1.645  # one-sided 95 %


def likelihood(row: dict) -> float | None:
    """The chosen span's log-likelihood as the answer (None: not a chosen span)."""
    if row["method"] != "extracted":
        return None
    if row.get("likelihood") is not None:
        return row["likelihood"]
    mine = [c["likelihood"] for c in row.get("candidates", ()) if c["text"] == row["answer"]]
    return max(mine) if mine else None


def withheld_below(rows: list[dict], bar: float) -> list[dict]:
    out = []
    for r in rows:
        lik, c = likelihood(r), r.get("confidence")
        if not r["abstained"] and ((lik is not None and lik < bar) or (
                r["method"] == "generated" and c is not None and c < GENERATED_BELOW)):
            r = {**r, "answer": NOT_SAID, "abstained": True}
        out.append(r)
    return out


def wilson_low(right: int, n: int, z: float = Z) -> float:
    """The one-sided lower bound of a proportion ``right / n`` (Wilson's score interval)."""
    if not n:
        return 0.0
    p = right / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def sweep(rows: list[dict], table) -> list[dict]:
    """Every bar's scores on ``rows``."""
    out = []
    for bar in BARS:
        s = score(withheld_below(rows, bar), table)
        out.append(dict(bar=bar, low=round(wilson_low(s["right"], s["answered"]), 3),
                        **{k: s[k] for k in FIELDS}))
    return out


def choose(points: list[dict], target: float) -> dict:
    """The least strict bar whose lower bound reaches ``target``, else the one with the
    highest bound."""
    ok = [x for x in points if x["low"] >= target]
    return min(ok, key=lambda x: x["bar"]) if ok else max(points, key=lambda x: x["low"])


def held_out(rows: list[dict], table, clips: dict[str, str], target: float,
             rounds: int = 10) -> dict:
    """Chosen on half the dev clips, scored on the other half, both ways; pooled over
    ``rounds`` random halvings (the first: alternate clips by name)."""
    names = sorted({clips[r["id"]] for r in rows})
    scored = []
    for k in range(rounds):
        order = names[:]
        if k:
            random.Random(k).shuffle(order)
        halves = [set(order[0::2]), set(order[1::2])]
        for half in halves:
            train = [r for r in rows if clips[r["id"]] not in half]
            test = [r for r in rows if clips[r["id"]] in half]
            scored += withheld_below(test, choose(sweep(train, table), target)["bar"])
    s = score(scored, table)
    return dict(rounds=rounds, **{k: s[k] for k in FIELDS})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = [r for r in json.loads(args.run.read_text())["answers"] if r["split"] == "dev"]
    table = question_table()
    clips = {q.id: q.clip for q in table.values()}
    points = sweep(rows, table)
    for x in points:
        print(f"bar {x['bar']:6.2f} coverage {x['coverage']:.3f} precision {x['precision']:.3f} "
              f"(low {x['low']:.3f}) right {x['right']}/{x['answered']} answer/evidence "
              f"{x['answer_or_first_evidence']:.3f} unanswerable "
              f"{x['unanswerable_recognised']} yes/no {x['yes_no']}")
    chosen = choose(points, args.target)
    check = held_out(rows, table, clips, args.target)
    print(f"chosen: bar {chosen['bar']} (precision {chosen['precision']}, lower bound "
          f"{chosen['low']}, coverage {chosen['coverage']}); chosen on half the clips, "
          f"scored on the other: precision {check['precision']} "
          f"({check['right']}/{check['answered']})")
    if chosen["low"] < args.target:
        print(f"no bar's lower bound reaches {args.target}: the highest is used",
              file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(dict(run=str(args.run), target=args.target,
                                             chosen=chosen, held_out=check, sweep=points),
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
