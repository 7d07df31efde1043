"""Leave-one-group-out ablation of the English answer rules on the dev split (issue #46).

Usage::

    python scripts/ask_ablate.py [--transcripts CACHE.json] [--groups a,b] [--json out.json]

Every dev question is answered (judged, as ``as2d ask`` answers) with all rules (the same
answers also judged with nothing withheld for support: the rows ``scripts/ask_calibrate.py``
chooses the thresholds on, kept as ``answers``), then again
with one group of rules left out at a time; a group is worth keeping only where leaving it
out loses right answers or precision. Only the dev split is read (the test split is never
used to choose). The answering model's work is memoised per prompt (its scores of candidate
spans and its generated answer are deterministic): a leave-out run replays them and calls the
model only for what it has not scored yet, so each group costs seconds, with the same answers
a fresh run gives.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import as2d.runtime.ask.answer as answer_mod  # noqa: E402
import as2d.runtime.ask.english.extract as extract  # noqa: E402
import as2d.runtime.ask.english.rules as rules  # noqa: E402
from as2d.runtime.ask.answer import Answerer, AskOptions  # noqa: E402
from as2d.runtime.ask.policies import policy_for  # noqa: E402
from bench.ask_score import question_table, score  # noqa: E402
from bench.questions import QUESTIONS, load_questions  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from ask_bench import cached_transcripts  # noqa: E402


class _Miss(Exception):
    pass


class Memo:
    """The model's scores and generations, keyed by prompt (replayed where all are known)."""

    def __init__(self) -> None:
        self.scores: dict[tuple, float] = {}
        self.gens: dict[tuple, object] = {}
        self.prompt: tuple = ()
        self.capacity = 1 << 30
        self.replaying = False
        self.real_score = answer_mod.tree_score
        self.real_generate = answer_mod.SpeculativeGenerator.generate

    def score(self, state, logits, ids, stop_ids, prefix=()):
        keys = [(self.prompt, tuple(prefix), tuple(s)) for s in ids]
        if all(k in self.scores for k in keys):
            return [self.scores[k] for k in keys], None
        if self.replaying:
            raise _Miss
        lps, tree = self.real_score(state, logits, ids, stop_ids, prefix=prefix)
        self.scores.update(zip(keys, lps))
        return lps, tree

    def generate(self, gen, prompt_ids, max_new, stop_ids, candidates=None, then=None,
                 static=0, before=None):
        memo = self
        key = (tuple(prompt_ids), max_new, before is not None, then is not None)
        memo.prompt = tuple(prompt_ids)
        if key in memo.gens:
            result, first_logits = memo.gens[key]

            class _State:
                capacity = memo.capacity
                length = len(prompt_ids)

                def truncate(self, n):
                    pass

            try:
                memo.replaying = True
                if before is not None:
                    before(_State(), len(prompt_ids), first_logits)
                if then is not None:
                    then(_State(), len(prompt_ids), first_logits)
                return result
            except _Miss:
                pass
            finally:
                memo.replaying = False
        seen = {}

        def spy_before(state, n, logits):
            seen["logits"] = logits
            memo.capacity = state.capacity
            if before is not None:
                before(state, n, logits)

        result = memo.real_generate(gen, prompt_ids, max_new, stop_ids, candidates, then, static,
                                    spy_before)
        memo.gens[key] = (result, seen.get("logits"))
        return result


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def without_sources(*names):
    keep = tuple(s for s in extract._SOURCES if s.__name__ not in names)
    return patched(extract, "_SOURCES", keep)


def without_reader(method):
    return patched(rules, "READERS", tuple(r for r in rules.READERS if r[0] != method))


def plain_choose():
    def choose(self, scored, spans, question, context=None):
        if not scored or extract.said_nothing_beyond(spans, question):
            return None
        return scored[0]
    return patched(rules.EnglishPolicy, "choose", choose)


def no_fallback():
    return patched(rules.EnglishPolicy, "fallback", lambda self, *a, **k: None)


GROUPS = {
    "reader:counted": lambda o: without_reader("counted"),
    "reader:read": lambda o: without_reader("read"),
    "calibrate": lambda o: patched(o, "calibrate", 0.0),
    "choose:shape": lambda o: plain_choose(),
    "fallback:generated": lambda o: no_fallback(),
    "src:question-runs": lambda o: without_sources("_after_question", "_between_question",
                                                   "_before_question"),
    "src:related-lines": lambda o: without_sources("_related_lines"),
    "src:names": lambda o: without_sources("_names_and_amounts", "_people", "_signed"),
    "src:said-about": lambda o: without_sources("_said_about", "_said_of", "_listed_with",
                                                "_first_and_last"),
    "src:slots": lambda o: without_sources("_preposition_object", "_wh_slot", "_verb_objects",
                                           "_end_clause"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=Path, required=True)
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--llm", default="gemma-3-270m")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--only", default=None, help="comma-separated question ids (a trial)")
    args = ap.parse_args()

    from as2d.loading import load_llm
    from as2d.runtime.ask.judge import judge
    from as2d.runtime.sessions import cpu_count

    qset = load_questions(QUESTIONS, fetch=True)
    keep = set(args.only.split(",")) if args.only else None
    qset.questions = [q for q in qset.questions if q.split == "dev"
                      and (keep is None or q.id in keep)]
    qset.clips = {c: p for c, p in qset.clips.items() if any(q.clip == c for q in qset.questions)}
    clips = cached_transcripts(args.transcripts, qset)
    if clips is None:
        print("the transcripts file lacks clips of the set", file=sys.stderr)
        return 2
    lm = load_llm(args.llm, None, args.models_dir, cpu_count())
    options = AskOptions(candidates=False)  # (the same answers, lossless; no look-ups)
    answerer = Answerer(lm, None, options)
    memo = Memo()
    table = question_table()
    policy = policy_for(None)

    def run() -> list[dict]:
        rows = []
        with patched(answer_mod, "tree_score", memo.score), \
                patched(answer_mod.SpeculativeGenerator, "generate",
                        lambda gen, *a, **k: memo.generate(gen, *a, **k)):
            for q in qset.questions:
                c = clips[q.clip]
                answerer.previous.clear()
                found = answerer.find(c["spans"], q.question, c["drafter"], policy)
                a = judge(found, c["spans"], q.question, policy, options.abstain_below)
                # judged with nothing withheld for its likelihood: what the bar is chosen on
                b = judge(found, c["spans"], q.question, policy, float("-inf"))
                rows.append(dict(id=q.id, split=q.split, answer=a.text, abstained=a.abstained,
                                 method=a.method, found=found.method,
                                 evidence=[e.to_dict() for e in a.evidence],
                                 unweighed=dict(id=q.id, split=q.split, answer=b.text,
                                                abstained=b.abstained, method=b.method,
                                                confidence=b.confidence, likelihood=b.likelihood,
                                                evidence=[e.to_dict() for e in b.evidence])))
        return rows

    t0 = time.perf_counter()
    full = run()
    base = score(full, table)
    print(f"all rules: right {base['right']}/{base['answered']} given, precision "
          f"{base['precision']}, coverage {base['coverage']} ({time.perf_counter() - t0:.0f} s)",
          file=sys.stderr)
    # (``answers``: the rows scripts/ask_calibrate.py chooses the thresholds on)
    out = {"all": dict(score=base), "answers": [r["unweighed"] for r in full]}
    for name in [g for g in args.groups.split(",") if g]:
        t0 = time.perf_counter()
        with GROUPS[name](options):
            rows = run()
        s = score(rows, table)
        changed = [dict(id=a["id"], all=a["answer"], without=b["answer"])
                   for a, b in zip(full, rows) if a["answer"] != b["answer"]]
        gained = s["right"] - base["right"]
        verdict = "keep" if (gained < 0 or (gained == 0 and (s["precision"] or 0)
                                            < (base["precision"] or 0))) else "remove"
        out.setdefault("groups", {})[name] = dict(score=s, right_delta=gained, changed=changed,
                                                  verdict=verdict)
        print(f"without {name:22s}: right {s['right']:3d} ({gained:+d}) precision "
              f"{s['precision']} coverage {s['coverage']} changed {len(changed)} -> {verdict} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
