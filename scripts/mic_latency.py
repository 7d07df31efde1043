#!/usr/bin/env python
"""Latency of live dictation: end of speech → committed text, ``as2d`` vs ``target`` decoders.

Each clip is played through the very pipeline ``as2d mic`` runs (file source at real-time pace,
Silero VAD, endpointing, growing-utterance decodes, LocalAgreement-2), once per decoder,
alternating decoders clip by clip so that both see the same machine load. Per utterance it
records the wall time from the end of the last voiced frame to the moment the utterance's last
word was committed; it prints the median and p90 per decoder, with the pooled decoding speed.

    python scripts/mic_latency.py                       # the default clips, both decoders
    python scripts/mic_latency.py --speed 1 --json out.json clip1.wav clip2.wav
    python scripts/mic_latency.py --set eval --decoders as2d,as2d:old

A decoder name followed by ``:old`` runs the session as it was before the latency work (the
final decode waits for the full ``--silence``, the tail pad is the start pad, no settle commit,
no previous-decode candidates), so old and new are measured interleaved on the same load;
``:drafted`` keeps the drafter beside decodes that have the previous decode as candidates
(``LiveOptions.drafter_with_hints``; by default they run with the target alone), and
``:tail=S`` sets the endpointer's tail (the wait before the speculative final decode); they
combine (``as2d:drafted:tail=0.05``).
``--set tune`` is the clips the settle/tail defaults were chosen on (LibriVox), ``--set eval``
clips never used to tune (cards, moonshine-voice assets).

False cuts are reported two ways: ``early`` counts pauses where the text was committed (a
settle) and the speaker went on in the same utterance; ``mid`` counts utterances that ended
(not the clip's last) with text that does not end a sentence.

Columns: latency median/p90/max over utterances; ``utt decode s``, the median wall time of a
decode of a whole utterance (speculative or final), which is the part of the latency the decoder
choice can change (the rest is the pause the endpointer waits for and any decode already
running when speech ended); pooled decoding tokens/s, acceptance and encoder seconds.

Real time is the point (latency at ``--speed 4`` measures a decoder that cannot keep up);
the default clips hold about 80 s of speech, so a run takes about three minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def default_clips() -> list[Path]:
    clips = sorted(Path("/usr/share/pocketsphinx/test/data/librivox").glob("*.wav"))
    try:
        import moonshine_voice

        assets = Path(moonshine_voice.__file__).parent / "assets"
        clips += [assets / n for n in ("beckett.wav", "two_cities.wav") if (assets / n).is_file()]
    except ImportError:
        pass
    return clips


def eval_clips() -> list[Path]:
    clips = sorted(Path("/usr/share/pocketsphinx/test/data/cards").glob("*.wav"))
    try:
        import moonshine_voice

        assets = Path(moonshine_voice.__file__).parent / "assets"
        clips += [assets / n for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav")
                  if (assets / n).is_file()]
    except ImportError:
        pass
    return clips


def percentile(xs: list[float], q: float) -> float:
    from as2d.cli.mic_display import percentile as p

    return p(xs, q)


def live_options(d: str):
    """The session options a decoder spec asks for: ``NAME[:old|:drafted|:tail=S]...``."""
    from as2d.runtime.live.endpoint import EndpointConfig
    from as2d.runtime.live.session import LiveOptions

    mods = d.split(":")[1:]
    if "old" in mods:
        if mods != ["old"]:
            sys.exit(f"mic_latency: ':old' takes no other modifier ({d!r})")
        return LiveOptions(language="en", hints=False,
                           endpoint=EndpointConfig(tail=None, settle=None))
    endpoint = EndpointConfig()
    for m in mods:
        if m.startswith("tail="):  # the tentative end's wait, seconds
            try:
                endpoint = EndpointConfig(tail=float(m[5:]))
                endpoint.validate()
            except ValueError:
                sys.exit(f"mic_latency: bad tail in {d!r}")
        elif m != "drafted":
            sys.exit(f"mic_latency: unknown decoder modifier {m!r} in {d!r}")
    # drafted: the drafter beside decodes that have a hint, too
    return LiveOptions(language="en", drafter_with_hints="drafted" in mods, endpoint=endpoint)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clips", nargs="*", type=Path)
    ap.add_argument("--decoders", default="as2d,target")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--model", default="base")
    ap.add_argument("--drafter", default="tiny.en")
    ap.add_argument("--vad", default="silero")
    ap.add_argument("--models-dir", default=os.environ.get("AS2D_MODELS_DIR"))
    ap.add_argument("--json", type=Path, help="write per-utterance figures here")
    ap.add_argument("--set", choices=("default", "tune", "eval"), default="default")
    args = ap.parse_args()

    from as2d.cli.mic_display import MicStats
    from as2d.engine import Engine, EngineSpec, SharedModels
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.live.audio_input import FileSource

    if args.clips:
        clips = args.clips
    elif args.set == "eval":
        clips = eval_clips()
    elif args.set == "tune":
        clips = [c for c in default_clips() if "librivox" in str(c)]
    else:
        clips = default_clips()
    decoders = [d.strip() for d in args.decoders.split(",") if d.strip()]
    options = {d: live_options(d) for d in decoders}  # checked before any model loads
    print(f"{len(clips)} clips: {', '.join(c.name for c in clips)}", flush=True)
    load = SharedModels(args.models_dir)  # one target for every configuration
    engines = {d: Engine(EngineSpec(model=args.model, drafter=args.drafter,
                                    decoder=d.split(":")[0], models_dir=args.models_dir,
                                    shares_cores=True), load_whisper=load)
               for d in decoders}

    cuts = {d: [0, 0] for d in decoders}  # early commits that resumed, mid-sentence ends
    hints = {d: [0, 0] for d in decoders}
    results: dict[str, list[dict]] = {d: [] for d in decoders}
    pooled: dict[str, MicStats] = {d: MicStats() for d in decoders}
    load0 = os.getloadavg()[0]
    t_start = time.perf_counter()
    for clip in clips:
        audio = load_audio(clip)
        for d in decoders:
            stats = MicStats()
            session = engines[d].live_session(FileSource(audio, args.speed), options[d],
                                              fanout(stats, pooled[d]), args.vad)
            session.start()
            session.wait()
            if session.hinted is not None:
                hints[d][0] += session.hinted.offered
                hints[d][1] += session.hinted.accepted
            for i, u in enumerate(stats.utterances):
                cuts[d][0] += u.early_commits
                last = i == len(stats.utterances) - 1
                if not last and u.text and u.text.rstrip()[-1] not in ".?!":
                    cuts[d][1] += 1
                # Utterances decoded together (the decoder was behind) count one each.
                for k, lat in enumerate(u.latencies or (u.latency,)):
                    # Utterances decoded together share one text: it is kept on the first.
                    results[d].append({"clip": clip.name, "utterance": u.utterance + k,
                                       "start": u.start, "end": u.end, "latency": lat,
                                       "decodes": u.decodes, "reason": u.reason,
                                       "merged": u.merged, "text": u.text if k == 0 else "",
                                       "early_commits": u.early_commits})
            lat = [f"{x:.2f}" for x in stats.latencies]
            print(f"{clip.name:48s} {d:6s} latencies {' '.join(lat)}", flush=True)
    for engine in engines.values():
        engine.close()
    wall = time.perf_counter() - t_start
    load1 = os.getloadavg()[0]

    print()
    print(f"speed {args.speed:g}x, {len(clips)} clips, {os.cpu_count()} cores, load average "
          f"{load0:.1f} → {load1:.1f}, {wall:.0f} s")
    print(f"{'decoder':8s} {'utts':>5s} {'median s':>9s} {'p90 s':>7s} {'max s':>7s} "
          f"{'decodes':>8s} {'utt decode s':>13s} {'tok/s':>7s} {'accept':>7s} "
          f"{'encode s':>9s} {'early':>6s} {'mid':>4s} {'hints':>10s}")
    summary = {}
    for d in decoders:
        lat = [r["latency"] for r in results[d] if r["latency"] is not None]
        s = pooled[d].summary()
        summary[d] = {"utterances": len(lat), "median": statistics.median(lat) if lat else None,
                      "p90": percentile(lat, 90) if lat else None,
                      "max": max(lat) if lat else None, **s}
        acc = f"{s['acceptance']:.2f}" if s["acceptance"] is not None else "-"
        if lat:
            whole = s["whole_utterance_decode_median"] or 0.0
            print(f"{d:8s} {len(lat):5d} {statistics.median(lat):9.2f} "
                  f"{percentile(lat, 90):7.2f} {max(lat):7.2f} {s['decodes']:8d} "
                  f"{whole:13.2f} {s['tokens_per_second']:7.1f} {acc:>7s} "
                  f"{s['encode_seconds']:9.1f} {cuts[d][0]:6d} {cuts[d][1]:4d} "
                  f"{hints[d][1]:>4d}/{hints[d][0]:<5d}")
        summary[d]["false_cuts"] = {"early_commit_resumed": cuts[d][0],
                                    "mid_sentence_ends": cuts[d][1]}
        summary[d]["hint_candidates"] = {"offered": hints[d][0], "accepted": hints[d][1]}
    # The committed text of every clip, against the first configuration's (a shorter tail must
    # not clip the last word; the decoders themselves cannot change it).
    first = decoders[0]

    def clip_texts(d: str) -> dict[str, str]:
        out: dict[str, list[str]] = {}
        for r in results[d]:
            out.setdefault(r["clip"], []).extend((r["text"] or "").split())
        return {c: " ".join(t) for c, t in out.items()}

    base_texts = clip_texts(first)
    for d in decoders[1:]:
        other = clip_texts(d)
        differ = sorted(c for c in set(base_texts) | set(other)
                        if base_texts.get(c) != other.get(c))
        summary[d]["clips_with_other_text_than"] = {"config": first, "clips": differ}
        print(f"{d}: committed text differs from {first}'s on {len(differ)} of "
              f"{len(base_texts)} clips" + (f" ({', '.join(differ)})" if differ else ""))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "utterances": results},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
