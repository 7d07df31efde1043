"""Benchmark ``as2d ask``: answer quality on the question set, and answer speed with vs
without speculative candidates, side by side.

Usage::

    python scripts/ask_bench.py [--styles qa,qa-plain,...] [--no-speed] [--repeats 2]
                                [--split dev|test] [--json out.json] [--models-dir DIR]
                                [--questions FILE] [--transcripts CACHE.json]

Every clip of ``bench/ask_questions.json`` is transcribed once with AS²D (base ← tiny.en, as
``as2d ask`` does), then every question is answered by the answering model (Gemma 3 270M
int8 by default) in each prompt style: once target-only (one token per pass) and once with
candidates from the transcript, the drafter's stream and the question. The two answers must be
token-identical (the script fails loudly if not). Reported: the share answered correctly per
style, per split (``dev``: where prompts and methods are chosen; ``test``: only scored), for
the real recordings alone, and per kind; and per style the pooled generation throughput
(tokens after the prefill / their time) with and without candidates, in interleaved order,
with acceptance by source. Recording-time questions answered by location and "how many times"
questions answered by counting (no generation) count in the quality figures, not in the
throughput. The answer is the best-scored candidate span (``--no-extract``: the generated text;
the generated answer is checked token-identical either way).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from as2d.runtime.ask.answer import Answerer, AskOptions  # noqa: E402
from as2d.runtime.ask.answer_sources import SOURCES  # noqa: E402
from as2d.runtime.ask.prompt import STYLES  # noqa: E402
from as2d.runtime.ask.spans import spans_from_segments  # noqa: E402
from bench.questions import QUESTIONS, is_correct, load_questions  # noqa: E402


def transcribe_clips(qset, models_dir, threads: int, quiet: bool) -> dict:
    from as2d.engine import Engine, EngineSpec
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    out = {}
    with Engine(EngineSpec(model="base", drafter="tiny.en", threads=threads,
                           models_dir=models_dir)) as engine:
        for name, path in qset.clips.items():
            audio = load_audio(path)
            t0 = time.perf_counter()
            segs = list(engine.transcribe(audio, TranscribeOptions(language="en")))
            wall = time.perf_counter() - t0
            out[name] = dict(spans=spans_from_segments(segs), drafter=engine.drafted_text(),
                             seconds=wall, duration=audio.duration)
            if not quiet:
                print(f"# transcribed {name} ({audio.duration:.1f} s audio) in {wall:.1f} s",
                      file=sys.stderr)
    return out


def transcripts_doc(clips: dict) -> dict:
    return {name: dict(spans=[s.to_dict() for s in c["spans"]], drafter=c["drafter"],
                       seconds=round(c["seconds"], 3), duration=c["duration"])
            for name, c in clips.items()}


def save_transcripts(path: Path, clips: dict) -> None:
    path.write_text(json.dumps(transcripts_doc(clips), indent=1) + "\n")


def cached_transcripts(path: Path | None, qset) -> dict | None:
    """The transcripts kept in ``path`` when it holds every clip of the set, else None."""
    if path is None or not path.exists():
        return None
    from as2d.runtime.ask.spans import Span

    doc = json.loads(path.read_text())
    if not all(c in doc for c in qset.clips):
        return None
    return {name: dict(spans=[Span(s["start"], s["end"], s["text"]) for s in c["spans"]],
                       drafter=c["drafter"], seconds=c["seconds"], duration=c["duration"])
            for name, c in doc.items() if name in qset.clips}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--styles", default="qa", help=f"comma-separated, of {', '.join(STYLES)}")
    ap.add_argument("--llm", default="gemma-3-270m")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--no-speed", action="store_true",
                    help="quality only: answer once, target-only")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs of each answer per mode")
    ap.add_argument("--no-locate", action="store_true",
                    help="recording-time questions answered by the model, not located")
    ap.add_argument("--no-check", action="store_true",
                    help="keep answers whose words are not in the transcript")
    ap.add_argument("--no-extract", action="store_true",
                    help="answer with the generated text, not the best-scored transcript span")
    ap.add_argument("--no-count", action="store_true",
                    help="'how many times' questions answered by the model, not counted")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--base-sources", default=None,
                    help="also answer with only these sources (mode 'base'), interleaved with "
                         "the others: a before/after of a source change in one run")
    ap.add_argument("--no-judge", action="store_true",
                    help="answers as found, not judged (no abstention, evidence as found): "
                         "the 'before' of issue #46")
    ap.add_argument("--abstain-below", type=float, default=None,
                    help="withhold chosen spans whose log-likelihood as the answer is below "
                         "this (default: the answerer's own; --abstain-below=-inf: none)")
    ap.add_argument("--fast", action="store_true",
                    help="generate only where no span answers (compare off; the same answers)")
    ap.add_argument("--min-ngram", type=int, default=1)
    ap.add_argument("--only", default=None, help="comma-separated question ids")
    ap.add_argument("--split", default=None, choices=("dev", "test"),
                    help="only the questions of one split (default: both, reported apart)")
    ap.add_argument("--transcripts", type=Path, default=None,
                    help="reuse the transcripts kept in this file (written on first use)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--models-dir", type=Path, default=None,
                    help="model cache folder (default: $AS2D_MODELS_DIR, else the user cache)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args()

    from as2d.loading import load_llm
    from as2d.runtime.sessions import cpu_count

    threads = args.threads or cpu_count()
    qset = load_questions(args.questions, fetch=True)
    if args.only or args.split:
        keep = set(args.only.split(",")) if args.only else None
        qset.questions = [q for q in qset.questions if (keep is None or q.id in keep)
                          and (args.split is None or q.split == args.split)]
        qset.clips = {c: p for c, p in qset.clips.items()
                      if any(q.clip == c for q in qset.questions)}
    clips = cached_transcripts(args.transcripts, qset)
    if clips is None:
        clips = transcribe_clips(qset, args.models_dir, threads, args.quiet)
        if args.transcripts:
            save_transcripts(args.transcripts, clips)
    lm = load_llm(args.llm, args.precision, args.models_dir, threads)
    sources = tuple(s for s in args.sources.split(",") if s)

    rows = []
    summary = {}
    for style in [s for s in args.styles.split(",") if s]:
        mode_sources = {"target": sources, "spec": sources}
        if args.base_sources is not None:
            mode_sources["base"] = tuple(s for s in args.base_sources.split(",") if s)
        answerers = {
            mode: Answerer(lm, None, AskOptions(max_tokens=args.max_tokens, candidates=cand,
                                                compare=not args.fast,
                                                judge=not args.no_judge,
                                                **({"abstain_below": args.abstain_below}
                                                   if args.abstain_below is not None else {}),
                                                style=style, sources=mode_sources[mode],
                                                min_ngram=args.min_ngram,
                                                locate=not args.no_locate,
                                                check=not args.no_check,
                                                extract=not args.no_extract,
                                                count=not args.no_count))
            for mode, cand in (("target", False), ("spec", True), ("base", True))
            if mode in mode_sources}
        modes = ["target"] if args.no_speed else ["target", "spec"]
        if "base" in mode_sources and not args.no_speed:
            modes.append("base")
        pooled = {m: [0, 0.0] for m in modes}
        by_source: dict[str, list[int]] = {}
        correct = 0
        by_kind: dict[str, list[int]] = {}
        by_split: dict[str, list[int]] = {}
        for i, q in enumerate(qset.questions):
            clip = clips[q.clip]
            results = {m: [] for m in modes}
            order = modes if i % 2 == 0 else modes[::-1]  # alternate who runs first
            for _ in range(max(1, args.repeats)):
                for m in order:
                    results[m].append(answerers[m].ask(clip["spans"], q.question,
                                                       clip["drafter"]))
            ref = results["target"][0]
            if "spec" in results:
                for a in [a for m in modes for a in results[m]]:
                    if a.tokens != ref.tokens:
                        print(f"LOSSLESS FAILURE on {q.id} ({style}): {a.tokens} != {ref.tokens}",
                              file=sys.stderr)
                        return 2
            ok = is_correct(q, ref.text)
            correct += ok
            by_kind.setdefault(q.kind, [0, 0])
            by_kind[q.kind][0] += ok
            by_kind[q.kind][1] += 1
            groups = [q.split, "real" if q.clip not in qset.synthetic else "synthetic"]
            if q.clip not in qset.synthetic:
                groups.append(f"{q.split}-real")
            for g in groups:
                by_split.setdefault(g, [0, 0])
                by_split[g][0] += ok
                by_split[g][1] += 1
            row = dict(style=style, id=q.id, split=q.split, kind=q.kind, question=q.question,
                       synthetic=q.clip in qset.synthetic, answer=ref.text, method=ref.method,
                       generated=ref.generated, correct=ok,
                       abstained=ref.abstained,
                       evidence=[e.to_dict() for e in ref.evidence],
                       confidence=ref.confidence, likelihood=ref.likelihood, withheld=ref.withheld,
                       reason=ref.reason,
                       candidates=[c.to_dict() for c in ref.candidates[:8]],
                       answer_tokens=len(ref.tokens),
                       prompt_tokens=ref.stats.prompt_tokens)
            for m in modes:
                st = [a.stats for a in results[m]]
                toks = st[0].generation_tokens
                secs = statistics.median(s.generation_seconds for s in st)
                pooled[m][0] += toks
                pooled[m][1] += secs
                row[f"{m}_tok_s"] = round(toks / secs, 1) if secs else None
                row[f"{m}_passes"] = st[0].passes
                row[f"{m}_prefill_s"] = round(statistics.median(s.prefill_seconds for s in st), 3)
                if m == "spec":
                    for name, s in st[0].sources.items():
                        acc = by_source.setdefault(name, [0, 0, 0])
                        acc[0] += s.passes
                        acc[1] += s.offered
                        acc[2] += s.accepted
                    row["acceptance"] = st[0].to_dict()["acceptance"]
            rows.append(row)
            if not args.quiet:
                mark = "ok " if ok else "BAD"
                speed = "  ".join(f"{m} {row[f'{m}_tok_s']} tok/s" for m in modes)
                how = {"generated": " ", "located": "L", "transcript": "T", "not said": "N",
                       "extracted": "E", "counted": "C", "read": "R",
                       "confirmed": "Y"}[ref.method]
                print(f"{style:12s} {q.id:11s} {q.split:4s} {mark}{how} {ref.text[:60]!r:62s} "
                      f"{speed}",
                      file=sys.stderr)
        n = len(qset.questions)
        summary[style] = dict(
            correct=correct, questions=n, accuracy=round(correct / n, 3) if n else 0.0,
            by_kind={k: f"{v[0]}/{v[1]}" for k, v in by_kind.items()},
            by_split={k: f"{v[0]}/{v[1]}" for k, v in sorted(by_split.items())},
            pooled_tok_s={m: round(t / s, 1) if s else None for m, (t, s) in pooled.items()},
            generation_tokens={m: t for m, (t, s) in pooled.items()},
            generation_seconds={m: round(s, 3) for m, (t, s) in pooled.items()},
            by_source={k: dict(passes=v[0], offered=v[1], accepted=v[2],
                               acceptance=round(v[2] / v[1], 3) if v[1] else 0.0)
                       for k, v in by_source.items()})

    print(f"\nanswering model: {lm.name}, threads {threads}; {len(qset.questions)} questions "
          f"on {len(qset.clips)} clips")
    kinds = sorted({q.kind for q in qset.questions})
    groups = ("dev", "test", "dev-real", "test-real", "synthetic")
    print(f"{'style':12s} {'correct':>9s} " + " ".join(f"{g:>9s}" for g in groups) + " "
          + " ".join(f"{k:>6s}" for k in kinds)
          + ("" if args.no_speed else f" {'target tok/s':>13s} {'spec tok/s':>11s} "
                                       f"{'speed-up':>9s}  acceptance by source"))
    for style, s in summary.items():
        line = (f"{style:12s} {s['correct']:>3d}/{s['questions']:<3d} "
                + " ".join(f"{s['by_split'].get(g, '-'):>9s}" for g in groups) + " "
                + " ".join(f"{s['by_kind'].get(k, '-'):>6s}" for k in kinds))
        if not args.no_speed:
            t, sp = s["pooled_tok_s"]["target"], s["pooled_tok_s"]["spec"]
            srcs = ", ".join(f"{k} {v['accepted']}/{v['offered']} ({v['passes']} passes)"
                             for k, v in s["by_source"].items())
            line += f" {t:>13.1f} {sp:>11.1f} {sp / t:>8.2f}x  {srcs}"
            if "base" in s["pooled_tok_s"]:
                b = s["pooled_tok_s"]["base"]
                line += (f"\n{'':12s} base sources ({args.base_sources}): {b:.1f} tok/s, "
                         f"{b / t:.2f}x")
        print(line)
    if args.json:
        transcripts = transcripts_doc(clips)
        from bench.ask_score import score_by_split

        for style in summary:
            summary[style]["scores"] = score_by_split([r for r in rows if r["style"] == style])
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "answers": rows,
                                         "transcripts": transcripts}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
