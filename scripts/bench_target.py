#!/usr/bin/env python
"""Target-only speed: as2d's ONNX Whisper against CTranslate2 / faster-whisper, side by side.

Both run the same weights (the CTranslate2 ``model.bin`` our bundles are converted from) at the
same precision and thread count, on the same real clips, in one process, interleaved clip by
clip so that a change of machine load hits both alike. Three figures per configuration:

* encoder: seconds per 30-s window (the same log-mel input to both);
* decoder: greedy tokens per second, timestamps on, encoder excluded (first window of each clip);
* end to end: real-time factor (audio seconds per wall second) of a whole transcription, audio
  already in memory; ours through ``as2d.runtime.transcribe.longform.LongFormTranscriber``
  (target-only), the peer through ``faster_whisper.WhisperModel.transcribe`` (greedy, no
  temperature fallback).

Each figure is the sum over clips of the per-clip median of ``--repeats`` runs, after one
warm-up run. Ratios are written so that > 1 means as2d is faster.

    python scripts/bench_target.py                  # the four configurations below
    python scripts/bench_target.py --configs tiny.en:int8:1 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

DEFAULT_CONFIGS = ["base:int8:2", "base:fp32:2", "tiny.en:int8:1", "tiny.en:int8:2"]
CT2_TYPES = {"int8": "int8", "fp32": "float32"}


def real_clips() -> list[Path]:
    data = Path("/usr/share/pocketsphinx/test/data")
    paths = sorted((data / "librivox").glob("*.wav")) + sorted((data / "cards").glob("*.wav"))
    try:
        import moonshine_voice

        assets = Path(moonshine_voice.__file__).parent / "assets"
        paths += [assets / n for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav")
                  if (assets / n).is_file()]
    except ImportError:
        pass
    if not paths:
        sys.exit("no clips: install pocketsphinx-testdata (apt) and moonshine-voice (pip)")
    return paths


@dataclass
class Timings:
    """Per clip, the runs of each measurement."""

    runs: dict = field(default_factory=dict)

    def add(self, key: str, clip: int, value: float) -> None:
        self.runs.setdefault(key, {}).setdefault(clip, []).append(value)

    def total(self, key: str) -> float:
        return sum(statistics.median(v) for v in self.runs[key].values())


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_config(name: str, precision: str, threads: int, audios, mels, repeats: int,
                 root: Path, work: Path) -> dict:
    import ctranslate2
    from faster_whisper import WhisperModel as FasterWhisper
    from helpers import ct2_folder, greedy_tokens, prompt_for

    from as2d.models.install import install
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.runtime.whisper.model import WhisperModel

    # Alone on the machine, as `as2d transcribe --decoder target` runs it: spinning pools.
    ours = WhisperModel(install(name, precision, root).path, threads=threads, spin=True)
    fw = FasterWhisper(str(ct2_folder(name, work)), device="cpu",
                       compute_type=CT2_TYPES[precision], cpu_threads=threads, num_workers=1)
    peer = fw.model  # the ctranslate2.models.Whisper inside faster-whisper
    suppress = ours.tokenizer.suppress_tokens()
    prompt = prompt_for(ours, timestamps=True)
    transcriber = LongFormTranscriber(ours)
    options = TranscribeOptions(language="en")
    t = Timings()
    tokens = {"ours": 0, "ct2": 0}

    def one_pass(record: bool) -> None:
        for i, (audio, mel) in enumerate(zip(audios, mels)):
            ctx, dt = timed(lambda: ours.encode(mel))
            record and t.add("enc_ours", i, dt)
            enc, dt = timed(lambda: peer.encode(ctranslate2.StorageView.from_array(mel)))
            record and t.add("enc_ct2", i, dt)

            toks, dt = timed(lambda: greedy_tokens(ours, ctx, timestamps=True))
            if record:
                t.add("dec_ours", i, dt)
                t.add("tok_ours", i, len(toks) + 1)  # + end of text
            res, dt = timed(lambda: peer.generate(enc, [prompt], beam_size=1, max_length=448,
                                                  suppress_tokens=suppress)[0])
            if record:
                t.add("dec_ct2", i, dt)
                t.add("tok_ct2", i, len(res.sequences_ids[0]) + 1)

            _, dt = timed(lambda: list(transcriber.transcribe(audio, options)))
            record and t.add("e2e_ours", i, dt)
            _, dt = timed(lambda: list(fw.transcribe(
                audio.samples, language="en", beam_size=1, best_of=1, temperature=0.0,
                condition_on_previous_text=True, without_timestamps=False,
                vad_filter=False)[0]))
            record and t.add("e2e_fw", i, dt)

    one_pass(record=False)  # warm-up: first-run allocations, thread pools, caches
    for _ in range(repeats):
        one_pass(record=True)
    for k in tokens:
        tokens[k] = int(t.total(f"tok_{k}"))
    audio_s = sum(a.duration for a in audios)
    n = len(mels)
    out = dict(
        config=f"{name} {precision}, {threads}t",
        enc_ours=t.total("enc_ours") / n, enc_ct2=t.total("enc_ct2") / n,
        tps_ours=tokens["ours"] / t.total("dec_ours"), tps_ct2=tokens["ct2"] / t.total("dec_ct2"),
        tok_ours=tokens["ours"], tok_ct2=tokens["ct2"],
        rtf_ours=audio_s / t.total("e2e_ours"), rtf_fw=audio_s / t.total("e2e_fw"),
        wall_ours=t.total("e2e_ours"), wall_fw=t.total("e2e_fw"),
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                    help="model:precision:threads (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clips", type=int, default=0, help="use only the first N clips")
    ap.add_argument("--models-dir", type=Path, default=None)
    args = ap.parse_args()

    from as2d.models.bundle import models_dir
    from as2d.runtime.audio import load_audio
    from as2d.runtime.whisper.features import LogMel

    paths = real_clips()[: args.clips or None]
    audios = [load_audio(p) for p in paths]
    mels = [LogMel(a, 80).window(0) for a in audios]
    audio_s = sum(a.duration for a in audios)
    print(f"{len(paths)} clips, {audio_s:.1f} s of audio; warm-up + median of {args.repeats} "
          f"runs per clip; ratios > 1: as2d faster", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.configs:
            name, precision, threads = spec.split(":")
            t0 = time.perf_counter()
            rows.append(bench_config(name, precision, int(threads), audios, mels, args.repeats,
                                     models_dir(args.models_dir), Path(tmp)))
            print(f"  {spec}: measured in {time.perf_counter() - t0:.0f} s", flush=True)

    head = ["config", "enc s/win as2d", "ct2", "×", "dec tok/s as2d", "ct2", "×",
            "RTF as2d", "faster-whisper", "×", "wall s as2d", "fw"]
    table = [head]
    for r in rows:
        table.append([r["config"],
                      f"{r['enc_ours']:.3f}", f"{r['enc_ct2']:.3f}",
                      f"{r['enc_ct2'] / r['enc_ours']:.2f}",
                      f"{r['tps_ours']:.0f}", f"{r['tps_ct2']:.0f}",
                      f"{r['tps_ours'] / r['tps_ct2']:.2f}",
                      f"{r['rtf_ours']:.1f}", f"{r['rtf_fw']:.1f}",
                      f"{r['rtf_ours'] / r['rtf_fw']:.2f}",
                      f"{r['wall_ours']:.1f}", f"{r['wall_fw']:.1f}"])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    print()
    for row in table:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                        enumerate(zip(row, widths))))
    print("\ndecoded tokens (first windows, incl. end of text): " + "; ".join(
        f"{r['config']}: as2d {r['tok_ours']}, ct2 {r['tok_ct2']}" for r in rows))


if __name__ == "__main__":
    main()
