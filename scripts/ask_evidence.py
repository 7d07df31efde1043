"""Which evidence passage holds the answer more often: the Whisper segment an answer was
found in, or the whole sentence around it (issue #46)?

Usage: ``python scripts/ask_evidence.py RUN.json --transcripts CACHE.json [--json out.json]``

``RUN.json`` holds answers whose first evidence is a transcript segment (as the judge gave
them before sentences, e.g. ``bench/results/ask-ablation-dev.json``); ``CACHE.json`` the
transcripts (``scripts/ask_bench.py --transcripts``). For every answerable dev question, the
first evidence passage is scored as it is, and as the sentence run that holds it
(:func:`as2d.runtime.ask.passages.sentence_runs`); the answers are the same, only the passage
differs. Only the dev split is read. ``CACHE.json`` may be a result file that keeps its
transcripts (``transcripts``: e.g. ``bench/results/ask-dev-unweighed.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from as2d.runtime.ask.passages import passage, sentence_runs  # noqa: E402
from as2d.runtime.ask.spans import Span  # noqa: E402
from bench.ask_score import evidence_holds, question_table, unanswerable  # noqa: E402
from bench.questions import is_correct  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--transcripts", type=Path, required=True)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = [r for r in json.loads(args.run.read_text())["answers"] if r["split"] == "dev"]
    clips = json.loads(args.transcripts.read_text())
    clips = clips.get("transcripts", clips)
    table = question_table()
    counts = {"segment": [0, 0], "sentence": [0, 0]}
    changed = []
    for r in rows:
        q = table[r["id"]]
        if unanswerable(q):
            continue
        spans = [Span(s["start"], s["end"], s["text"]) for s in clips[q.clip]["spans"]]
        first = (r.get("evidence") or [])[:1]
        sentence = []
        if first:
            i = min(range(len(spans)), key=lambda j: abs(spans[j].start - first[0]["start"]))
            run = next(x for x in sentence_runs(spans) if x[0] <= i <= x[1])
            sentence = [passage(spans, run).to_dict()]
        right = is_correct(q, r["answer"])
        for name, ev in (("segment", first), ("sentence", sentence)):
            counts[name][0] += right or evidence_holds(q, ev)
            counts[name][1] += 1
        if evidence_holds(q, first) != evidence_holds(q, sentence):
            changed.append(dict(id=q.id, answer=r["answer"], segment=first[0]["text"],
                                sentence=sentence[0]["text"],
                                holds="sentence" if evidence_holds(q, sentence) else "segment"))
    out = {k: dict(answer_or_first_evidence=round(a / n, 3), hits=a, answerable=n)
           for k, (a, n) in counts.items()}
    for k, v in out.items():
        print(f"{k:9s} answer or first evidence {v['hits']}/{v['answerable']} "
              f"({v['answer_or_first_evidence']})")
    for c in changed:
        print(f"  {c['id']}: the {c['holds']} holds it", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(dict(run=str(args.run), split="dev", **out,
                                             changed=changed), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
