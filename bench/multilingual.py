#!/usr/bin/env python
"""Code-switching: ``as2d transcribe --multilingual`` beside the same without it and beside
faster-whisper's ``multilingual=True`` on the same base weights.

Two recordings, made here from packaged speech:

* **mixed** (≈90 s): a LibriVox reading (English, 24.7 s), German (espeak-ng, ≈40 s), the
  reading again: windows in English, German, then German and English (Whisper detects one
  language per window: a window that holds both is decoded in the one it judges likelier).
* **english** (≈99 s): the reading four times: what ``--multilingual`` costs where the
  language never changes (one decoder step per window) and whether it changes a word there.

Whole commands, one process per run, rounds interleaved (every side once per round), greedy
without fallback on every side (``--temperature-increment-on-fallback 0``; faster-whisper
``temperature=0, beam_size=1``) so that the sides decode the same way. Reports each side's
median wall time, the language of each segment and the German words recognised, and whether
AS²D's tokens are target-only's (they must be).

    python bench/multilingual.py [--rounds 3] [--out bench/results/multilingual-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0"
GERMAN = ("Guten Morgen. Heute ist das Wetter schön, und wir gehen am Nachmittag in den Park. "
          "Danach kaufen wir Brot, Käse und Äpfel auf dem Markt, und am Abend kochen wir "
          "zusammen eine Suppe für die ganze Familie. Mein Bruder erzählt von seiner Reise nach "
          "Berlin, wo er drei Tage lang Museen besucht hat. Am Sonntag fahren wir mit dem Zug "
          "ans Meer.")
GERMAN_MORE = ("Im Winter ist es in den Bergen sehr kalt, aber die Kinder spielen gern im Schnee. "
               "Meine Großmutter backt jeden Freitag einen Kuchen mit Kirschen und Sahne. Wir "
               "trinken Kaffee im Garten und sprechen über die Ferien im nächsten Sommer.")
GERMAN_WORDS = {w.strip(".,").lower() for w in (GERMAN + " " + GERMAN_MORE).split()}
GREEDY = ["--temperature", "0", "--temperature-increment-on-fallback", "0"]


def make_audio(folder: Path) -> dict[str, Path]:
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/multilingual.py: {tool} is needed (apt-get install {tool})")
    english = [f"{LIBRIVOX}{n}.wav" for n in (870, 880, 890, 920, 930)]
    subprocess.run(["espeak-ng", "-v", "de", "-s", "150", "-w", str(folder / "de22.wav"),
                    GERMAN + " " + GERMAN_MORE], check=True)
    subprocess.run(["sox", str(folder / "de22.wav"), "-r", "16000", "-c", "1",
                    str(folder / "de.wav")], check=True)
    subprocess.run(["sox", *english, str(folder / "en.wav")], check=True)
    out = {"mixed": folder / "mixed.wav", "english": folder / "english.wav"}
    subprocess.run(["sox", str(folder / "en.wav"), str(folder / "de.wav"),
                    str(folder / "en.wav"), str(out["mixed"])], check=True)
    subprocess.run(["sox", *[str(folder / "en.wav")] * 4, str(out["english"])], check=True)
    return out


def as2d_run(audio: Path, out: Path, decoder: str, multilingual: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["as2d", "transcribe", str(audio), "--decoder", decoder, "-f", "json", "-o", str(out),
           "-q", "--no-live", *GREEDY, "--multilingual" if multilingual else "--no-multilingual"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    doc = json.loads((out / f"{audio.stem}.json").read_text())
    return {"wall_s": round(wall, 3),
            "segments": [{"start": s["start"], "language": s.get("language"),
                          "text": s["text"]} for s in doc["segments"]],
            "tokens": [s["tokens"] for s in doc["segments"]]}


FW_CHILD = """
import json, sys
from faster_whisper import WhisperModel
folder, path, multilingual = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
model = WhisperModel(folder, device="cpu", compute_type="int8", cpu_threads=2, num_workers=1)
segments, info = model.transcribe(path, beam_size=1, best_of=1, temperature=0.0,
                                  multilingual=multilingual, vad_filter=False)
segs = [{"start": s.start, "language": getattr(s, "language", None) or (info.language
         if not multilingual else None), "text": s.text} for s in segments]
print(json.dumps(segs))
"""


def fw_run(folder: Path, audio: Path, multilingual: bool) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", FW_CHILD, str(folder), str(audio),
                           "1" if multilingual else "0"], check=True, capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 3), "segments": json.loads(done.stdout.splitlines()[-1])}


def german_found(segments: list[dict]) -> int:
    """How many distinct words of the German text the transcript has (translated: ~0)."""
    said = {w.strip(".,!?").lower() for s in segments for w in s["text"].split()}
    return len(said & GERMAN_WORDS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--fw-cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "as2d-bench" / "ct2-whisper-base")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_e2e import ct2_base_folder

    fw_folder = ct2_base_folder(args.fw_cache)
    work = Path(tempfile.mkdtemp(prefix="as2d-multilingual-"))
    audio = make_audio(work)
    sides = {
        "mixed": {
            "as2d --multilingual": lambda o: as2d_run(audio["mixed"], o, "as2d", True),
            "target --multilingual": lambda o: as2d_run(audio["mixed"], o, "target", True),
            "as2d": lambda o: as2d_run(audio["mixed"], o, "as2d", False),
            "faster-whisper multilingual": lambda o: fw_run(fw_folder, audio["mixed"], True),
            "faster-whisper": lambda o: fw_run(fw_folder, audio["mixed"], False),
        },
        "english": {
            "as2d --multilingual": lambda o: as2d_run(audio["english"], o, "as2d", True),
            "as2d": lambda o: as2d_run(audio["english"], o, "as2d", False),
        },
    }
    runs: dict = {rec: {side: [] for side in s} for rec, s in sides.items()}
    load = os.getloadavg()
    for r in range(args.rounds):
        for rec, by_side in sides.items():
            for side, run in by_side.items():
                got = run(work / f"r{r}-{rec}-{side.replace(' ', '_')}")
                runs[rec][side].append(got)
                print(f"round {r + 1} {rec:8s} {side:28s} {got['wall_s']:7.2f} s", flush=True)
    result: dict = {
        "command": "python bench/multilingual.py " + " ".join(sys.argv[1:]),
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "load_average_at_start": load, "shared_machine": load[0] > 1.5,
        "rounds": args.rounds, "recordings": {}}
    for rec, by_side in runs.items():
        entry: dict = {}
        for side, rs in by_side.items():
            first = rs[0]
            entry[side] = {
                "wall_median_s": round(statistics.median(x["wall_s"] for x in rs), 3),
                "wall_min_s": min(x["wall_s"] for x in rs),
                "segment_languages": [s["language"] for s in first["segments"]],
                "german_words_found": german_found(first["segments"]),
                "text": " ".join(s["text"].strip() for s in first["segments"]),
            }
        if rec == "mixed":
            a, t = by_side["as2d --multilingual"], by_side["target --multilingual"]
            entry["as2d_tokens_equal_target_only"] = all(x["tokens"] == y["tokens"]
                                                         for x, y in zip(a, t))
            entry["as2d_multilingual_over_faster_whisper_multilingual_wall"] = round(
                entry["faster-whisper multilingual"]["wall_median_s"]
                / entry["as2d --multilingual"]["wall_median_s"], 2)
        else:
            a, b = by_side["as2d --multilingual"], by_side["as2d"]
            entry["same_tokens_with_and_without"] = all(x["tokens"] == y["tokens"]
                                                        for x, y in zip(a, b))
            entry["multilingual_cost"] = round(entry["as2d --multilingual"]["wall_median_s"]
                                               / entry["as2d"]["wall_median_s"], 3)
        result["recordings"][rec] = entry
    text = json.dumps(result, indent=1, ensure_ascii=False)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if result["recordings"]["mixed"]["as2d_tokens_equal_target_only"] else 3


if __name__ == "__main__":
    sys.exit(main())
