"""Word timestamps of as2d against faster-whisper's ``word_timestamps=True`` on the same weights.

Both run Whisper base (int8) greedily on the same clips. Words are paired by text (the two
transcripts are aligned word by word; only equal words count) and the absolute differences of
their start and end times are summarised. The cost is measured too: as2d's whole run with and
without word timestamps, interleaved rounds, median and spread.

    python scripts/word_timestamps_vs_faster_whisper.py [--rounds 3] [--decoder target] CLIPS...
"""

from __future__ import annotations

import argparse
import difflib
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def norm(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


def ours(model, path: str, word_timestamps: bool, decoder=None):
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    audio = load_audio(path)
    t0 = time.perf_counter()
    segs = list(LongFormTranscriber(model, decoder).transcribe(
        audio, TranscribeOptions(language="en", word_timestamps=word_timestamps)))
    return segs, time.perf_counter() - t0


def theirs(fw, path: str):
    segs, _ = fw.transcribe(path, language="en", beam_size=1, word_timestamps=True,
                            temperature=0.0, vad_filter=False)
    return [(w.word, w.start, w.end) for s in segs for w in s.words]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("clips", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models-dir", default=".cache/models")
    args = ap.parse_args()

    from faster_whisper import WhisperModel as FW
    from helpers import ct2_folder

    from as2d.loading import load_whisper

    model = load_whisper("base", "int8", args.models_dir, threads=args.threads)
    fw = FW(str(ct2_folder("base", Path(tempfile.gettempdir()) / "as2d-ct2")), device="cpu",
            compute_type="int8", cpu_threads=args.threads)

    d_start, d_end = [], []
    print("| clip | words (paired/ours) | median abs Δstart ms | median abs Δend ms |")
    print("|---|---|---|---|")
    for clip in args.clips:
        segs, _ = ours(model, clip, True)
        a = [(w.word, w.start, w.end) for s in segs for w in s.words]
        b = theirs(fw, clip)
        sm = difflib.SequenceMatcher(a=[norm(w) for w, *_ in a], b=[norm(w) for w, *_ in b],
                                     autojunk=False)
        ds, de = [], []
        for blk in sm.get_matching_blocks():
            for k in range(blk.size):
                wa, wb = a[blk.a + k], b[blk.b + k]
                ds.append(abs(wa[1] - wb[1]) * 1000)
                de.append(abs(wa[2] - wb[2]) * 1000)
        d_start += ds
        d_end += de
        print(f"| {Path(clip).name} | {len(ds)}/{len(a)} | {statistics.median(ds):.0f} | "
              f"{statistics.median(de):.0f} |")
    print(f"| **all** | {len(d_start)} | {statistics.median(d_start):.0f} | "
          f"{statistics.median(d_end):.0f} |")
    both = sorted(d_start + d_end)
    print(f"\nstart+end: median {statistics.median(both):.0f} ms, "
          f"p90 {both[int(0.9 * (len(both) - 1))]:.0f} ms, max {both[-1]:.0f} ms")

    # Cost: the same run with and without word timestamps, interleaved; and the time spent in
    # the alignment itself (its share of the run with words: less noisy on a shared machine).
    from as2d.runtime.whisper.alignment import WordAligner

    spent = [0.0]
    align = WordAligner.align

    def timed(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return align(self, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t0

    WordAligner.align = timed
    print("\n| clip | run without (s) | run with (s) | extra | alignment share of the run |")
    print("|---|---|---|---|---|")
    for clip in args.clips:
        ours(model, clip, True)  # warm: the alignment session is made once per process
        t_no, t_yes, share = [], [], []
        for _ in range(args.rounds):
            t_no.append(ours(model, clip, False)[1])
            spent[0] = 0.0
            t_yes.append(ours(model, clip, True)[1])
            share.append(spent[0] / t_yes[-1])
        mn, my = statistics.median(t_no), statistics.median(t_yes)
        print(f"| {Path(clip).name} | {mn:.2f} ({min(t_no):.2f}–{max(t_no):.2f}) | "
              f"{my:.2f} ({min(t_yes):.2f}–{max(t_yes):.2f}) | {100 * (my - mn) / mn:+.1f}% | "
              f"{100 * statistics.median(share):.1f}% ({100 * min(share):.1f}–"
              f"{100 * max(share):.1f}%) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
