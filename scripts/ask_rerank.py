"""Passages of a long recording re-ranked by the answering model (issue #46): does the
passage the model finds the question likeliest after hold the answer more often than BM25's
first?

Usage::

    python scripts/ask_rerank.py --transcripts CACHE.json [--split dev] [--minutes 10]
                                 [--json out.json] [--models-dir DIR]

The recording is the one ``scripts/ask_long.py`` asks about (the question set's clips joined,
their transcripts shifted). For every answerable question of ``--split`` (not one about the
recording's clock, which is located, not ranked): the sentence-aligned passages BM25 ranks
(:func:`~as2d.runtime.ask.passages.rank_passages`, the judge's evidence), the first
:data:`TOP` of them scored by :func:`~as2d.runtime.ask.rerank.question_likelihoods`.
Reported for each ``k``: how often the likeliest of BM25's first ``k`` holds an accepted answer
(``k`` = 1 is BM25 alone), over all those questions and over the ``findable`` ones
(:func:`ask_long.question_class`), and the seconds the scoring took per passage.

``--timing N`` (instead): the whole answer (``Answerer.ask``, the transcript already made: a
follow-up question) to the first ``N`` of those questions, with the re-ranking on and off,
interleaved (the order alternating), and the answers' evidence compared.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from ask_long import question_class, recording_of_transcripts, transcripts_parser  # noqa: E402

from as2d.runtime.ask.codec import Codec  # noqa: E402
from as2d.runtime.ask.passages import passage, rank_passages, sentence_runs  # noqa: E402
from as2d.runtime.ask.prompt import asks_about_time  # noqa: E402
from as2d.runtime.ask.rerank import question_likelihoods  # noqa: E402
from bench.ask_score import evidence_holds, unanswerable  # noqa: E402

TOP = 8
KS = (1, 2, 3, 4, 6, 8)


def time_answers(lm, spans, questions) -> dict:
    """Seconds of whole answers with the re-ranking on and off, interleaved."""
    from as2d.runtime.ask.answer import Answerer, AskOptions

    answerers = {on: Answerer(lm, None, AskOptions(rerank=on)) for on in (True, False)}
    answerers[True].ask(spans, questions[0].question)  # (warm both: the prefix cache)
    answerers[False].ask(spans, questions[0].question)
    seconds = {True: [], False: []}
    reranked = abstained = 0
    for i, q in enumerate(questions):
        got = {}
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            t0 = time.perf_counter()
            got[on] = answerers[on].ask(spans, q.question)
            seconds[on].append(time.perf_counter() - t0)
        assert got[True].text == got[False].text  # only the evidence may move
        reranked += got[True].evidence[:1] != got[False].evidence[:1]
        abstained += got[True].abstained
    on, off = (statistics.median(seconds[k]) for k in (True, False))
    return dict(questions=len(questions), first_evidence_moved=reranked,
                median_on_s=round(on, 3), median_off_s=round(off, 3),
                on_over_off=round(on / off, 3), abstained=abstained,
                load_average=list(os.getloadavg()))


def main() -> int:
    ap = transcripts_parser(__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timing", type=int, default=0)
    args = ap.parse_args()

    from as2d.loading import load_llm

    qset, spans, offsets = recording_of_transcripts(args.questions, args.transcripts,
                                                    args.minutes)
    runs = sentence_runs(spans)
    lm = load_llm(args.llm, None, args.models_dir, args.threads)
    codec = Codec(lm.tokenizer)
    asked = [q for q in qset.questions if q.split == args.split and q.clip in offsets
             and not unanswerable(q) and not asks_about_time(q.question)]
    if args.timing:
        summary = dict(split=args.split, timing=time_answers(lm, spans, asked[:args.timing]))
        print(json.dumps(summary, indent=2))
        if args.json:
            args.json.write_text(json.dumps({"command": " ".join(sys.argv), "summary": summary},
                                            indent=1) + "\n")
        return 0
    rows = []
    for q in asked:
        ranked = [passage(spans, r) for r in rank_passages(spans, q.question, runs)[:TOP]]
        holds = [evidence_holds(q, [p.to_dict()]) for p in ranked]
        t0 = time.perf_counter()
        likely = question_likelihoods(lm, codec, [p.text for p in ranked], q.question) \
            if ranked else []
        rows.append(dict(id=q.id, question_class=question_class(q, spans), holds=holds,
                         likelihoods=[round(x, 3) for x in likely],
                         seconds_per_passage=(time.perf_counter() - t0) / len(ranked)
                         if ranked else None))
        print(f"{q.id:16s} {rows[-1]['question_class']:10s} BM25 "
              f"{holds.index(True) if True in holds else '-'}", file=sys.stderr)

    def first(r: dict, k: int) -> bool:
        n = min(k, len(r["holds"]))
        return n > 0 and r["holds"][max(range(n), key=lambda j: (r["likelihoods"][j], -j))]

    findable = [r for r in rows if r["question_class"] == "findable"]
    per = [r["seconds_per_passage"] for r in rows if r["seconds_per_passage"]]
    summary = dict(split=args.split, questions=len(rows), findable=len(findable),
                   first_holds={k: f"{sum(first(r, k) for r in rows)}/{len(rows)}" for k in KS},
                   first_holds_findable={k: f"{sum(first(r, k) for r in findable)}/"
                                            f"{len(findable)}" for k in KS},
                   any_of_top=f"{sum(any(r['holds']) for r in rows)}/{len(rows)}",
                   seconds_per_passage_median=round(statistics.median(per), 3) if per else None,
                   load_average=list(os.getloadavg()))
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "summary": summary,
                                         "rows": rows}, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
