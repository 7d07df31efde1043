"""Long recordings: the dev questions of the question set asked of one recording made of its
clips joined (issue #46).

Usage::

    python scripts/ask_long.py [--minutes 10] [--split dev] [--transcripts CACHE.json]
                               [--transcribe] [--json out.json] [--models-dir DIR]

The clips of ``bench/ask_questions.json`` are joined in the set's order, 0.6 s apart, until the
recording is ``--minutes`` long (0: all of them); every question of ``--split`` about one of
those clips is asked of the whole recording. The transcript is by default the clips' own
transcripts (``--transcripts``, as ``scripts/ask_bench.py`` keeps them) shifted to their place
in the joined recording; ``--transcribe`` joins the audio and transcribes it once instead (AS²D,
base ← tiny.en). Reported: the share of questions whose first evidence passage holds the answer
(or, for a recording-time question, starts inside its interval), the share whose first evidence
lies in the right clip, the answer scores of :mod:`bench.ask_score`, and the seconds an answer
takes (the transcript already made: what a follow-up question costs beside loading).

Two kinds of question cannot have their answer in a passage found by the question's words,
and the summary counts them apart (``first_evidence_by_class``): a yes/no question (no
passage says "yes"), and a question that shares no content word with any passage that holds
its answer (``unfindable``: "What are the speaker's last words?", "Who is speaking?" — in a
recording of many clips they no longer point at one clip). ``findable`` are the rest.
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
from as2d.runtime.ask.english.yesno import is_yes_no  # noqa: E402
from as2d.runtime.ask.passages import content_words, without_answer_type  # noqa: E402
from as2d.runtime.ask.spans import Span  # noqa: E402
from bench.ask_score import evidence_holds, score, unanswerable  # noqa: E402
from bench.questions import QUESTIONS, is_correct, load_questions  # noqa: E402

GAP = 0.6


def joined(clips: dict, names: list[str], minutes: float) -> tuple[list[str], dict[str, float]]:
    """The clips taken (in order, until ``minutes`` of audio; 0: all) and each one's offset."""
    taken, offsets, at = [], {}, 0.0
    for name in names:
        if minutes and at >= minutes * 60:
            break
        offsets[name] = at
        taken.append(name)
        at += clips[name]["duration"] + GAP
    return taken, offsets


def shifted_spans(clips: dict, taken: list[str], offsets: dict[str, float]) -> list[Span]:
    return [Span(s["start"] + offsets[n], s["end"] + offsets[n], s["text"])
            for n in taken for s in clips[n]["spans"]]


def transcripts_parser(description: str) -> argparse.ArgumentParser:
    """The options of a script that asks about the joined recording of a transcripts file
    (:func:`recording_of_transcripts`)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--transcripts", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--split", default="dev", choices=("dev", "test"))
    ap.add_argument("--llm", default="gemma-3-270m")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--models-dir", type=Path, default=None)
    return ap


def recording_of_transcripts(questions: Path, transcripts: Path, minutes: float):
    """``(question set, spans, offsets)``: the question set's clips, as transcribed in
    ``transcripts`` (clip name → segments), joined into one recording of about ``minutes``
    (:func:`joined`), its spans on the joined time line."""
    qset = load_questions(questions, fetch=False)
    clips = json.loads(transcripts.read_text())
    taken, offsets = joined(clips, [n for n in qset.clips if n in clips], minutes)
    return qset, shifted_spans(clips, taken, offsets), offsets


def question_class(q, spans: list[Span]) -> str:
    """``yes/no``, ``findable`` (a span, or two in a row, that holds an accepted answer shares
    a content word with the question) or ``unfindable``: what a retrieval by the question's
    words can be asked to find (a diagnostic of the question set, from its answer key)."""
    if is_yes_no(q.question):
        return "yes/no"
    asked = set(content_words(without_answer_type(q.question)))
    runs = [[s] for s in spans] + [[a, b] for a, b in zip(spans, spans[1:])]
    for run in runs:
        text = " ".join(s.text for s in run)
        if evidence_holds(q, [{"start": run[0].start, "end": run[-1].end, "text": text}]) \
                and asked & set(content_words(text)):
            return "findable"
    return "unfindable"


def transcribe_joined(qset, taken: list[str], models_dir, threads: int) -> tuple[list[Span], dict]:
    """The joined audio transcribed once; offsets measured from the samples."""
    import numpy as np

    from as2d.engine import Engine, EngineSpec
    from as2d.runtime.ask.spans import spans_from_segments
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from bench.questions import _read_16k

    parts, offsets, at = [], {}, 0
    gap = np.zeros(int(16000 * GAP), dtype=np.float32)
    for name in taken:
        offsets[name] = at / 16000
        x = _read_16k(Path(qset.clips[name]))
        parts += [x, gap]
        at += len(x) + len(gap)
    import tempfile

    import soundfile as sf

    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        sf.write(f.name, np.concatenate(parts), 16000, subtype="PCM_16")
        with Engine(EngineSpec(model="base", drafter="tiny.en", threads=threads,
                               models_dir=models_dir)) as engine:
            audio = load_audio(f.name)
            t0 = time.perf_counter()
            segs = list(engine.transcribe(audio, TranscribeOptions(language="en")))
            print(f"# transcribed {audio.duration:.0f} s in {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr)
    return spans_from_segments(segs), offsets


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--split", default="dev", choices=("dev", "test"))
    ap.add_argument("--transcripts", type=Path, default=None,
                    help="the clips' transcripts, as scripts/ask_bench.py --transcripts keeps them")
    ap.add_argument("--transcribe", action="store_true", help="transcribe the joined audio")
    ap.add_argument("--llm", default="gemma-3-270m")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-judge", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--passage-tokens", type=int, default=None,
                    help="transcript tokens an answer is made from (default: AskOptions')")
    args = ap.parse_args()

    from as2d.loading import load_llm
    from as2d.runtime.sessions import cpu_count

    threads = args.threads or cpu_count()
    qset = load_questions(args.questions, fetch=True)
    if args.transcripts is None or not args.transcripts.exists():
        print("needs --transcripts (scripts/ask_bench.py --transcripts FILE writes it)",
              file=sys.stderr)
        return 2
    clips = json.loads(args.transcripts.read_text())
    names = [n for n in qset.clips if n in clips]
    taken, offsets = joined(clips, names, args.minutes)
    if args.transcribe:
        spans, offsets = transcribe_joined(qset, taken, args.models_dir, threads)
    else:
        spans = shifted_spans(clips, taken, offsets)
    ends = {n: offsets[n] + clips[n]["duration"] for n in taken}
    questions = [q for q in qset.questions if q.split == args.split and q.clip in offsets]
    lm = load_llm(args.llm, None, args.models_dir, threads)
    budget = {} if args.passage_tokens is None else {"passage_tokens": args.passage_tokens}
    answerer = Answerer(lm, None, AskOptions(judge=not args.no_judge, **budget))
    rows, seconds, table = [], [], {}
    for q in questions:
        if q.time is not None:  # the interval in the joined recording
            q = q.__class__(**{**q.__dict__, "time": (q.time[0] + offsets[q.clip],
                                                      q.time[1] + offsets[q.clip])})
        table[q.id] = q
        t0 = time.perf_counter()
        a = answerer.ask(spans, q.question)
        seconds.append(time.perf_counter() - t0)
        ev = [e.to_dict() for e in a.evidence]
        in_clip = bool(ev) and offsets[q.clip] - 0.5 <= ev[0]["start"] < ends[q.clip] + 0.5
        rows.append(dict(id=q.id, clip=q.clip, kind=q.kind, question=q.question,
                         answer=a.text, method=a.method, abstained=a.abstained, evidence=ev,
                         correct=is_correct(q, a.text), first_evidence=evidence_holds(q, ev),
                         question_class=question_class(q, spans),
                         first_in_clip=in_clip, confidence=a.confidence, seconds=seconds[-1]))
        print(f"{q.id:14s} {'ok ' if rows[-1]['correct'] else 'BAD'} "
              f"{'E' if rows[-1]['first_evidence'] else '-'}{'C' if in_clip else '-'} "
              f"{a.text[:60]!r}", file=sys.stderr)
    answerable = [r for r in rows if not unanswerable(table[r["id"]])]
    duration = max(s.end for s in spans)
    by_class = {}
    for c in ("findable", "yes/no", "unfindable"):
        these = [r for r in answerable if r["question_class"] == c]
        by_class[c] = f"{sum(r['first_evidence'] for r in these)}/{len(these)}"
    summary = dict(
        recording_seconds=round(duration, 1), clips=len(taken), spans=len(spans),
        questions=len(rows), transcript="transcribed" if args.transcribe else "clips shifted",
        first_evidence_holds=round(sum(r["first_evidence"] for r in answerable)
                                   / max(1, len(answerable)), 3),
        answer_or_first_evidence=round(sum(r["first_evidence"] or r["correct"]
                                           for r in answerable) / max(1, len(answerable)), 3),
        first_evidence_by_class=by_class,
        first_evidence_in_clip=round(sum(r["first_in_clip"] for r in rows) / max(1, len(rows)),
                                     3),
        answer_seconds_median=round(statistics.median(seconds), 3) if seconds else None,
        answer_seconds_max=round(max(seconds), 3) if seconds else None,
        scores=score(rows, table))
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": summary, "answers": rows,
                                         "spans": [s.to_dict() for s in spans]}, indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
