"""Latency of a warm ``as2d serve`` against a whole ``as2d transcribe`` process.

    python scripts/bench_serve.py                     # 11-s clip, 20 requests, 5 processes
    python scripts/bench_serve.py --rounds 50 --clip talk.wav --json out.json

A resident server pays the start-up (imports, sessions, tokenizers) once; a request pays only
reading the upload and decoding. This measures, on the same machine and the same clip:

- request → response wall time of ``POST /v1/audio/transcriptions`` (``response_format=text``)
  on a warm server, sequential requests, p50/p90;
- the whole ``as2d transcribe CLIP`` process (start to exit), p50/p90, interleaved with the
  server's rounds so that a busy machine slows both alike;
- several files sent by ``--clients`` concurrent clients (they queue for the one decoder)
  against ``as2d transcribe`` of the same files in one process: audio seconds per second;
- the server's resident memory before and after the requests.

Both answers are checked to be the same text. The default clip is the first 11 s of
``samples/sense_and_sensibility.wav``.

    python scripts/bench_serve.py --live --peer --no-basic --json out.json

``--live``: the realtime socket against ``as2d mic``. The clips ``scripts/mic_latency.py``
plays are replayed over ``/v1/realtime`` at real-time pace (PCM16, 32-ms appends, 16 kHz or
``--live-rate 24000``; each append leaves at its block's start, 32 ms before a microphone would
have it, and the clock maps its samples to that moment, so the latency is counted from when
the server could have the audio, as ``mic_latency.py`` counts from its own delivery) to a warm
server; per utterance, the latency is the wall time from
the end of speech to the ``conversation.item.input_audio_transcription.completed`` event. End
of speech is what ``mic_latency.py`` measures from: the last voiced sample of the utterance
(the server's VAD reports it as ``speech_stopped.audio_end_ms``), at the wall time that
sample was captured, mapped by the live session's own :class:`Clock` from the times the
appends were sent. ``mic_latency.py --speed 1 --decoders as2d`` then runs on the same clips
in the same run; both medians/p90 and their difference are printed. Beside ``completed``, the
time to the utterance's last ``delta`` (its last committed words on the client's screen) is
printed: that is the moment ``mic_latency.py`` times, while ``completed`` closes the turn only
once the speaker has been silent for the turn's silence (0.5 s, as OpenAI's server VAD), since
speech that resumes before then continues the same item.

``--peer``: the same transcription requests against faster-whisper on the same Whisper base
weights (the CTranslate2 folder ``scripts/bench_e2e.py`` joins from the ``models`` extra),
int8, the same thread count, greedy (``beam_size=1``, whisper's temperature fallback as
ours), VAD off: ``faster-whisper-server`` (the package of that name on the package index,
run from ``--peer-python``, a separate virtual environment) when it is installed, else the
peer harness below (faster-whisper's ``WhisperModel`` loaded once in a small FastAPI app on
loopback). Requests alternate between the two servers; p50/p90 of each and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # mic_latency's clips, bench_e2e's CT2 folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def multipart(path: Path, fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = b""
    for k, v in fields.items():
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                ).encode()
    out += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{path.name}"\r\n\r\n').encode() + path.read_bytes() + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def post(port: int, path: Path, fmt: str = "text") -> tuple[float, str]:
    """(seconds from the first byte sent to the last byte read, the text)."""
    body, ctype = multipart(path, {"model": "whisper-1", "response_format": fmt})
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/audio/transcriptions", body=body,
                 headers={"Content-Type": ctype})
    r = conn.getresponse()
    text = r.read().decode()
    seconds = time.perf_counter() - t0
    conn.close()
    if r.status != 200:
        raise SystemExit(f"bench_serve: the server answered {r.status}: {text}")
    return seconds, text


def ask(port: int, path: Path, question: str) -> float:
    body, ctype = multipart(path, {"question": question})
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/audio/ask", body=body, headers={"Content-Type": ctype})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    if r.status != 200:
        raise SystemExit(f"bench_serve: /v1/audio/ask answered {r.status}: {text}")
    return time.perf_counter() - t0


def ask_process(path: Path, question: str, llm: str, extra: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "as2d", "ask", str(path), question, "-q",
                        "--no-live", "--llm", llm, *extra], capture_output=True, text=True,
                       cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"bench_serve: as2d ask failed:\n{p.stderr}")
    return time.perf_counter() - t0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def transcribe_process(files: list[Path], extra: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "as2d", "transcribe", *map(str, files), "-q",
                        "--no-live", *extra], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"bench_serve: as2d transcribe failed:\n{p.stderr}")
    return seconds, p.stdout


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    i = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[i]


def wait_ready(proc: subprocess.Popen, port: int, what: str, path: str = "/health") -> None:
    """Until ``GET path`` answers 200 (and, for as2d, says ``ok`` rather than ``loading``)."""
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise SystemExit(f"bench_serve: {what} stopped:\n{err}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            if r.status == 200 and json.loads(body).get("status", "ok") == "ok":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def health(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def write_result(path: Path | None, doc: dict) -> None:
    """A benchmark's result document, written to ``path`` (its folder made) if one is given:
    the one JSON layout of every serve benchmark's file."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- the live socket against `as2d mic` ---------------------------------------------------------
LIVE_BLOCK = 512  # samples at 16 kHz per append (32 ms): the block `as2d mic`'s file source plays


async def replay(port: int, path: Path, rate: int) -> dict:
    """Play ``path`` over ``/v1/realtime`` at real-time pace; per utterance (item), the seconds
    from the end of speech to its ``completed`` event, and its transcript."""
    import base64

    import numpy as np
    import soxr
    import websockets

    from as2d.runtime.audio import SAMPLE_RATE, load_samples
    from as2d.runtime.live.timeline import Clock

    x = load_samples(path)
    pcm = x if rate == SAMPLE_RATE else soxr.resample(x, SAMPLE_RATE, rate)
    pcm = (np.clip(pcm, -1, 1) * 32767).astype("<i2")
    step = LIVE_BLOCK * rate // SAMPLE_RATE
    clock = Clock(1.0)  # maps a 16-kHz sample to the wall time it was captured (sent) at
    stopped: dict[str, int] = {}  # item → end of speech (16-kHz sample)
    completed: dict[str, tuple[float, str]] = {}  # item → (wall time received, transcript)
    last_delta: dict[str, float] = {}  # item → wall time its last committed words arrived
    errors: list[dict] = []
    url = f"ws://127.0.0.1:{port}/v1/realtime?intent=transcription"
    while health(port).get("busy"):  # the previous clip's session is letting go of the slot
        await asyncio.sleep(0.1)

    def take(event: dict, wall: float) -> None:
        kind = event["type"]
        if kind == "input_audio_buffer.speech_stopped":
            stopped[event["item_id"]] = round(event["audio_end_ms"] * SAMPLE_RATE / 1000)
        elif kind == "conversation.item.input_audio_transcription.delta":
            last_delta[event["item_id"]] = wall
        elif kind == "conversation.item.input_audio_transcription.completed":
            completed[event["item_id"]] = (wall, event["transcript"])
        elif kind == "error":
            errors.append(event)

    ws = await websockets.connect(url, max_size=None)
    first = json.loads(await ws.recv())
    assert first["type"] == "session.created", first
    await ws.send(json.dumps({"type": "session.update", "session": {
        "type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": rate},
            "transcription": {"language": "en"}}}}}))
    updated = json.loads(await ws.recv())
    assert updated["type"] == "session.updated", updated

    async def read() -> None:
        async for message in ws:
            take(json.loads(message), time.perf_counter())

    reader = asyncio.ensure_future(read())
    t0 = time.perf_counter()
    n16 = len(x)
    for k, i in enumerate(range(0, len(pcm), step), start=1):
        end16 = min(n16, k * LIVE_BLOCK)
        await asyncio.sleep(max(0.0, t0 + (end16 - LIVE_BLOCK) / SAMPLE_RATE
                                - time.perf_counter()))
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm[i:i + step].tobytes()).decode()}))
        clock.add(end16, time.perf_counter())
    await ws.send(json.dumps({"type": "input_audio_buffer.end"}))
    await asyncio.wait_for(reader, 600)
    if errors:
        raise SystemExit(f"bench_serve: the realtime session answered an error: {errors[0]}")
    utterances = []
    for item, (wall, text) in completed.items():
        # An utterance with no words has no latency (as in mic_latency, which counts only
        # utterances that committed text).
        if item in stopped and text.strip():
            end = clock.wall_of(stopped[item])
            utterances.append({"clip": path.name, "item": item, "end_of_speech":
                               round(stopped[item] / SAMPLE_RATE, 3),
                               "latency": round(wall - end, 4),
                               # the last words on the client's screen: what mic_latency.py
                               # times (`completed` waits for the turn's 0.5-s silence)
                               "text_latency": round(last_delta.get(item, wall) - end, 4),
                               "text": text})
    return {"utterances": utterances}


def live_section(args, port: int, tmp: Path) -> dict:
    import mic_latency

    clips = args.live_clips or mic_latency.default_clips()
    if not clips:
        raise SystemExit("bench_serve: no clips for --live (pocketsphinx's LibriVox clips or "
                         "moonshine-voice's assets); give some with --live-clips")
    print(f"live: {len(clips)} clips over the realtime socket at {args.live_rate} Hz",
          flush=True)
    load0 = load_average()
    # Warm-up: one session on the first clip, not measured (the server is otherwise warm).
    asyncio.run(replay(port, clips[0], args.live_rate))
    served = []
    for clip in clips:
        got = asyncio.run(replay(port, clip, args.live_rate))["utterances"]
        served += got
        lat = " ".join(f"{u['latency']:.2f}" for u in got)
        print(f"  {clip.name:48s} serve latencies {lat}", flush=True)
    mic_json = tmp / "mic_latency.json"
    models = ["--models-dir", str(args.models_dir)] if args.models_dir else []
    print("live: scripts/mic_latency.py --speed 1 --decoders as2d on the same clips", flush=True)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "mic_latency.py"), "--speed",
                        "1", "--decoders", "as2d", "--json", str(mic_json), *models,
                        *map(str, clips)], cwd=ROOT, text=True, capture_output=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_serve: mic_latency.py failed:\n{p.stderr[-3000:]}")
    mic = [u for u in json.loads(mic_json.read_text())["utterances"]["as2d"]
           if u["latency"] is not None]
    for line in p.stdout.splitlines():
        if " latencies " in line:
            print("  " + line.replace(" as2d   latencies ", " mic latencies   "), flush=True)
    load1 = load_average()
    sl, ml = [u["latency"] for u in served], [u["latency"] for u in mic]
    tl = [u["text_latency"] for u in served]
    doc = {"clips": [c.name for c in clips], "rate": args.live_rate,
           "append_ms": LIVE_BLOCK * 1000 // 16000,
           "serve_utterances": len(sl), "mic_utterances": len(ml),
           "serve_median": round(statistics.median(sl), 3),
           "serve_p90": round(mic_latency.percentile(sl, 90), 3),
           "serve_text_median": round(statistics.median(tl), 3),
           "serve_text_p90": round(mic_latency.percentile(tl, 90), 3),
           "mic_median": round(statistics.median(ml), 3),
           "mic_p90": round(mic_latency.percentile(ml, 90), 3),
           "load_average_before": load0, "load_average_after": load1,
           "serve": served,
           "mic": [{k: u[k] for k in ("clip", "utterance", "end", "latency", "text")}
                   for u in mic]}
    doc["median_difference"] = round(doc["serve_median"] - doc["mic_median"], 3)
    doc["p90_difference"] = round(doc["serve_p90"] - doc["mic_p90"], 3)
    doc["text_median_difference"] = round(doc["serve_text_median"] - doc["mic_median"], 3)
    doc["text_p90_difference"] = round(doc["serve_text_p90"] - doc["mic_p90"], 3)
    return doc


# -- the peer: faster-whisper behind an HTTP server ----------------------------------------------
def peer_harness(port: int, model_dir: str, threads: int) -> None:
    """PEER HARNESS (used only when faster-whisper-server is not installed): faster-whisper's
    ``WhisperModel`` loaded once, answering ``POST /v1/audio/transcriptions`` with OpenAI's
    ``json``, one request at a time, on loopback. Settings as the server peer's: int8,
    ``threads`` CPU threads, greedy, VAD off, whisper's temperature fallback."""
    import threading as _threading

    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from faster_whisper import WhisperModel

    model = WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=threads,
                         num_workers=1)
    one = _threading.Lock()
    app = FastAPI()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    async def transcriptions(request):
        form = await request.form()
        upload = form["file"]

        def run() -> str:
            with one:
                segments, _ = model.transcribe(upload.file, beam_size=1, vad_filter=False)
                return "".join(s.text for s in segments)

        text = await asyncio.get_running_loop().run_in_executor(None, run)
        return JSONResponse({"text": text})

    # The class itself, not the string this module's annotations would be: FastAPI looks
    # names up among the module's globals, and these imports are local to the harness.
    transcriptions.__annotations__["request"] = Request
    app.post("/v1/audio/transcriptions")(transcriptions)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def start_peer(args, tmp: Path, threads: int) -> tuple[subprocess.Popen, int, str]:
    """(process, port, which) of the faster-whisper peer, ready."""
    from bench_e2e import ct2_base_folder

    model_dir = str(args.fw_model or ct2_base_folder(args.fw_cache))
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    python = args.peer_python
    have_server = python and Path(python).is_file() and subprocess.run(
        [python, "-c", "import faster_whisper_server"], capture_output=True).returncode == 0
    if have_server:
        ver = subprocess.run([python, "-c", "from importlib.metadata import version; "
                              "print(version('faster-whisper-server'), "
                              "version('faster-whisper'), version('ctranslate2'))"],
                             capture_output=True, text=True).stdout.split()
        config = tmp / "fws.yaml"
        # The server takes a model folder and WhisperModel/transcribe options from a config.
        config.write_text(json.dumps({"models": [{
            "name": "whisper-1", "path": model_dir,
            "model_options": {"device": "cpu", "compute_type": "int8", "cpu_threads": threads,
                              "num_workers": 1},
            "transcribe_options": {"beam_size": 1, "vad_filter": False}}]}))  # JSON is YAML
        cmd = [python, "-m", "faster_whisper_server", "--config", str(config), "--host",
               "127.0.0.1", "--port", str(port)]
        which = (f"faster-whisper-server {ver[0]} (faster-whisper {ver[1]}, ctranslate2 "
                 f"{ver[2]})") if len(ver) == 3 else "faster-whisper-server"
    else:
        cmd = [sys.executable, __file__, "--peer-harness", str(port), model_dir, str(threads)]
        import faster_whisper

        which = f"peer harness in scripts/bench_serve.py (faster-whisper " \
                f"{faster_whisper.__version__})"
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_ready(proc, port, which)
    return proc, port, which


def peer_section(args, port: int, clip: Path, tmp: Path) -> dict:
    from as2d.runtime.sessions import cpu_count

    threads = args.threads or cpu_count()
    proc, peer_port, which = start_peer(args, tmp, threads)
    print(f"peer: {which}, int8, {threads} threads, greedy, VAD off", flush=True)
    try:
        load0 = load_average()
        for _ in range(2):  # the peer loads its model on the first request
            _, ours_text = post(port, clip, "json")
            _, peer_text = post(peer_port, clip, "json")
        ours, peer = [], []
        for _ in range(args.rounds):
            ours.append(post(port, clip, "json")[0])
            peer.append(post(peer_port, clip, "json")[0])
        load1 = load_average()
    finally:
        stop(proc)
    doc = {"peer": which, "threads": threads, "clip": str(clip), "requests": len(ours),
           "response_format": "json",
           "as2d_p50": round(statistics.median(ours), 3), "as2d_p90": round(pct(ours, 0.9), 3),
           "peer_p50": round(statistics.median(peer), 3), "peer_p90": round(pct(peer, 0.9), 3),
           "as2d_text": json.loads(ours_text)["text"], "peer_text": json.loads(peer_text)["text"],
           "load_average_before": load0, "load_average_after": load1}
    doc["same_text"] = doc["as2d_text"].strip() == doc["peer_text"].strip()
    doc["p50_ratio"] = round(doc["peer_p50"] / doc["as2d_p50"], 2)
    return doc


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--peer-harness":
        peer_harness(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clip", type=Path, help="audio clip (default: 11 s of the sample)")
    ap.add_argument("--rounds", type=int, default=20, help="server requests (after 2 warm-ups)")
    ap.add_argument("--processes", type=int, default=5, help="whole as2d transcribe runs")
    ap.add_argument("--clients", type=int, default=4, help="concurrent clients for the folder")
    ap.add_argument("--folder", type=Path, default=LIBRIVOX,
                    help="files for the concurrent run (default: the LibriVox clips)")
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--llm", default=None,
                    help="also load this answering model and time /v1/audio/ask against "
                         "whole `as2d ask` processes")
    ap.add_argument("--question", default="Who had leisure to consider?")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--no-basic", action="store_true",
                    help="skip the warm-server / whole-process / concurrent / memory part")
    ap.add_argument("--live", action="store_true",
                    help="the realtime socket against scripts/mic_latency.py on its clips")
    ap.add_argument("--live-clips", type=Path, nargs="+", default=None,
                    help="clips for --live (default: mic_latency.py's)")
    ap.add_argument("--live-rate", type=int, choices=(16000, 24000), default=16000,
                    help="PCM16 rate sent over the socket (default 16000)")
    ap.add_argument("--peer", action="store_true",
                    help="the same requests against faster-whisper's server (or the harness)")
    ap.add_argument("--peer-python", default=os.environ.get("AS2D_PEER_PYTHON",
                                                            "/tmp/fws/bin/python"),
                    help="python of a virtual environment with faster-whisper-server "
                         "(default /tmp/fws/bin/python; absent: the peer harness)")
    ap.add_argument("--fw-model", type=Path, default=None,
                    help="CTranslate2 folder for the peer (default: bench_e2e.py's base)")
    ap.add_argument("--fw-cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "as2d-bench" / "ct2-whisper-base")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="as2d-bench-serve-"))
    clip = args.clip
    if clip is None:
        import soundfile as sf

        x, rate = sf.read(str(ROOT / "samples" / "sense_and_sensibility.wav"), dtype="int16")
        clip = tmp / "clip11.wav"
        sf.write(str(clip), x[: 11 * rate], rate, subtype="PCM_16")
    extra = (["--models-dir", str(args.models_dir)] if args.models_dir else []) + \
        (["--threads", str(args.threads)] if args.threads else [])

    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t_start = time.perf_counter()
    llm = ["--llm", args.llm] if args.llm else []
    doc: dict = {"cores": os.cpu_count(), "load_average_start": load_average()}
    server = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(port),
                               "-q", *extra, *llm], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(server, port, "the server")
        doc["server_ready_seconds"] = round(time.perf_counter() - t_start, 2)
        if not args.no_basic:
            doc.update(basic(args, port, server, clip, extra))
        if args.peer:
            doc["peer"] = peer_section(args, port, clip, tmp)
        if args.live:
            doc["live"] = live_section(args, port, tmp)
    finally:
        stop(server)
    doc["load_average_end"] = load_average()

    print(f"server ready in {doc['server_ready_seconds']} s; load average "
          f"{' '.join(map(str, doc['load_average_start']))} at the start, "
          f"{' '.join(map(str, doc['load_average_end']))} at the end ({doc['cores']} cores)")
    if not args.no_basic:
        print_basic(doc)
    if args.peer:
        p = doc["peer"]
        print(f"peer: {p['peer']}")
        print(f"  as2d serve      p50 {p['as2d_p50']:.3f} s  p90 {p['as2d_p90']:.3f} s")
        print(f"  faster-whisper  p50 {p['peer_p50']:.3f} s  p90 {p['peer_p90']:.3f} s  "
              f"({p['requests']} requests each, alternating; peer/as2d p50 "
              f"{p['p50_ratio']:.2f}x)")
        print(f"  same text: {p['same_text']}")
    if args.live:
        v = doc["live"]
        print(f"live ({len(v['clips'])} clips, {v['rate']} Hz, {v['append_ms']}-ms appends): "
              "end of speech -> completed")
        print(f"  as2d serve (socket)  median {v['serve_median']:.3f} s  p90 "
              f"{v['serve_p90']:.3f} s  ({v['serve_utterances']} utterances)")
        print(f"  as2d mic             median {v['mic_median']:.3f} s  p90 "
              f"{v['mic_p90']:.3f} s  ({v['mic_utterances']} utterances)")
        print(f"  difference           median {v['median_difference'] * 1000:+.0f} ms  p90 "
              f"{v['p90_difference'] * 1000:+.0f} ms")
        print(f"  serve, last delta    median {v['serve_text_median']:.3f} s  p90 "
              f"{v['serve_text_p90']:.3f} s  (the words on screen: "
              f"{v['text_median_difference'] * 1000:+.0f} / "
              f"{v['text_p90_difference'] * 1000:+.0f} ms against mic)")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return 0


def basic(args, port: int, server: subprocess.Popen, clip: Path, extra: list[str]) -> dict:
    """Warm requests against whole processes, concurrent clients, memory, ask."""
    import soundfile as sf

    for _ in range(2):
        _, served_text = post(port, clip)
    rss0 = rss_mb(server.pid)
    served, processes = [], []
    every = max(1, args.rounds // max(1, args.processes))
    for i in range(args.rounds):
        seconds, text = post(port, clip)
        assert text == served_text
        served.append(seconds)
        if i % every == every - 1 and len(processes) < args.processes:
            seconds, cli_text = transcribe_process([clip], extra)
            processes.append(seconds)
            if cli_text != served_text:
                raise SystemExit("bench_serve: the server and as2d transcribe disagree:\n"
                                 f"{served_text!r}\n{cli_text!r}")
    rss1 = rss_mb(server.pid)

    files = sorted(args.folder.glob("*.wav"))
    audio = sum(sf.info(str(f)).duration for f in files)
    queue = list(files)
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if not queue:
                    return
                f = queue.pop()
            post(port, f)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    concurrent = time.perf_counter() - t0
    one_process, _ = transcribe_process(files, extra)
    asked, ask_processes = [], []
    if args.llm:
        for i in range(max(1, args.rounds // 2)):
            asked.append(ask(port, clip, args.question))
            if i % 2 == 1 and len(ask_processes) < args.processes:
                ask_processes.append(ask_process(clip, args.question, args.llm, extra))

    doc = {"clip": str(clip), "clip_seconds": round(sf.info(str(clip)).duration, 2),
           "request_p50": round(statistics.median(served), 3),
           "request_p90": round(pct(served, 0.9), 3), "requests": len(served),
           "process_p50": round(statistics.median(processes), 3) if processes else None,
           "process_p90": round(pct(processes, 0.9), 3) if processes else None,
           "processes": len(processes),
           "folder_files": len(files), "folder_audio_seconds": round(audio, 1),
           "clients": args.clients,
           "served_audio_per_second": round(audio / concurrent, 2),
           "one_process_audio_per_second": round(audio / one_process, 2),
           "rss_mb_before": round(rss0, 1), "rss_mb_after": round(rss1, 1)}
    if asked:
        doc.update(ask_p50=round(statistics.median(asked), 3), ask_p90=round(pct(asked, 0.9), 3),
                   ask_requests=len(asked),
                   ask_process_p50=(round(statistics.median(ask_processes), 3)
                                    if ask_processes else None),
                   ask_processes=len(ask_processes))
    return doc


def print_basic(doc: dict) -> None:
    print(f"clip {doc['clip_seconds']} s")
    print(f"warm server request   p50 {doc['request_p50']:.3f} s  p90 {doc['request_p90']:.3f}"
          f" s  ({doc['requests']} requests)")
    if doc["processes"]:
        print(f"as2d transcribe proc  p50 {doc['process_p50']:.3f} s  p90 "
              f"{doc['process_p90']:.3f} s  ({doc['processes']} runs, interleaved)")
    print(f"{doc['folder_files']} files ({doc['folder_audio_seconds']:.0f} s): "
          f"{doc['clients']} clients {doc['served_audio_per_second']} audio s/s, one as2d "
          f"transcribe process {doc['one_process_audio_per_second']} audio s/s")
    print(f"server memory {doc['rss_mb_before']} -> {doc['rss_mb_after']} MB over "
          f"{doc['requests']} requests")
    if "ask_p50" in doc:
        line = (f"/v1/audio/ask         p50 {doc['ask_p50']:.3f} s  p90 {doc['ask_p90']:.3f} s"
                f"  ({doc['ask_requests']} requests)")
        if doc["ask_processes"]:
            line += (f"; as2d ask process p50 {doc['ask_process_p50']:.3f} s "
                     f"({doc['ask_processes']} runs)")
        print(line)


if __name__ == "__main__":
    sys.exit(main())
