#!/usr/bin/env python
"""Where the CAM++ embedding graph spends its time, and what an int8 copy of it saves and costs.

    python scripts/bench_speaker_graph.py [--data /tmp/as2d-diarization-set2] \
        [--out bench/results/speaker-graph-int8-cpu.json] [--dev] [--ranges]

Real clips only: the local-speaker clips the diarizer embeds (its own segmentation and
``_local_clips``) of two dev conversations of ``bench/diarization.py``'s set. One thread.

- **Profile**: onnxruntime's per-node profile of the float graph (as ``make_session`` runs it)
  over one conversation's clips, summed by kind: the FCM head's 2-D convolutions (the nodes
  onnxruntime moves to its blocked NCHWc layout), the TDNN's fused conv + ReLU (a dense layer's
  1x1 conv and the masking gate's convs), its plain convs (the k3 dilated local convs and the
  transit layers), and the element-wise rest. CPU seconds per 10 s of clip speech.
- **int8**: the copy installs make (:mod:`as2d.models.campplus_int8`: QDQ, per-channel int8
  weights, uint8 activations with the 7-bit range AVX2 needs, convolutions only) from the
  shipped range table, which ``--ranges`` computes again on the first conversation's clips
  (min/max) and writes; run on the second conversation's clips: CPU time against the float graph
  (interleaved rounds) and the cosine of each clip's embedding to the float graph's; with
  ``--dev``, the whole diarizer's DER and speaker counts on the dev part with either graph
  (the same segmentation and settings; CPU of the two models, one thread).
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def clips_of(path: Path, models) -> list[np.ndarray]:
    """The mean-normalised fbank ``[1, frames, 80]`` of every clip the diarizer embeds."""
    import soundfile as sf

    from as2d.runtime.speakers.diarize import DiarizeParams, _local_clips, recording_fbank
    from as2d.runtime.speakers.segmentation import Segmenter

    x, _ = sf.read(path, dtype="float32")
    params = DiarizeParams()
    seg = Segmenter(models.segmentation, 1)(x, params.step)
    feats = recording_fbank(x)
    out = []
    for c in _local_clips(len(x), seg, params):
        f = feats[c[3]]
        out.append((f - f.mean(0))[None].astype(np.float32))
    return out


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def session(path, profile: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def dev_scores(items, folder: Path, models, int8_path: Path) -> dict:
    """DER and count accuracy on dev with the float graph and the int8 copy (one thread)."""
    import soundfile as sf

    from as2d.runtime.speakers.diarize import DiarizeParams, analyse, resolve
    from as2d.runtime.speakers.embedding import SpeakerEmbedder
    from as2d.runtime.speakers.segmentation import Segmenter
    from bench.diarization import score

    params = DiarizeParams()
    segmenter = Segmenter(models.segmentation, 1)
    audio = {i["name"]: sf.read(folder / f"{i['name']}.wav", dtype="float32")[0]
             for i in items}
    out = {}
    for name, path in (("float", models.embedding_float), ("int8", int8_path)):
        embedder = SpeakerEmbedder(path, 1)
        t = time.process_time()
        analyses = {n: analyse(x, segmenter, embedder, params) for n, x in audio.items()}
        cpu = time.process_time() - t
        hyps = {n: [(x.start, x.end, x.speaker) for x in resolve(a, params).turns]
                for n, a in analyses.items()}
        sc = score(items, folder, hyps)
        out[name] = {"der": sc["der"], "count_accuracy": float(sc["count_accuracy"]),
                     "cpu_seconds_both_models": round(cpu, 2)}
    return out


def kind(event: dict) -> str:
    op, name = event["args"]["op_name"], event["name"]
    if "nchwc" in name:
        return "head 2-D convs (NCHWc)"
    return {"FusedConv": "TDNN conv+ReLU (1x1, gate)", "Conv": "TDNN conv (k3 local, transit)"
            }.get(op, "element-wise and the rest")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/as2d-diarization-set2"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dev", action="store_true", help="score dev with each graph")
    ap.add_argument("--ranges", action="store_true",
                    help="compute the int8 activation ranges on the calibration clips and "
                         "write them to the shipped table first")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench/results/speaker-graph-int8-cpu.json")
    args = ap.parse_args()

    from as2d.models import campplus_int8
    from as2d.models.bundle import models_dir
    from as2d.models.speakers import (
        EMBEDDING_FILE,
        EMBEDDING_INT8_FILE,
        NAME,
        SEGMENTATION_FILE,
        SpeakerModels,
        install_speaker_models,
    )
    from bench.diarization import SET_VERSION, load_set

    items = [i for i in load_set(args.data) if i["part"] == "dev"]
    if args.ranges:  # before the install check, which makes the int8 graph from the table
        folder = models_dir() / NAME
        floats = SpeakerModels(folder / SEGMENTATION_FILE, folder / EMBEDDING_INT8_FILE,
                               folder / EMBEDDING_FILE)
        calib = clips_of(args.data / f"{items[1]['name']}.wav", floats)
        with tempfile.TemporaryDirectory() as tmp:
            table = {"recipe": {
                "script": "scripts/bench_speaker_graph.py --ranges",
                "clips": f"the diarizer's local-speaker clips of {items[1]['name']} (dev) of "
                         f"bench/diarization.py's set v{SET_VERSION} ({len(calib)} clips)",
                "method": "onnxruntime MinMax calibration of the convolutions' inputs and "
                          "outputs, float graph",
                "date": time.strftime("%Y-%m-%d")},
                "ranges": campplus_int8.calibrate(floats.embedding_float, calib, Path(tmp))}
        campplus_int8.RANGES_FILE.write_text(json.dumps(table, indent=1) + "\n")
    models = install_speaker_models()
    calib = clips_of(args.data / f"{items[1]['name']}.wav", models)
    test = clips_of(args.data / f"{items[2]['name']}.wav", models)
    seconds = sum(c.shape[1] for c in test) / 100

    with tempfile.TemporaryDirectory() as tmp:
        s = session(models.embedding_float, f"{tmp}/prof")
        t = time.process_time()
        for c in test:
            s.run(None, {"feats": c})
        profiled = time.process_time() - t
        events = json.loads(Path(s.end_profiling()).read_text())
        by = collections.Counter()
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                by[kind(e)] += e["dur"]
        total = sum(by.values())
        # the nodes' shares of the profiled run's own CPU time (their durations are walls)
        profile = {k: {"share": round(v / total, 3),
                       "cpu_per_10s_speech": round(v / total * profiled / seconds * 10, 4)}
                   for k, v in by.most_common()}

        q8 = Path(tmp) / "campplus-int8.onnx"
        campplus_int8.quantize(models.embedding_float, q8)
        sessions = {"float": session(models.embedding_float), "int8": session(q8)}
        cpu = {k: [] for k in sessions}
        outs = {}
        for r in range(args.rounds):
            for k in (list(sessions) if r % 2 == 0 else list(sessions)[::-1]):
                t = time.process_time()
                outs[k] = [sessions[k].run(None, {"feats": c})[0][0] for c in test]
                cpu[k].append(round(time.process_time() - t, 3))
        dev = dev_scores(items, args.data, models, q8) if args.dev else None
    unit = [v / np.linalg.norm(v) for v in outs["float"]]
    cos = [float(a @ (b / np.linalg.norm(b))) for a, b in zip(unit, outs["int8"])]
    med = {k: float(np.median(v)) for k, v in cpu.items()}
    report = {
        "machine": f"{cpu_name()}, 1 thread, shared with other jobs",
        "load": open("/proc/loadavg").read().split()[:3],
        "clips": {"calibration": f"{items[1]['name']} ({len(calib)} clips)",
                  "test": f"{items[2]['name']} ({len(test)} clips, {seconds:.1f} s)"},
        "profile": {"cpu_seconds": round(profiled, 3),
                    "cpu_per_10s_speech": round(profiled / seconds * 10, 4),
                    "by_kind": profile},
        "int8": {"cpu_seconds": cpu, "median": med,
                 "int8_over_float": round(med["int8"] / med["float"], 3),
                 "cosine_to_float": {"min": round(min(cos), 4),
                                     "mean": round(float(np.mean(cos)), 4)}},
    }
    if dev:
        report["dev"] = dev
    print(json.dumps(report, indent=1))
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
