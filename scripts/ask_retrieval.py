"""Retrieval alone on a long recording: which passage a question's words find first, and
what the answering model is shown (issue #46), without running the model.

Usage::

    python scripts/ask_retrieval.py --transcripts CACHE.json [--split dev] [--minutes 10]
                                    [--json out.json] [--models-dir DIR]

The recording is the one ``scripts/ask_long.py`` asks about (the question set's clips joined,
their transcripts shifted to their place). For every answerable question of ``--split``:

* **first passage**: whether the best-ranked passage holds an accepted answer (a recording-
  time question: starts inside its interval, as ``ask_long.py`` scores it). Ranked units:
  the transcript's spans (BM25, :func:`~as2d.runtime.ask.passages.rank_spans`, the judge's
  evidence before), and sentence-aligned passages of 1, 2 or 3 sentences starting at every
  sentence (:func:`~as2d.runtime.ask.passages.passage_runs`; the judge's evidence now uses 2),
  overlapping, ranked by the same BM25 over the passages (a question about the recording's
  clock keeps the spans: a passage would start earlier than the words);
* **shown**: whether the passages selected for the prompt (``PromptBuilder.plan`` with the
  answerer's budget, ``window_tokens`` each of 32, 48, 64, 96, 128) hold the answer, in a
  span or two in a row.

Each figure is given over all answerable questions and over the ``findable`` ones
(:func:`ask_long.question_class`). Only the answering model's tokenizer is loaded.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from ask_long import question_class, recording_of_transcripts, transcripts_parser  # noqa: E402

from as2d.runtime.ask.passages import (  # noqa: E402
    bm25,
    content_words,
    passage_runs,
    rank_spans,
    sentence_runs,
    without_answer_type,
)
from as2d.runtime.ask.prompt import asks_about_time  # noqa: E402
from as2d.runtime.ask.spans import Span  # noqa: E402
from bench.ask_score import evidence_holds, unanswerable  # noqa: E402

WINDOWS = (32, 48, 64, 96, 128)


def joined_span(spans: list[Span], a: int, b: int) -> Span:
    return Span(spans[a].start, spans[b].end, " ".join(spans[i].text for i in range(a, b + 1)))


def first_by_passages(spans: list[Span], question: str, n: int) -> Span | None:
    if asks_about_time(question):
        return first_by_spans(spans, question)
    ps = passage_runs(spans, n)
    docs = [Counter(content_words(joined_span(spans, a, b).text)) for a, b in ps]
    scores = bm25(docs, set(content_words(without_answer_type(question))))
    best = max(range(len(ps)), key=lambda i: (scores[i], -i), default=None)
    return None if best is None or scores[best] <= 0 else joined_span(spans, *ps[best])


def first_by_spans(spans: list[Span], question: str) -> Span | None:
    ranked = rank_spans(spans, question)
    return spans[ranked[0][1]] if ranked and ranked[0][0] > 0 else None


def holds(q, chosen: list[Span]) -> bool:
    """An accepted answer in one of the spans, or in two that follow each other."""
    runs = [[s] for s in chosen] + [[a, b] for a, b in zip(chosen, chosen[1:])
                                    if abs(b.start - a.end) < 1e-6 or a.end <= b.start]
    return any(evidence_holds(q, [joined_span(run, 0, len(run) - 1).to_dict()]) for run in runs)


def main() -> int:
    ap = transcripts_parser(__doc__.splitlines()[0])
    args = ap.parse_args()

    from as2d.loading import load_llm
    from as2d.runtime.ask.answer import Answerer, AskOptions

    qset, spans, offsets = recording_of_transcripts(args.questions, args.transcripts,
                                                    args.minutes)
    answerer = Answerer(load_llm(args.llm, None, args.models_dir, 1), None, AskOptions())
    o = answerer.options
    budget = answerer.capacity - o.max_tokens
    rows = []
    for q in qset.questions:
        if q.split != args.split or q.clip not in offsets or unanswerable(q):
            continue
        if q.time is not None:
            q = q.__class__(**{**q.__dict__, "time": (q.time[0] + offsets[q.clip],
                                                      q.time[1] + offsets[q.clip])})
        row = dict(id=q.id, question_class=question_class(q, spans))
        first = first_by_spans(spans, q.question)
        row["first_spans"] = bool(first) and evidence_holds(q, [first.to_dict()])
        for n in (1, 2, 3):
            first = first_by_passages(spans, q.question, n)
            row[f"first_passages_{n}"] = bool(first) and evidence_holds(q, [first.to_dict()])
        for w in WINDOWS:
            plan = answerer.builder.plan(spans, q.question, budget, window_tokens=w,
                                         passage_tokens=o.passage_tokens,
                                         whole_tokens=o.whole_tokens)
            row[f"shown_w{w}"] = holds(q, plan.spans)
        rows.append(row)
    keys = [k for k in rows[0] if k.startswith(("first_", "shown_"))] if rows else []
    findable = [r for r in rows if r["question_class"] == "findable"]
    summary = dict(split=args.split, questions=len(rows), findable=len(findable),
                   spans=len(spans), sentence_runs=len(sentence_runs(spans)),
                   all={k: round(sum(r[k] for r in rows) / max(1, len(rows)), 3) for k in keys},
                   on_findable={k: round(sum(r[k] for r in findable) / max(1, len(findable)), 3)
                                for k in keys})
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "summary": summary,
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
