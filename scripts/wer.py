#!/usr/bin/env python
"""Word error rate of as2d's target-only transcription on real clips with reference texts.

The clips are the ones a fresh machine can get without a model hub: the LibriVox and "cards"
recordings of Debian's ``pocketsphinx-testdata`` (with their transcriptions) and its
``goforward.raw`` (reference from its grammar). Text is normalised with Whisper's
``EnglishTextNormalizer`` (``whisper-normalizer``) and scored with ``jiwer``, pooled over all
words, the way the field reports WER. Decoding is the CLI's: long-form transcription with
timestamps, greedy, language English.

    python scripts/wer.py                                 # base and tiny.en, int8 and fp32
    python scripts/wer.py --models base --precisions int8 -v
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = Path("/usr/share/pocketsphinx/test/data")


@dataclass
class RefClip:
    set: str
    path: Path
    reference: str


def _sphinx_transcripts(path: Path) -> dict[str, str]:
    """``<s> words </s> (id)`` lines → {id: words}."""
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            text, _, ident = line.rpartition("(")
            out[ident.strip(") ")] = text.replace("<s>", "").replace("</s>", "").strip()
    return out


def reference_clips(work: Path) -> list[RefClip]:
    clips = []
    refs = _sphinx_transcripts(DATA / "librivox" / "transcription")
    clips += [RefClip("librivox", p, refs[p.stem])
              for p in sorted((DATA / "librivox").glob("*.wav")) if p.stem in refs]
    refs = _sphinx_transcripts(DATA / "cards" / "cards.transcription")
    clips += [RefClip("cards", p, refs[p.stem])
              for p in sorted((DATA / "cards").glob("*.wav")) if p.stem in refs]
    raw = DATA / "goforward.raw"
    if raw.is_file():
        wav = work / "goforward.wav"
        try:  # headerless 16-bit 16 kHz mono; its grammar says what is spoken
            subprocess.run(["sox", "-t", "raw", "-r", "16000", "-e", "signed", "-b", "16",
                            "-c", "1", str(raw), str(wav)], check=True, capture_output=True)
            clips.append(RefClip("goforward", wav, "go forward ten meters"))
        except (OSError, subprocess.CalledProcessError):
            pass
    if not clips:
        sys.exit("no reference clips: install Debian's pocketsphinx-testdata")
    return clips


def transcribe_all(model, clips: list[RefClip]) -> tuple[list[str], float, float]:
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    transcriber = LongFormTranscriber(model)
    options = TranscribeOptions(language="en")
    texts, audio_s, wall = [], 0.0, 0.0
    for c in clips:
        audio = load_audio(c.path)
        t0 = time.perf_counter()
        texts.append("".join(s.text for s in transcriber.transcribe(audio, options)))
        wall += time.perf_counter() - t0
        audio_s += audio.duration
    return texts, audio_s, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["base", "tiny.en"])
    ap.add_argument("--precisions", nargs="+", default=["int8", "fp32"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models-dir", type=Path, default=None,
                    help="model cache (default: as2d's; converted on first use)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every hypothesis")
    args = ap.parse_args()

    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    from as2d.models.bundle import models_dir
    from as2d.models.install import install
    from as2d.runtime.whisper.model import WhisperModel

    norm = EnglishTextNormalizer()
    root = models_dir(args.models_dir)
    with tempfile.TemporaryDirectory() as tmp:
        clips = reference_clips(Path(tmp))
        sets = sorted({c.set for c in clips}, key=[c.set for c in clips].index)
        refs = [norm(c.reference) for c in clips]
        rows = []
        for name in args.models:
            for prec in args.precisions:
                bundle = install(name, prec, root)
                model = WhisperModel(bundle.path, threads=args.threads)
                hyps, audio_s, wall = transcribe_all(model, clips)
                hyps_n = [norm(h) for h in hyps]
                row = {"model": f"{name} {prec}", "all": jiwer.wer(refs, hyps_n),
                       "rtf": audio_s / wall}
                for s in sets:
                    idx = [i for i, c in enumerate(clips) if c.set == s]
                    row[s] = jiwer.wer([refs[i] for i in idx], [hyps_n[i] for i in idx])
                rows.append(row)
                if args.verbose:
                    for c, r, h in zip(clips, refs, hyps_n):
                        mark = " " if r == h else "*"
                        print(f"{mark} {name} {prec} {c.path.name}: {h!r}  (ref {r!r})")
                del model

    n_words = sum(len(r.split()) for r in refs)
    print(f"\nWER, target-only greedy, {len(clips)} clips ({n_words} reference words; "
          + ", ".join(f"{s} {sum(c.set == s for c in clips)}" for s in sets)
          + f"), {args.threads} threads")
    head = ["model", "WER all"] + [f"WER {s}" for s in sets] + ["real-time ×"]
    widths = [max(12, len(h)) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        cells = [r["model"], f"{100 * r['all']:.1f}%"] + [f"{100 * r[s]:.1f}%" for s in sets] \
            + [f"{r['rtf']:.1f}"]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))


if __name__ == "__main__":
    main()
