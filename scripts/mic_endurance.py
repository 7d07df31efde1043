#!/usr/bin/env python
"""Endurance of live dictation: a long replay of real speech must not drift.

Real clips (LibriVox and the moonshine-voice assets by default) are joined with 1-s pauses
into ``--minutes`` of audio and played through the very pipeline ``as2d mic`` runs, at
``--speed`` × real time. Every ``--every`` seconds it samples the input queue (seconds of audio
waiting), the decoder's queue (ended utterances waiting) and the process RSS; at the end it
prints latency, queue depth and RSS for the first, middle and last thirds, and the WER of the
saved text against ``as2d transcribe`` (target-only) of the same audio.

    python scripts/mic_endurance.py --minutes 60 --speed 1 --json hour.json   # the full hour
    python scripts/mic_endurance.py --minutes 3 --speed 2                       # a short check

The CI version of the same property is ``test_endurance_replay_keeps_up_without_drift``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--decoder", default="as2d")
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--models-dir", default=os.environ.get("AS2D_MODELS_DIR"))
    ap.add_argument("--no-reference", action="store_true", help="skip the transcribe WER")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import numpy as np
    from mic_latency import default_clips

    from as2d.cli.mic_display import MicStats
    from as2d.engine import Engine, EngineSpec
    from as2d.runtime.audio import Audio, load_audio
    from as2d.runtime.live.audio_input import FileSource
    from as2d.runtime.live.session import LiveOptions
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    clips = [load_audio(c).samples.astype(np.float32) for c in default_clips()]
    pause = np.zeros(16000, np.float32)
    parts, n, i = [], 0, 0
    while n < args.minutes * 60 * 16000:
        parts += [clips[i % len(clips)], pause]
        n += len(clips[i % len(clips)]) + len(pause)
        i += 1
    audio = np.concatenate(parts)
    engine = Engine(EngineSpec(model="base", drafter="tiny.en", decoder=args.decoder,
                               models_dir=args.models_dir, shares_cores=True))
    stats = MicStats()
    session = engine.live_session(FileSource(Audio(audio, source="joined"), args.speed),
                                  LiveOptions(language="en"), stats, "silero")
    t0 = time.perf_counter()
    session.start()
    samples = []
    while not session.wait(args.every):
        queued, finals = session.backlog()
        samples.append((time.perf_counter() - t0, queued, finals, rss_mb()))
        print(f"{samples[-1][0]:7.0f} s  input queue {queued:5.2f} s  decoder queue {finals}"
              f"  RSS {samples[-1][3]:7.1f} MB  utterances {len(stats.utterances)}",
              file=sys.stderr, flush=True)
    lat = [(u.start, x) for u in stats.utterances for x in (u.latencies or (u.latency,))
           if x is not None]
    dur = len(audio) / 16000
    rows = {}
    for name, lo, hi in (("start", 0, 1 / 3), ("middle", 1 / 3, 2 / 3), ("end", 2 / 3, 1.01)):
        ls = [x for s, x in lat if lo * dur <= s < hi * dur]
        ss = [r for r in samples if lo * samples[-1][0] <= r[0] <= hi * samples[-1][0]]
        rows[name] = {"utterances": len(ls),
                      "latency_median": statistics.median(ls) if ls else None,
                      "latency_max": max(ls) if ls else None,
                      "input_queue_max_s": max((r[1] for r in ss), default=0.0),
                      "decoder_queue_max": max((r[2] for r in ss), default=0),
                      "rss_mb": statistics.median(r[3] for r in ss) if ss else None}
    out = {"minutes": dur / 60, "speed": args.speed, "decoder": args.decoder,
           "load_average": os.getloadavg(), "thirds": rows, "error": session.error}
    if not args.no_reference:
        try:
            import jiwer
            from whisper_normalizer.english import EnglishTextNormalizer
        except ImportError:
            print("WER needs jiwer and whisper-normalizer (pip install -e '.[bench]')")
        else:
            ref = " ".join(s.text for s in engine.transcribe(
                Audio(audio, source="joined"), TranscribeOptions(language="en")))
            norm = EnglishTextNormalizer()
            out["wer_vs_transcribe"] = jiwer.wer(norm(ref), norm(session.text))
    engine.close()
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if session.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
