"""Many listeners on one ``as2d serve``: live sessions and HTTP requests sharing the engine.

    python bench/listeners.py --models-dir .cache/models --rounds 2 \\
        --json bench/results/listeners.json

One warm server (base, AS²D, the defaults). Each round runs, one after the other:

- **single**: one live session streams real speech (the LibriVox clips, 1.5 s of silence
  between them) over ``/v1/realtime`` at real-time pace, alone;
- **four**: four such sessions at once (each its own clip order, started 0.7 s apart), plus an
  **idle** session that streams only near-silence (a phone left on the table) with
  ``?hypotheses=1``, so every decode it caused would show as an ``as2d.hypothesis`` event, plus
  a client sending ``POST /v1/audio/transcriptions`` (a 7-s clip) every ``--http-every``
  seconds (5; the next waits for the previous answer).

Per utterance the latency is the wall time from the end of speech (the server's
``speech_stopped.audio_end_ms``, mapped to when that sample was sent) to its ``completed``
event, as ``scripts/bench_serve.py --live`` counts it. Reported: p50/p90 per session and
pooled, the four-session p90 against the single-session p90 (goal: ≤ 2×), the HTTP requests'
p50/p90, and the idle session's decodes (goal: 0). The scenarios alternate, so a machine that
gets busier slows both alike; the load average is recorded (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_serve import (  # noqa: E402 - the server helpers of the serve benchmark
    LIBRIVOX,
    free_port,
    load_average,
    pct,
    post,
    stop,
    wait_ready,
    write_result,
)

RATE = 16000
BLOCK = 512  # 32-ms appends, as bench_serve.py --live
GAP = 1.5  # seconds of silence between clips


def playlist(order: list[Path]) -> np.ndarray:
    import soundfile as sf

    parts = []
    for clip in order:
        x, rate = sf.read(str(clip), dtype="float32")
        assert rate == RATE, clip
        parts += [x, np.zeros(int(GAP * RATE), np.float32)]
    return np.concatenate(parts)


async def session(port: int, audio: np.ndarray, delay: float, hypotheses: bool = False) -> dict:
    """Stream ``audio`` at real-time pace; per item, end of speech → ``completed``."""
    import websockets

    from as2d.runtime.live.timeline import Clock

    await asyncio.sleep(delay)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    clock = Clock(1.0)
    stopped: dict[str, int] = {}
    completed: dict[str, tuple[float, str]] = {}
    counts = {"hypotheses": 0, "errors": []}
    url = f"ws://127.0.0.1:{port}/v1/realtime?intent=transcription" + \
        ("&hypotheses=1" if hypotheses else "")
    ws = await websockets.connect(url, max_size=None)
    assert json.loads(await ws.recv())["type"] == "session.created"
    await ws.send(json.dumps({"type": "session.update", "session": {
        "type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": RATE},
            "transcription": {"language": "en"}}}}}))
    assert json.loads(await ws.recv())["type"] == "session.updated"

    async def read() -> None:
        async for message in ws:
            e, wall = json.loads(message), time.perf_counter()
            kind = e["type"]
            if kind == "input_audio_buffer.speech_stopped":
                stopped[e["item_id"]] = round(e["audio_end_ms"] * RATE / 1000)
            elif kind == "conversation.item.input_audio_transcription.completed":
                completed[e["item_id"]] = (wall, e["transcript"])
            elif kind == "as2d.hypothesis":
                counts["hypotheses"] += 1
            elif kind == "error":
                counts["errors"].append(e["error"])

    reader = asyncio.ensure_future(read())
    t0 = time.perf_counter()
    for k, i in enumerate(range(0, len(pcm), BLOCK), start=1):
        end = min(len(pcm), k * BLOCK)
        await asyncio.sleep(max(0.0, t0 + (end - BLOCK) / RATE - time.perf_counter()))
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm[i:i + BLOCK].tobytes()).decode()}))
        clock.add(end, time.perf_counter())
    await ws.send(json.dumps({"type": "input_audio_buffer.end"}))
    await asyncio.wait_for(reader, 600)
    utterances = []
    for item, (wall, text) in completed.items():
        if item in stopped and text.strip():
            utterances.append({"item": item, "end_of_speech": round(stopped[item] / RATE, 3),
                               "latency": round(wall - clock.wall_of(stopped[item]), 4),
                               "text": text})
    return {"utterances": utterances, "decodes_seen": counts["hypotheses"],
            "errors": counts["errors"]}


def http_client(port: int, clip: Path, every: float, stop_at: threading.Event,
                out: list) -> None:
    """One request every ``every`` seconds (the next waits for the previous answer)."""
    while not stop_at.is_set():
        t = time.perf_counter()
        seconds, text = post(port, clip)
        out.append({"seconds": round(seconds, 4), "text": text.strip()})
        stop_at.wait(max(0.0, t + every - time.perf_counter()))


def summary(latencies: list[float]) -> dict:
    return {"n": len(latencies), "p50": round(statistics.median(latencies), 3),
            "p90": round(pct(latencies, 0.9), 3)} if latencies else {"n": 0}


async def scenario(port: int, clips: list[Path], sessions: int, extras: bool,
                   every: float) -> dict:
    orders = [clips[i:] + clips[:i] for i in range(sessions)]
    tasks = [session(port, playlist(o), 0.7 * i) for i, o in enumerate(orders)]
    http: list = []
    halt = threading.Event()
    idle_task = thread = None
    if extras:
        seconds = len(playlist(orders[0])) / RATE + 0.7 * sessions
        rng = np.random.default_rng(0)
        silence = (rng.standard_normal(int(seconds * RATE)) * 10 ** (-60 / 20)).astype(np.float32)
        idle_task = asyncio.ensure_future(session(port, silence, 0.0, hypotheses=True))
        thread = threading.Thread(target=http_client, args=(port, clips[0], every, halt, http),
                                  daemon=True)
        thread.start()
    results = await asyncio.gather(*tasks)
    doc: dict = {"sessions": []}
    for i, r in enumerate(results):
        doc["sessions"].append({"session": i, **summary([u["latency"] for u in r["utterances"]]),
                                "errors": r["errors"], "utterances": r["utterances"]})
    doc["pooled"] = summary([u["latency"] for r in results for u in r["utterances"]])
    if extras:
        halt.set()
        idle = await idle_task
        thread.join(120)
        doc["idle_session"] = {"decodes": idle["decodes_seen"], "errors": idle["errors"],
                               "utterances": len(idle["utterances"])}
        doc["http"] = {**summary([h["seconds"] for h in http]),
                       "seconds": [h["seconds"] for h in http],
                       "texts": sorted({h["text"] for h in http})}
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--http-every", type=float, default=5.0,
                    help="seconds between the HTTP requests sent during the four sessions")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    clips = sorted(LIBRIVOX.glob("*.wav"))
    if not clips:
        raise SystemExit("listeners: no LibriVox clips (pocketsphinx's test data)")
    port = free_port()
    extra = ["--models-dir", str(args.models_dir)] if args.models_dir else []
    server = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(port),
                               "-q", "--idle-timeout", "600", *extra], cwd=ROOT,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    doc: dict = {"cores": os.cpu_count(), "load_average_start": load_average(),
                 "clips": [c.name for c in clips], "gap_seconds": GAP,
                 "http_every_seconds": args.http_every, "rounds": []}
    try:
        wait_ready(server, port, "the server")
        asyncio.run(session(port, playlist(clips[:1]), 0.0))  # warm-up, not counted
        for r in range(args.rounds):
            for name, n, extras in (("single", 1, False), ("four", args.sessions, True)):
                t = time.perf_counter()
                got = asyncio.run(scenario(port, clips, n, extras, args.http_every))
                got.update(scenario=name, round=r, load_average=load_average(),
                           seconds=round(time.perf_counter() - t, 1))
                doc["rounds"].append(got)
                p = got["pooled"]
                line = f"round {r} {name:6s} pooled p50 {p['p50']:.2f} s p90 {p['p90']:.2f} s"
                if extras:
                    per = " ".join(f"{s['p90']:.2f}" for s in got["sessions"] if s["n"])
                    line += (f"; per-session p90 {per}; http p50 {got['http']['p50']:.2f} "
                             f"p90 {got['http']['p90']:.2f} (n={got['http']['n']}); idle "
                             f"decodes {got['idle_session']['decodes']}")
                print(line, f"(load {got['load_average']})", flush=True)
    finally:
        stop(server)
    single = [u["latency"] for g in doc["rounds"] if g["scenario"] == "single"
              for s in g["sessions"] for u in s["utterances"]]
    four = [g for g in doc["rounds"] if g["scenario"] == "four"]
    per_session: dict[int, list[float]] = {}
    for g in four:
        for s in g["sessions"]:
            per_session.setdefault(s["session"], []).extend(u["latency"] for u in s["utterances"])
    http = [h for g in four for h in [g["http"]]]
    doc["summary"] = {
        "single": summary(single),
        "four_per_session": {str(k): summary(v) for k, v in sorted(per_session.items())},
        "four_pooled": summary([x for v in per_session.values() for x in v]),
        "http_p50_by_round": [h.get("p50") for h in http],
        "http_p90_by_round": [h.get("p90") for h in http],
        "http": summary([x for h in http for x in h["seconds"]]),
        "idle_decodes": sum(g["idle_session"]["decodes"] for g in four),
        "errors": [e for g in doc["rounds"] for s in g["sessions"] for e in s["errors"]],
    }
    sm = doc["summary"]
    if sm["single"]["n"] and sm["four_pooled"]["n"]:
        worst = max(v["p90"] for v in sm["four_per_session"].values() if v["n"])
        sm["worst_session_p90_over_single_p90"] = round(worst / sm["single"]["p90"], 2)
    doc["load_average_end"] = load_average()
    print(json.dumps(sm, indent=1))
    write_result(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
