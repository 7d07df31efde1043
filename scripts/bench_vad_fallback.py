"""VAD filter and temperature fallback, measured on real clips made hard on purpose.

    python scripts/bench_vad_fallback.py [--rounds 3] [--json out.json]

* **pauses**: the LibriVox clips and two moonshine-voice clips joined with 15-40 s of
  near-silence, white noise (-40 dBFS) and mains hum between them (274 s, 79 s of speech).
  Without and with ``--vad-filter``: wall time, and hallucinated segments (text where no clip
  is: a segment that overlaps no clip, or repeats the segment before it word for word).
  Segment times are Whisper's, which run on through a pause, so overlap alone is no test.
* **noisy**: the five LibriVox clips mixed with white noise at -5 dB SNR, each its own
  window. Greedy only (``temperature=0``) and whisper's fallback schedule: wall time, windows
  that fell back.

Each configuration runs with the AS²D decoder and target-only; their tokens must be identical.
Rounds are interleaved and the median (with min–max) is reported.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import time

import numpy as np

SR = 16000


def clips() -> list[str]:
    import moonshine_voice

    mv = os.path.join(os.path.dirname(moonshine_voice.__file__), "assets")
    return (sorted(glob.glob("/usr/share/pocketsphinx/test/data/librivox/*.wav"))
            + [f"{mv}/beckett.wav", f"{mv}/two_cities.wav"])


def pauses() -> tuple[np.ndarray, list[tuple[float, float]]]:
    from as2d.runtime.audio import load_audio

    rng = np.random.default_rng(7)

    def gap(kind: str, sec: float) -> np.ndarray:
        n = int(sec * SR)
        if kind == "silence":
            return (rng.standard_normal(n) * 1e-4).astype(np.float32)
        if kind == "noise":
            return (rng.standard_normal(n) * 0.01).astype(np.float32)
        t = np.arange(n) / SR
        return (0.02 * np.sin(2 * np.pi * 50 * t) + 0.01 * np.sin(2 * np.pi * 150 * t)
                + rng.standard_normal(n) * 0.002).astype(np.float32)

    parts, spans, at = [gap("silence", 12)], [], 12.0
    for i, c in enumerate(clips()):
        x = np.asarray(load_audio(c).samples, np.float32)
        parts.append(x)
        spans.append((at, at + len(x) / SR))
        at += len(x) / SR
        g = [25, 40, 18, 33, 22, 30, 15][i]
        parts.append(gap(["silence", "noise", "hum"][i % 3], g))
        at += g
    return np.concatenate(parts), spans


def noisy() -> list[np.ndarray]:
    from as2d.runtime.audio import load_audio

    rng = np.random.default_rng(11)
    out = []
    for c in clips()[:5]:  # the LibriVox clips
        x = np.asarray(load_audio(c).samples, np.float32)
        noise = rng.standard_normal(len(x)).astype(np.float32)
        noise *= np.sqrt(np.mean(x ** 2) / np.mean(noise ** 2)) * 10 ** (5 / 20)  # -5 dB SNR
        out.append((x + noise).astype(np.float32))
    return out


def hallucinated(segments, spans) -> int:
    bad, before = 0, None
    for s in segments:
        overlap = sum(max(0.0, min(s.end, b) - max(s.start, a)) for a, b in spans)
        text = s.text.strip().lower()
        if overlap <= 0 or text == before:
            bad += 1
        before = text
    return bad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sets", default="pauses,noisy", help="pauses, noisy or both")
    args = ap.parse_args()

    import as2d
    from as2d.runtime.events import Note

    notes: list[str] = []

    def listen(e) -> None:
        if isinstance(e, Note):
            notes.append(e.message)

    models = {d: as2d.Transcriber("base", decoder=d, threads=2, listener=listen)
              for d in ("as2d", "target")}
    long_audio, spans = pauses()
    hard = noisy()
    configs = {
        "pauses, no filter": (lambda t: [list(t.transcribe(long_audio, language="en")[0])]),
        "pauses, --vad-filter": (lambda t: [list(t.transcribe(long_audio, language="en",
                                                              vad_filter=True)[0])]),
        "noisy, greedy only": (lambda t: [list(t.transcribe(x, language="en",
                                                            temperature=0)[0]) for x in hard]),
        "noisy, fallback": (lambda t: [list(t.transcribe(x, language="en")[0]) for x in hard]),
    }
    configs = {k: v for k, v in configs.items() if k.split(",")[0] in args.sets.split(",")}
    times: dict[tuple[str, str], list[float]] = {}
    out: dict[tuple[str, str], list] = {}
    fell: dict[tuple[str, str], int] = {}
    for _ in range(args.rounds):
        for name, run in configs.items():
            for d, t in models.items():
                notes.clear()
                t0 = time.perf_counter()
                segs = run(t)
                times.setdefault((name, d), []).append(time.perf_counter() - t0)
                out[(name, d)] = segs
                fell[(name, d)] = sum("decoding it again at temperature" in n for n in notes)
    rows = []
    print("| configuration | decoder | wall s, median (min–max) | segments | hallucinated |"
          " fallback decodes | temperatures > 0 | tokens = target-only |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, d), ts in times.items():
        segs = out[(name, d)]
        flat = [s for f in segs for s in f]
        same = ([[s.tokens for s in f] for f in segs]
                == [[s.tokens for s in f] for f in out[(name, "target")]])
        outside = hallucinated(flat, spans) if name.startswith("pauses") else "-"
        hot = sum(s.temperature > 0 for s in flat)
        row = dict(config=name, decoder=d, median=statistics.median(ts), min=min(ts),
                   max=max(ts), segments=len(flat), outside=outside,
                   fallback_decodes=fell[(name, d)], sampled_segments=hot, identical=same)
        rows.append(row)
        print(f"| {name} | {d} | {row['median']:.2f} ({row['min']:.2f}–{row['max']:.2f}) | "
              f"{len(flat)} | {outside} | {fell[(name, d)]} | {hot} | {same} |")
    for name in [n for n in ("pauses, no filter", "pauses, --vad-filter") if n in configs]:
        print(f"\n{name}:")
        for s in out[(name, "target")][0]:
            print(f"  [{s.start:7.2f} → {s.end:7.2f}] {s.text.strip()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    for t in models.values():
        t.close()


if __name__ == "__main__":
    main()
