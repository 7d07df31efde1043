"""Scores of ``as2d ask`` answers on the question set, as issue #46 states its goals.

Reads the ``answers`` rows that ``scripts/ask_bench.py --json`` (or ``scripts/ask_long.py``)
writes and reports, per split:

* **coverage**: the share of questions answered (not abstained);
* **precision**: the share of the answers given that are right (an answer given to a question
  the recording does not answer is wrong);
* **answer or first evidence**: the share of answerable questions whose answer is right or
  whose first evidence passage holds an accepted answer (a ``time`` question: the passage
  starts inside the accepted interval, ±1 s);
* **unanswerable recognised**: the share of the questions whose honest answer is "does not
  say" that abstained;
* **yes/no**: right answers among the yes/no questions;
* the same by kind (answered/right/total).

Usage: ``python -m bench.ask_score RESULT.json [...]`` (rows of several files are pooled).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.questions import QUESTIONS, Question, is_correct

NOT_SAID = ("does not say",)


def _question(item: dict) -> Question:
    return Question(item["id"], item["clip"], item.get("kind", "what"), item["question"],
                    tuple(item.get("accept", ())), tuple(item.get("reject", ())),
                    tuple(item["time"]) if item.get("time") else None, item.get("split", "test"))


def question_table(path: Path = QUESTIONS) -> dict[str, Question]:
    return {q["id"]: _question(q) for q in json.loads(Path(path).read_text())["questions"]}


def unanswerable(q: Question) -> bool:
    return q.accept == NOT_SAID


def evidence_holds(q: Question, evidence: list[dict]) -> bool:
    """Whether the first evidence passage holds an accepted answer."""
    if not evidence or unanswerable(q):
        return False
    first = evidence[0]
    if q.time is not None:
        lo, hi = q.time
        return lo - 1.0 <= float(first["start"]) <= hi + 1.0
    return is_correct(q, first["text"])


def is_yes_no_question(text: str) -> bool:
    from as2d.runtime.ask.english.yesno import is_yes_no

    return is_yes_no(text)


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def score(rows: list[dict], table: dict[str, Question]) -> dict:
    """The figures above for ``rows`` (each with ``id``, ``answer``, ``abstained`` or
    ``method``, and ``evidence``)."""
    n = given = right_given = answerable = hit = unans = recognised = yn = yn_right = 0
    kinds: dict[str, list[int]] = {}
    for r in rows:
        q = table[r["id"]]
        abstained = r.get("abstained", r.get("method") == "not said")
        ok = is_correct(q, r["answer"])
        n += 1
        k = kinds.setdefault("unanswerable" if unanswerable(q) else q.kind, [0, 0, 0])
        k[2] += 1
        if not abstained:
            given += 1
            right_given += ok
            k[0] += 1
            k[1] += ok
        if unanswerable(q):
            unans += 1
            recognised += abstained
        else:
            answerable += 1
            hit += ok or evidence_holds(q, r.get("evidence") or [])
        if is_yes_no_question(q.question):
            yn += 1
            yn_right += ok
    return dict(questions=n, answered=given, coverage=_ratio(given, n),
                precision=_ratio(right_given, given), right=right_given,
                accuracy=_ratio(sum(is_correct(table[r["id"]], r["answer"]) for r in rows), n),
                answer_or_first_evidence=_ratio(hit, answerable), answerable=answerable,
                unanswerable_recognised=f"{recognised}/{unans}",
                yes_no=f"{yn_right}/{yn}",
                by_kind={k: f"{v[1]}/{v[0]} right of given, {v[2]} asked"
                         for k, v in sorted(kinds.items())})


def score_by_split(rows: list[dict], table: dict[str, Question] | None = None) -> dict:
    table = table or question_table()
    splits = sorted({table[r["id"]].split for r in rows})
    return {s: score([r for r in rows if table[r["id"]].split == s], table) for s in splits}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    rows = []
    for path in argv:
        doc = json.loads(Path(path).read_text())
        rows += doc["answers"]
    print(json.dumps(score_by_split(rows), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
