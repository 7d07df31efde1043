"""``as2d serve --wyoming`` against ``wyoming-faster-whisper`` on the same Whisper base weights.

    python bench/wyoming.py --models-dir .cache/models --wfw-python /work/wt/wfw-venv/bin/python \\
        --rounds 3 --json bench/results/wyoming.json

Both servers run on loopback; the client is the ``wyoming`` library's ``AsyncTcpClient``, which
sends what a Home Assistant satellite sends: ``transcribe`` (language en), ``audio-start``,
100-ms ``audio-chunk``s at real-time pace (the speech, then ``--tail`` seconds of near-silence:
a satellite streams until its own VAD has heard the command end), ``audio-stop``. Per
utterance:

- **latency**: from ``audio-stop`` written to the ``transcript`` event read;
- **first event** (as2d's streaming): from ``audio-start`` to the first ``transcript-chunk``
  (words committed while the person still speaks) and to ``transcript-start``.

The peer is wyoming-faster-whisper 3.8.1 (its own virtual environment, ``--wfw-python``)
serving the CTranslate2 folder of Whisper base that ``scripts/bench_e2e.py`` joins from the
``models`` extra's packages (the weights as2d's base-int8 was converted from), int8, greedy
(``--beam-size 1``, as as2d), 2 CPU threads, language en. The clips: the LibriVox sentences and
the first 13 s of ``samples/sense_and_sensibility.wav``. The servers alternate per utterance
(the order swapped each round), so a machine that gets busier slows both alike. Words are
compared lower-cased without punctuation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This file is named after the protocol: its own folder must not hide the wyoming library.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_e2e import ct2_base_folder  # noqa: E402 - the same base weights as the e2e bench
from bench_serve import (  # noqa: E402
    LIBRIVOX,
    free_port,
    load_average,
    pct,
    stop,
    wait_ready,
    write_result,
)

RATE = 16000
CHUNK = 1600  # 100 ms


def clips(tail: float) -> list[tuple[str, bytes]]:
    """The utterances as PCM16, each followed by ``tail`` seconds of near-silence (-70 dBFS
    noise), what a satellite streams after the speech until its VAD ends the command."""
    import numpy as np
    import soundfile as sf

    noise = (np.random.default_rng(0).standard_normal(int(tail * RATE)) * 32768
             * 10 ** (-70 / 20)).astype(np.int16).tobytes()
    out = []
    x, rate = sf.read(str(ROOT / "samples" / "sense_and_sensibility.wav"), dtype="int16")
    assert rate == RATE
    out.append(("sense_and_sensibility_13s", x[: 13 * RATE].tobytes() + noise))
    for p in sorted(LIBRIVOX.glob("*.wav")):
        y, rate = sf.read(str(p), dtype="int16")
        assert rate == RATE
        out.append((p.stem, y.tobytes() + noise))
    return out


async def utterance(port: int, pcm: bytes, pace: bool) -> dict:
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    seen: dict[str, float] = {}
    text = None
    async with AsyncTcpClient("127.0.0.1", port) as client:
        async def read() -> str:
            while (event := await client.read_event()) is not None:
                seen.setdefault(event.type, time.perf_counter())
                if event.type == "transcript":
                    return event.data["text"]
                if event.type == "error":
                    raise SystemExit(f"wyoming bench: the server answered {event.data}")
            raise SystemExit("wyoming bench: the server closed without a transcript")

        reader = asyncio.ensure_future(read())
        await client.write_event(Transcribe(language="en").event())
        t0 = time.perf_counter()
        await client.write_event(AudioStart(RATE, 2, 1).event())
        step = CHUNK * 2
        for n, i in enumerate(range(0, len(pcm), step)):
            await client.write_event(AudioChunk(RATE, 2, 1, pcm[i:i + step]).event())
            if pace:
                await asyncio.sleep(max(0.0, t0 + (n + 1) * CHUNK / RATE - time.perf_counter()))
        await client.write_event(AudioStop().event())
        t_stop = time.perf_counter()
        text = await asyncio.wait_for(reader, 300)
    doc = {"latency": round(seen["transcript"] - t_stop, 4), "text": text.strip(),
           "audio_seconds": round(len(pcm) / 2 / RATE, 2)}
    if "transcript-start" in seen:
        doc["transcript_start"] = round(seen["transcript-start"] - t0, 4)
    if "transcript-chunk" in seen:
        doc["first_chunk"] = round(seen["transcript-chunk"] - t0, 4)
    return doc


def words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": round(statistics.median(values), 3),
            "p90": round(pct(values, 0.9), 3), "mean": round(statistics.mean(values), 3)} \
        if values else {"n": 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--wfw-python", default="/work/wt/wfw-venv/bin/python",
                    help="python of the virtual environment with wyoming-faster-whisper")
    ap.add_argument("--fw-cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "as2d-bench" / "ct2-whisper-base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-pace", action="store_true", help="send the audio at once")
    ap.add_argument("--tail", type=float, default=0.0,
                    help="seconds of near-silence after each utterance (a satellite's VAD "
                         "ends a command after some silence; default 0)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    ct2 = ct2_base_folder(args.fw_cache)
    http_port, as2d_port, wfw_port = free_port(), free_port(), free_port()
    extra = ["--models-dir", str(args.models_dir)] if args.models_dir else []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    as2d = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(http_port),
                             "-q", "--threads", str(args.threads), "--wyoming",
                             f"tcp://127.0.0.1:{as2d_port}", *extra], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    data = Path(os.environ.get("TMPDIR", "/tmp")) / "as2d-bench-wfw-data"
    data.mkdir(exist_ok=True)
    wfw = subprocess.Popen([args.wfw_python, "-m", "wyoming_faster_whisper", "--uri",
                            f"tcp://127.0.0.1:{wfw_port}", "--model", str(ct2), "--data-dir",
                            str(data), "--local-files-only", "--stt-library", "faster-whisper",
                            "--compute-type", "int8", "--beam-size", "1", "--cpu-threads",
                            str(args.threads), "--language", "en"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    servers = {"as2d": as2d_port, "wyoming-faster-whisper": wfw_port}
    doc: dict = {"cores": os.cpu_count(), "threads": args.threads, "paced": not args.no_pace,
                 "tail_seconds": args.tail,
                 "load_average_start": load_average(), "peer_model": str(ct2),
                 "utterances": []}
    try:
        wait_ready(as2d, http_port, "as2d serve")
        deadline = time.monotonic() + 120
        while True:  # the peer has no health endpoint: its port opens when it is ready
            try:
                asyncio.run(utterance(wfw_port, b"\0\0" * RATE, False))
                break
            except OSError:
                if wfw.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("wyoming bench: wyoming-faster-whisper did not start:\n"
                                     + (wfw.stderr.read() if wfw.poll() is not None else "")
                                     ) from None
                time.sleep(0.5)
        audio = clips(args.tail)
        for name in servers:  # warm-up (the peer loads its model on the first request)
            asyncio.run(utterance(servers[name], audio[1][1], False))
        for r in range(args.rounds):
            order = list(servers) if r % 2 == 0 else list(servers)[::-1]
            for clip, pcm in audio:
                for name in order:
                    got = asyncio.run(utterance(servers[name], pcm, not args.no_pace))
                    got.update(server=name, clip=clip, round=r)
                    doc["utterances"].append(got)
                    print(f"round {r} {name:24s} {clip:40s} {got['latency']:.3f} s "
                          f"first chunk {got.get('first_chunk', '-')}", flush=True)
    finally:
        stop(as2d)
        stop(wfw)
    u = doc["utterances"]
    by = {n: [x for x in u if x["server"] == n] for n in servers}
    doc["summary"] = {n: summary([x["latency"] for x in v]) for n, v in by.items()}
    long = {n: summary([x["latency"] for x in v if x["audio_seconds"] >= 12])
            for n, v in by.items()}
    doc["summary_13s"] = long
    a, w = doc["summary"]["as2d"], doc["summary"]["wyoming-faster-whisper"]
    doc["speedup_p50"] = round(w["p50"] / a["p50"], 2)
    doc["speedup_mean"] = round(w["mean"] / a["mean"], 2)
    doc["speedup_13s_p50"] = round(long["wyoming-faster-whisper"]["p50"]
                                   / long["as2d"]["p50"], 2)
    firsts = [x["first_chunk"] for x in by["as2d"] if "first_chunk" in x]
    doc["as2d_first_chunk"] = summary(firsts)
    doc["as2d_utterances_with_a_chunk_before_the_end"] = sum(
        1 for x in by["as2d"] if x.get("first_chunk", 1e9) < x["audio_seconds"] - args.tail)
    doc["as2d_transcript_start"] = summary([x["transcript_start"] for x in by["as2d"]
                                            if "transcript_start" in x])
    pairs = {}
    for x in u:
        pairs.setdefault((x["round"], x["clip"]), {})[x["server"]] = words(x["text"])
    same = [p["as2d"] == p["wyoming-faster-whisper"] for p in pairs.values() if len(p) == 2]
    doc["same_words"] = f"{sum(same)}/{len(same)}"
    doc["differences"] = sorted({(" ".join(p["as2d"]), " ".join(p["wyoming-faster-whisper"]))
                                 for p in pairs.values() if len(p) == 2
                                 and p["as2d"] != p["wyoming-faster-whisper"]})
    doc["load_average_end"] = load_average()
    print(json.dumps({k: v for k, v in doc.items() if k != "utterances"}, indent=1))
    write_result(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
