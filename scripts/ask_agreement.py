"""Agreement as an abstention signal (issue #46): is a chosen span right more often when the
model's own generated answer agrees with it?

Usage::

    python scripts/ask_agreement.py RUN.json [--json out.json]

``RUN.json`` is a ``scripts/ask_bench.py`` run with the comparison on (not ``--fast``), so
every chosen span has the model's generated answer beside it (``generated``), and with
``--abstain-below=-inf`` or the default bar (a span withheld for its likelihood keeps its
text in ``withheld``). For every span the model chose, given or withheld for its
likelihood, and for each likelihood bar: how many would be given and how many of those are
right, for the bar alone, the bar *and* agreement, and the bar *or* agreement. Agreement:
the span's content words and the generated answer's share one (``any``), or one set holds
the other (``nested``). Also the generation's cost: the generated tokens and seconds over
the chosen spans. And the spans the generated answer holds with more (``grown``: "Forward."
and "Forward 10 meters."): how many are right as the span and as the generated answer (a
fragment grown to the model's longer phrase).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from as2d.runtime.ask.passages import content_words  # noqa: E402
from bench.questions import QUESTIONS, is_correct, load_questions  # noqa: E402

BARS = (-4.0, -5.0, -5.75, -7.0, -9.0, float("-inf"))


def agree(span: str, generated: str | None, nested: bool) -> bool:
    a, b = set(content_words(span)), set(content_words(generated or ""))
    if nested:
        return bool(a) and bool(b) and (a <= b or b <= a)
    return bool(a & b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    table = {q.id: q for q in load_questions(QUESTIONS, fetch=False).questions}
    rows = json.loads(args.run.read_text())["answers"]
    chosen = [r for r in rows if r["likelihood"] is not None
              and (r["method"] == "extracted" or r.get("withheld"))]
    if not chosen or any(r.get("generated") is None for r in chosen):
        print("needs a run with the comparison on (scripts/ask_bench.py without --fast)",
              file=sys.stderr)
        return 2
    span = {r["id"]: r["answer"] if r["method"] == "extracted" else r["withheld"]
            for r in chosen}
    right = {r["id"]: is_correct(table[r["id"]], span[r["id"]]) for r in chosen}
    rules = {
        "bar": lambda r, b: r["likelihood"] >= b,
        "bar and any": lambda r, b: r["likelihood"] >= b and agree(span[r["id"]],
                                                                   r["generated"], False),
        "bar and nested": lambda r, b: r["likelihood"] >= b and agree(span[r["id"]],
                                                                      r["generated"], True),
        "bar or any": lambda r, b: r["likelihood"] >= b or agree(span[r["id"]],
                                                                 r["generated"], False),
        "bar or nested": lambda r, b: r["likelihood"] >= b or agree(span[r["id"]],
                                                                    r["generated"], True),
    }
    sweep = {}
    for bar in BARS:
        for name, rule in rules.items():
            given = [r for r in chosen if rule(r, bar)]
            ok = sum(right[r["id"]] for r in given)
            sweep.setdefault(str(bar), {})[name] = (
                f"{ok}/{len(given)} ({ok / len(given):.1%})" if given else "0/0")
    grown = [r for r in chosen if set(content_words(span[r["id"]]))
             and set(content_words(span[r["id"]])) < set(content_words(r["generated"]))]
    tok_s = [r["target_tok_s"] for r in chosen if r.get("target_tok_s")]
    summary = dict(run=str(args.run), spans=len(chosen),
                   agree_any=sum(agree(span[r["id"]], r["generated"], False) for r in chosen),
                   agree_nested=sum(agree(span[r["id"]], r["generated"], True)
                                    for r in chosen),
                   generated_tokens_median=statistics.median(r["answer_tokens"] for r in chosen),
                   generation_seconds_median=round(statistics.median(
                       r["answer_tokens"] / r["target_tok_s"] for r in chosen
                       if r.get("target_tok_s")), 3) if tok_s else None,
                   grown=dict(spans=len(grown),
                              right_as_span=sum(right[r["id"]] for r in grown),
                              right_as_generated=sum(is_correct(table[r["id"]], r["generated"])
                                                     for r in grown)),
                   sweep=sweep)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
