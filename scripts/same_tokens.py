"""Token for token, two installs of as2d side by side: does a change keep every output?

Runs ``python -m as2d transcribe`` of each interpreter (each with its own as2d installed, e.g. the
release a change starts from in a venv of its own, and the working tree) over the same files, in
each configuration of a matrix (decoders, beam search, the temperature fallback, word timestamps,
the VAD filter), writes the JSON outputs and compares every segment's tokens (and words, where
they are timed). Prints one line a configuration and exits 1 if anything differs.

    python scripts/same_tokens.py --before /tmp/venv-base/bin/python --after python3 \\
        --out /tmp/same FILES...

With no FILES: the real clips of the test set (pocketsphinx-testdata, moonshine-voice's assets,
samples/), one long file joined from them, and a noisy clip that falls back to sampling.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")

# name → extra arguments (the base is `-l en -f json`)
MATRIX = {
    "as2d greedy": ["--decoder", "as2d", "--drafter", "tiny.en"],
    "sd greedy": ["--decoder", "sd", "--drafter", "tiny.en"],
    "target greedy": ["--decoder", "target"],
    "as2d beam 5": ["--decoder", "as2d", "--drafter", "tiny.en", "--beam-size", "5"],
    "target beam 5": ["--decoder", "target", "--beam-size", "5"],
    "as2d word timestamps": ["--decoder", "as2d", "--drafter", "tiny.en",
                             "--word-timestamps"],
    "as2d vad filter": ["--decoder", "as2d", "--drafter", "tiny.en", "--vad-filter"],
}
# the noisy clip, where windows fall back to sampling (whisper's schedule, best of 5)
FALLBACK = {
    "as2d fallback": ["--decoder", "as2d", "--drafter", "tiny.en", "--logprob-threshold", "-0.3"],
    "target fallback": ["--decoder", "target", "--logprob-threshold", "-0.3"],
}


def default_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(clips and a long file, the noisy clip)."""
    clips = sorted(LIBRIVOX.glob("*.wav")) + sorted(CARDS.glob("*.wav"))
    try:
        import moonshine_voice

        assets = Path(moonshine_voice.__file__).parent / "assets"
        clips += [assets / n for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav")
                  if (assets / n).is_file()]
    except ImportError:
        pass
    clips += sorted((ROOT / "samples").glob("*.wav"))
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for clip in clips:
        x, sr = sf.read(clip, dtype="float32", always_2d=True)
        if sr == 16000:
            parts += [x[:, 0], np.zeros(8000, np.float32)]
    long = folder / "joined.wav"
    sf.write(long, np.concatenate(parts), 16000)
    x, _ = sf.read(LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0870.wav", dtype="float32")
    rng = np.random.default_rng(11)
    noise = rng.standard_normal(len(x)).astype(np.float32)
    noise *= np.sqrt(np.mean(x ** 2) / np.mean(noise ** 2)) * 10 ** (5 / 20)  # -5 dB
    noisy = folder / "noisy.wav"
    sf.write(noisy, x + noise, 16000)
    return clips + [long], [noisy]


def run(python: str, files: list[Path], args: list[str], out: Path) -> tuple[dict, float]:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "as2d", "transcribe", *map(str, files), "-l", "en", "-f", "json",
           "-o", str(out), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}\nexit {proc.returncode}\n{proc.stderr[-2000:]}")
    docs = {}
    for f in files:
        doc = json.loads((out / f"{f.stem}.json").read_text())
        docs[f.name] = [(s["tokens"], [(w["word"], w["start"], w["end"])
                                       for w in s.get("words") or []])
                        for s in doc["segments"]]
    return docs, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="interpreter with the as2d to compare with")
    ap.add_argument("--after", default=sys.executable)
    ap.add_argument("--out", type=Path, default=Path("/tmp/as2d-same-tokens"))
    ap.add_argument("--only", help="run only the configurations whose name contains this")
    ap.add_argument("files", nargs="*", type=Path)
    a = ap.parse_args()
    if a.files:
        plan = [(name, args, a.files) for name, args in MATRIX.items()]
    else:
        files, noisy = default_files(a.out / "audio")
        plan = ([(name, args, files) for name, args in MATRIX.items()]
                + [(name, args, noisy) for name, args in FALLBACK.items()])
    differ = 0
    for name, args, files in plan:
        if a.only and a.only not in name:
            continue
        slug = name.replace(" ", "-")
        before, t_before = run(a.before, files, args, a.out / "before" / slug)
        after, t_after = run(a.after, files, args, a.out / "after" / slug)
        bad = [f for f in before if before[f] != after[f]]
        tokens = sum(len(t) for doc in before.values() for t, _ in doc)
        differ += len(bad)
        print(f"{name:22s} {len(files):3d} files {tokens:6d} tokens  differ: {len(bad)}"
              f"  wall {t_before:6.1f} s before, {t_after:6.1f} s after"
              + (f"  {bad}" if bad else ""), flush=True)
    print("identical" if not differ else f"{differ} file outputs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
