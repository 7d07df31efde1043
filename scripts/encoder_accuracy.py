#!/usr/bin/env python
"""How much each encoder back end moves the transcript: WER against references, and words
changed against the exact (fp32) encoder, for every back end ``--encoder auto`` may choose.

Issue 27: the back end is chosen by speed, so each candidate must be shown to cost no accuracy.
One target (base int8 by default: its decoder is held fixed, only the encoder changes), decoded
target-only and greedily (AS²D gives the same tokens), English, whisper's temperature fallback
off so that a changed word is the encoder's doing. Sides:

- ``openvino f32``: the fp32 graph computed in f32 (the reference for "changed words");
- ``openvino bf16`` (the fp16-weight graph; and from the fp32 graph, as 0.2.0 compiled it),
  ``openvino int8`` (the bundle's int8 weights, activations quantised by OpenVINO per group of
  each row), ``onnxruntime int8`` (the bundle's own graph);
- ``faster-whisper int8`` on the same weights (whole model: its encoder and its decoder), for
  scale.

Clips: the local set with references (``bench_e2e.py --make-local-set``: LibriVox, cards, the
headerless recordings), and the ask question set's clips (``bench.questions``): its espeak-ng
clips are read from their own text (a reference, synthetic speech), the real ones only count
toward "changed words". WER pooled per group after Whisper's English normaliser (jiwer).

    python scripts/encoder_accuracy.py [--model base] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="base", help="catalog Whisper model (int8 bundle)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-fw", action="store_true", help="leave faster-whisper out")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args()
    if args.model != "base" and not args.no_fw:
        ap.error("faster-whisper runs base's weights here: with another --model, add --no-fw")

    work = Path(tempfile.mkdtemp(prefix="as2d-encoder-accuracy-"))
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> None:
    import jiwer
    from bench_e2e import _fw_transcribe, ct2_base_folder, make_local_set, parse_reference_file
    from whisper_normalizer.english import EnglishTextNormalizer

    from as2d.models.bundle import models_dir
    from as2d.models.install import ensure_openvino_graph, install
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.runtime.whisper.encoders import OpenVINOEncoder, OrtEncoder
    from as2d.runtime.whisper.model import WhisperModel
    from bench.questions import load_questions, materialize_clip

    t = args.threads
    with contextlib.redirect_stdout(io.StringIO()):
        make_local_set(work / "clips")
    refs = parse_reference_file(work / "clips" / "refs.tsv")
    clips: list[tuple[str, Path, str | None]] = []  # group, audio, reference
    for p in sorted((work / "clips").glob("*.wav")):
        clips.append(("local", p, refs.get(p.name) or refs.get(p.stem)))
    qs = json.loads((ROOT / "bench" / "ask_questions.json").read_text())
    load_questions(fetch=True)
    for name, ref in sorted(qs["clips"].items()):
        try:
            path = materialize_clip(ref)
        except Exception as exc:  # noqa: BLE001 - a clip that cannot be fetched is left out
            print(f"  {name}: left out ({exc})", file=sys.stderr)
            continue
        text = ref.get("espeak") if isinstance(ref, dict) else None
        clips.append(("espeak" if text else "ask real", path, text))

    bundle = install(args.model, "int8", models_dir()).path
    model = WhisperModel(bundle, threads=t, encoder="onnxruntime")
    fp32 = ensure_openvino_graph(bundle, "fp32")
    int8w = ensure_openvino_graph(bundle, "int8w")
    encoders = {
        "openvino f32": OpenVINOEncoder(fp32, t, "f32"),
        "openvino bf16": OpenVINOEncoder(ensure_openvino_graph(bundle, "f16w"), t, "bf16"),
        # bf16 as 0.2.0 compiled it: from the fp32 graph (where the fp16-weight copy cannot
        # be made, it still is)
        "openvino bf16 (fp32 graph)": OpenVINOEncoder(fp32, t, "bf16"),
        "openvino int8": OpenVINOEncoder(int8w, t, "int8"),
        "onnxruntime int8": OrtEncoder(bundle / model.manifest["files"]["encoder"], t,
                                       precision="int8"),
    }
    opts = TranscribeOptions(language="en", temperatures=(0.0,))

    def as2d_side(enc):
        def run(path: Path) -> str:
            model.encoder = enc
            return "".join(s.text for s in LongFormTranscriber(model).transcribe(
                load_audio(path), opts))
        return run

    sides = {name: as2d_side(enc) for name, enc in encoders.items()}
    if not args.no_fw:
        from faster_whisper import WhisperModel as FWModel

        fw = FWModel(str(ct2_base_folder(work / "ct2")), device="cpu", compute_type="int8",
                     cpu_threads=t, num_workers=1)

        def faster(path: Path) -> str:
            with contextlib.redirect_stdout(io.StringIO()):
                return "".join(s["text"] for s in _fw_transcribe(fw, str(path), "en"))
        sides["faster-whisper int8"] = faster

    texts: dict[str, dict[str, str]] = {s: {} for s in sides}
    secs = dict.fromkeys(sides, 0.0)
    for i, (_, path, _) in enumerate(clips):
        for side, fn in sides.items():  # interleaved: a load burst hits every side alike
            t0 = time.perf_counter()
            texts[side][str(path)] = fn(path)
            secs[side] += time.perf_counter() - t0
        print(f"  {i + 1}/{len(clips)} {path.name}", file=sys.stderr, flush=True)

    norm = EnglishTextNormalizer()
    groups = ["local", "espeak"]
    result: dict = {"model": args.model, "threads": t, "clips": len(clips), "sides": {}}
    print(f"\n{len(clips)} clips; WER on clips with a reference; 'changed' = word edits against "
          "openvino f32's transcript over all clips")
    words = {g: sum(len(norm(r).split()) for grp, _, r in clips if grp == g and r)
             for g in groups}
    print(f"  {'side':22}" + "".join(f"{g + ' WER':>14}" for g in groups)
          + f"{'changed':>10}{'time s':>9}   (words: "
          + ", ".join(f"{g} {words[g]}" for g in groups) + ")")
    ref_side = texts["openvino f32"]
    for side in sides:
        row = {}
        for g in groups:
            chosen = [(r, str(p)) for grp, p, r in clips if grp == g and r]
            row[g] = 100 * jiwer.wer([norm(r) for r, _ in chosen],
                                     [norm(texts[side][p]) or "-" for _, p in chosen])
        pairs = [(norm(ref_side[str(p)]), norm(texts[side][str(p)])) for _, p, _ in clips
                 if norm(ref_side[str(p)])]
        changed = 100 * jiwer.wer([a for a, _ in pairs], [b or "-" for _, b in pairs])
        differs = sum(a != b for a, b in pairs)
        print(f"  {side:22}" + "".join(f"{row[g]:13.2f}%" for g in groups)
              + f"{changed:9.2f}%{secs[side]:9.1f}   ({differs} clips differ)")
        result["sides"][side] = {"wer": row, "changed_vs_f32": changed,
                                 "clips_differing": differs, "seconds": secs[side]}
    result["words"] = words
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
