#!/usr/bin/env python
"""WER and decoding time of as2d's int8 before and after the refined logits, as2d fp32, and
faster-whisper int8, all from the same Whisper base weights, on every real reference set here.

Issue 27, point 2: as2d int8 must say no more wrong words than faster-whisper int8 on the same
weights, and lose no speed. Four decoders, interleaved clip by clip (a shared machine's load hits
all alike), greedy at temperature 0 with timestamps and the previous text as prompt, English:

- ``as2d int8 (before)``: the int8 bundle with the decoder as converter 7 built it (no refined
  logits), made here from the same weights;
- ``as2d int8``: the int8 bundle as installed now (each row's top 8 logits recomputed from an
  fp16 copy of the embedding);
- ``as2d fp32``: the fp32 bundle;
- ``faster-whisper int8``: PyPI ``faster-whisper`` on the CTranslate2 base folder (as
  scripts/bench_e2e.py runs it).

as2d decodes target-only in process (AS²D gives the same tokens: the lossless tests and
bench_e2e's "identical" check hold it to that). Sets: the clips with a reference that
``bench_e2e.py --make-local-set`` gathers (LibriVox, cards, the headerless recordings) and one
long file joined from all of them (bench_e2e's ``build_joined``). WER pooled per set after
Whisper's English normaliser; time: seconds spent transcribing (model loading excluded).

    python scripts/int8_wer.py [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="timing rounds (WER from the first)")
    args = ap.parse_args()

    import jiwer
    from bench_e2e import (
        Clip,
        _fw_transcribe,
        audio_seconds,
        build_joined,
        ct2_base_folder,
        make_local_set,
        parse_reference_file,
    )
    from faster_whisper import WhisperModel as FWModel
    from int8_attribution import OLD, VARIANTS, build_variant, use_decoder
    from whisper_normalizer.english import EnglishTextNormalizer

    from as2d.models.bundle import models_dir
    from as2d.models.ct2 import load_ct2
    from as2d.models.install import install
    from as2d.runtime.audio import load_audio
    from as2d.runtime.sessions import make_session
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.runtime.whisper.model import WhisperModel

    t = args.threads
    work = Path(tempfile.mkdtemp(prefix="as2d-int8-wer-"))
    with contextlib.redirect_stdout(io.StringIO()):
        make_local_set(work / "clips")
    refs = parse_reference_file(work / "clips" / "refs.tsv")
    clips = [Clip(p, audio_seconds(p), refs.get(p.name) or refs[p.stem])
             for p in sorted((work / "clips").glob("*.wav")) if p.name in refs or p.stem in refs]
    sets = {c.path.name: ("librivox" if c.path.name.startswith("sense") else
                          "cards" if c.path.name.startswith("cards") else "raw")
            for c in clips}
    joined = build_joined(clips, 0, 1.0, work)
    clips.append(joined)
    sets[joined.path.name] = "joined"

    ct2 = ct2_base_folder(work / "ct2")
    b8 = install("base", "int8", models_dir()).path
    b32 = install("base", "fp32", models_dir()).path
    new8 = WhisperModel(b8, threads=t, encoder="onnxruntime")
    old8 = WhisperModel(b8, threads=t, encoder="onnxruntime")
    use_decoder(old8, make_session(build_variant(load_ct2(ct2 / "model.bin"), *VARIANTS[OLD],
                                                 work / "old.onnx"), t))
    m32 = WhisperModel(b32, threads=t, encoder="onnxruntime")
    fw = FWModel(str(ct2), device="cpu", compute_type="int8", cpu_threads=t, num_workers=1)
    opts = TranscribeOptions(language="en")

    def as2d(model):
        run = LongFormTranscriber(model)
        return lambda path: "".join(s.text for s in run.transcribe(load_audio(path), opts))

    def faster(path):
        with contextlib.redirect_stdout(io.StringIO()):
            return "".join(s["text"] for s in _fw_transcribe(fw, str(path), "en"))

    sides = {"as2d int8 (before)": as2d(old8), "as2d int8": as2d(new8),
             "as2d fp32": as2d(m32), "faster-whisper int8": faster}
    texts: dict[str, dict[str, str]] = {s: {} for s in sides}
    secs: dict[str, float] = {s: 0.0 for s in sides}
    for rnd in range(args.rounds):
        for c in clips:
            for side, fn in sides.items():
                t0 = time.perf_counter()
                text = fn(c.path)
                secs[side] += time.perf_counter() - t0
                texts[side].setdefault(c.path.name, text)
        print(f"round {rnd + 1} done", flush=True)

    norm = EnglishTextNormalizer()
    names = ["librivox", "cards", "raw", "all short", "joined"]
    n_words = {s: sum(len(norm(c.reference).split()) for c in clips
                      if s == sets[c.path.name] or (s == "all short" and sets[c.path.name]
                                                    != "joined")) for s in names}
    print(f"\nWER on {len(clips) - 1} clips with references + 1 joined file "
          f"({joined.path.name}); words: " + ", ".join(f"{s} {n_words[s]}" for s in names)
          + f"; {t} threads, {args.rounds} round(s)")
    print(f"  {'decoder':22}" + "".join(f"{s:>11}" for s in names) + f"{'time s':>9}")
    for side in sides:
        row = []
        for s in names:
            chosen = [c for c in clips if s == sets[c.path.name]
                      or (s == "all short" and sets[c.path.name] != "joined")]
            row.append(100 * jiwer.wer([norm(c.reference) for c in chosen],
                                       [norm(texts[side][c.path.name]) for c in chosen]))
        print(f"  {side:22}" + "".join(f"{w:10.2f}%" for w in row) + f"{secs[side]:9.1f}")
    for side in sides:
        diff = [c.path.name for c in clips
                if norm(texts[side][c.path.name]) != norm(texts["as2d fp32"][c.path.name])]
        print(f"  {side}: differs from as2d fp32 on {diff or 'no clip'}")


if __name__ == "__main__":
    main()
