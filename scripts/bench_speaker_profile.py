"""Where `as2d transcribe --diarize` spends its time on a long recording.

Two parts, one process each, same file:

* **stages** (in this process, the diarizer alone, ``--threads`` threads): wall and CPU seconds
  of segmentation, the recording's fbank, the embeddings and the clustering/aggregation, with
  what they worked on (windows, clips, embedded seconds, distinct clip lengths).
* **commands** (whole ``as2d transcribe`` processes, interleaved rounds): plain,
  ``--word-timestamps`` and ``--diarize``, each with ``--stats-json`` (encoding, decoding and
  word alignment as the transcriber counts them).
* **timeline** (in this process, ``as2d.Transcriber(...).transcribe(diarize=True)``): when the
  diarization thread starts and ends, and when the transcription (with word timing) ends:
  which of the two the caller waits for.

    python scripts/bench_speaker_profile.py /tmp/speakers-set/long.wav \
        --out bench/results/diarization-profile-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def stages(path: Path, threads: int) -> dict:
    import soundfile as sf

    from as2d.models.speakers import install_speaker_models
    from as2d.runtime.speakers import diarize as dz
    from as2d.runtime.speakers.pipeline import Diarizer

    m = install_speaker_models()
    d = Diarizer(m.segmentation, m.embedding, threads)
    x, _ = sf.read(path, dtype="float32")
    out: dict = {"threads": threads, "audio_seconds": round(len(x) / 16000, 2)}

    def timed(name, f):
        w, c = time.perf_counter(), time.process_time()
        r = f()
        out[name] = {"wall": round(time.perf_counter() - w, 2),
                     "cpu": round(time.process_time() - c, 2)}
        return r

    an = timed("analyse", lambda: dz.analyse(x, d.segmenter, d.embedder, d.params))
    seg = timed("segmentation", lambda: d.segmenter(x, d.params.step))
    clips = timed("local_clips", lambda: list(dz._local_clips(len(x), seg, d.params)))
    feats = timed("fbank", lambda: dz.recording_fbank(x))
    rows = [c[3] for c in clips]
    fb = [feats[r] for r in rows]
    timed("embedding", lambda: d.embedder.embed_fbanks(fb))
    timed("resolve", lambda: dz.resolve(an, d.params))
    out["work"] = {"windows": len(seg.starts), "clips": len(clips),
                   "embedded_seconds": round(sum(map(len, rows)) / 100, 1),
                   "distinct_lengths": len(set(map(len, rows)))}
    return out


def command(path: Path, extra: list[str], models: str | None) -> dict:
    """Wall and CPU seconds (user + system, the process and its threads) of one command."""
    with tempfile.TemporaryDirectory(prefix="speakers-prof-") as tmp:
        stats = Path(tmp) / "stats.json"
        args = [sys.executable, "-m", "as2d", "transcribe", str(path), "-t", "2", "-q",
                "-f", "json", "-o", tmp, "--stats-json", str(stats), *extra]
        if models:
            args += ["--models-dir", models]
        t = time.time()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - t
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.read().decode()[-300:]}")
        proc.stderr.close()
        row: dict = {"wall": round(wall, 2), "cpu": round(usage.ru_utime + usage.ru_stime, 2)}
        if stats.is_file():
            summary = json.loads(stats.read_text())[0]["summary"]
            row["stats"] = {k: summary[k] for k in ("windows", "committed_tokens",
                                                    "encode_seconds", "decode_seconds",
                                                    "draft_seconds", "wall_seconds")}
        return row


def timeline(path: Path, models: str | None) -> dict:
    """Seconds from the call: the diarization thread's start and end, and the transcription's
    end (when the caller asks for the diarization's result)."""
    import as2d
    from as2d.runtime.speakers import diarize as dz
    from as2d.runtime.speakers import pipeline
    from as2d.runtime.speakers.embedding import SpeakerEmbedder
    from as2d.runtime.speakers.segmentation import Segmenter
    from as2d.runtime.whisper.alignment import WordAligner

    marks: dict[str, float] = {}
    spent: dict[str, float] = {}
    diarize, result = pipeline.Diarizer.diarize, pipeline.RunningDiarization.result

    def summed(owner, name, key):
        inner = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t
        setattr(owner, name, wrapper)

    summed(WordAligner, "align", "word_alignment")
    summed(Segmenter, "__call__", "segmentation")
    summed(dz, "recording_fbank", "fbank")
    summed(SpeakerEmbedder, "embed_fbanks", "embedding")
    summed(dz, "resolve", "clustering_and_turns")

    def timed_diarize(self, *a, **k):
        marks["diarize_start"] = time.time()
        try:
            return diarize(self, *a, **k)
        finally:
            marks["diarize_end"] = time.time()

    def timed_result(self):
        marks["transcription_end"] = time.time()
        return result(self)

    pipeline.Diarizer.diarize = timed_diarize
    pipeline.RunningDiarization.result = timed_result
    t = time.time()
    cpu = time.process_time()
    tr = as2d.Transcriber("base", threads=2, models_dir=models)
    marks["models_loaded"] = time.time()
    t1 = time.time()
    segments, _info = tr.transcribe(str(path), diarize=True)
    n = len(list(segments))
    marks["segments_out"] = time.time()
    tr.close()
    return {"segments": n, "load": round(marks["models_loaded"] - t, 2),
            "process_cpu": round(time.process_time() - cpu, 2),
            "from_transcribe_call": {k: round(v - t1, 2) for k, v in marks.items()
                                     if k != "models_loaded"},
            "stage_walls": {k: round(v, 2) for k, v in spent.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audio", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-stages", action="store_true")
    a = ap.parse_args()
    models = os.environ.get("AS2D_MODELS_DIR")
    import as2d

    report: dict = {"file": a.audio.name, "as2d": str(Path(as2d.__file__).parent),
                    "load_before": open("/proc/loadavg").read().split()[:3]}
    if not a.no_stages:
        report["stages"] = stages(a.audio, a.threads)
        print("stages", report["stages"], flush=True)
    if not a.no_stages:
        report["timeline"] = timeline(a.audio, models)
        print("timeline", report["timeline"], flush=True)
    configs = {"plain": [], "words": ["--word-timestamps"], "diarize": ["--diarize"]}
    runs: dict[str, list] = {k: [] for k in configs}
    for _ in range(a.rounds):
        for k, extra in configs.items():
            runs[k].append(command(a.audio, extra, models))
            print(k, runs[k][-1]["wall"], flush=True)
    report["commands"] = runs
    med = {k: float(np.median([r["wall"] for r in v])) for k, v in runs.items()}
    report["median_wall"] = med
    report["added_by_words"] = round(med["words"] / med["plain"] - 1, 3)
    report["added_by_diarize"] = round(med["diarize"] / med["plain"] - 1, 3)
    report["load_after"] = open("/proc/loadavg").read().split()[:3]
    a.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: report[k] for k in ("median_wall", "added_by_words",
                                              "added_by_diarize")}))


if __name__ == "__main__":
    main()
