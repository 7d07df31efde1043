"""Where a follow-up ``as2d ask`` question's seconds go (issue #46), stage by stage, in one
process: the audio's digest, the answering model's session, and the answer itself with the
prompt read whole up to 768 transcript tokens and from 768 or 256 tokens of passages beyond.

    python scripts/ask_followup_profile.py --out bench/results/ask_followup_profile_2026-12-06.json

The recording is the one ``scripts/ask_cache_bench.py`` makes (its clips joined to 10 minutes);
its transcript comes from the transcript cache (``as2d ask`` is run once to make it when the
cache folder lacks it). Stages, each ``--rounds`` times, medians reported:

* **digest**: the SHA-256 of the file (:func:`file_digest`) against reading it back by the
  file's identity (:meth:`TranscriptCache.digest`);
* **session**: the answering model's onnxruntime session as as2d makes it, and the same with
  weight pre-packing switched off (what the packing of the int8 weights costs at load; not a
  setting as2d uses: every pass would pack again);
* **answer**: :meth:`Answerer.ask` on the cached transcript for each follow-up question of the
  bench, at ``passage_tokens`` 768 and 256: the prompt's tokens, those prefilled (after the
  stored few-shot head), the prefill's seconds and the whole answer's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from ask_cache_bench import LONG_QUESTIONS, long_recording  # noqa: E402


def median(xs, digits: int = 4) -> float:
    return round(statistics.median(xs), digits)


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None, help="folder for the recording and the "
                                                            "cache (default: a new temp one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()

    import onnxruntime as ort

    from as2d.engine import EngineSpec, transcript_key
    from as2d.loading import load_llm
    from as2d.runtime.ask.answer import Answerer, AskOptions
    from as2d.runtime.ask.transcripts import TranscriptCache, file_digest
    from as2d.runtime.sessions import cpu_count, cpu_model_name, make_session
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    work = a.work or Path(tempfile.mkdtemp(prefix="ask-followup-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    audio, folder = work / "long.wav", work / "cache"
    if not audio.exists():
        long_recording(audio)
    env = {**os.environ, "AS2D_TRANSCRIPT_CACHE": str(folder)}
    cache = TranscriptCache(folder)
    spec = EngineSpec(model="base", llm="gemma-3-270m")
    key = transcript_key(spec, file_digest(audio), TranscribeOptions())
    if cache.get(key) is None:  # one first question makes the transcript
        subprocess.run([sys.executable, "-m", "as2d", "ask", "-q", "--no-live", str(audio),
                        LONG_QUESTIONS[0]], env=env, check=True, capture_output=True)
    transcript = TranscriptCache(folder).get(key)
    assert transcript is not None, "the transcript was not kept"
    os.utime(audio, ns=(10**18, 10**18))  # (settled: its identity may be remembered)
    cache.digest(audio)
    doc = {"command": " ".join(sys.argv), "machine": cpu_model_name(), "cpus": os.cpu_count(),
           "load_average_at_start": os.getloadavg(), "shared_machine": True,
           "recording_seconds": transcript.duration, "segments": len(transcript.spans)}
    doc["digest"] = {
        "file_sha256_s": median(timed(lambda: file_digest(audio), a.rounds), 6),
        "read_back_by_identity_s": median(timed(lambda: cache.digest(audio), a.rounds), 6),
        "bytes": audio.stat().st_size}

    threads = cpu_count()
    lm = load_llm("gemma-3-270m", None, None, threads)
    graph = lm.path / lm.manifest["files"]["decoder"]

    def unpacked():
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.log_severity_level = 3
        so.add_session_config_entry("session.disable_prepacking", "1")
        ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])

    doc["session"] = {
        "as_made_s": median(timed(lambda: make_session(graph, threads, spin=True), a.rounds)),
        "without_prepacking_s": median(timed(unpacked, a.rounds)), "threads": threads}

    rows = {}
    for budget in (768, 256):
        answerer = Answerer(lm, None, AskOptions(passage_tokens=budget))
        rows[budget] = []
        for q in LONG_QUESTIONS[1:]:
            runs = []
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                ans = answerer.ask(transcript.spans, q, transcript.drafted,
                                   language=transcript.language)
                runs.append((time.perf_counter() - t0, ans))
            seconds, ans = min(runs, key=lambda r: r[0])
            st = ans.stats
            rows[budget].append({
                "question": q, "answer": ans.text, "method": ans.method,
                "evidence": [e.to_dict() for e in ans.evidence],
                "prompt_tokens": st.prompt_tokens,
                "prefilled_tokens": st.prompt_tokens - st.prefill_cached,
                "prefill_s": round(st.prefill_seconds, 4),
                "answer_s_median": median([r[0] for r in runs]), "answer_s_min": round(seconds, 4)})
            print(budget, q, rows[budget][-1]["prefilled_tokens"],
                  rows[budget][-1]["prefill_s"], rows[budget][-1]["answer_s_median"], flush=True)
    doc["answer"] = {str(b): {
        "prefilled_tokens_median": median([r["prefilled_tokens"] for r in rs]),
        "prefill_s_median": median([r["prefill_s"] for r in rs]),
        "answer_s_median": median([r["answer_s_median"] for r in rs]),
        "questions": rs} for b, rs in rows.items()}
    doc["load_average_at_end"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "answer"}, indent=1))
    print(json.dumps({b: {k: v for k, v in d.items() if k != "questions"}
                      for b, d in doc["answer"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
