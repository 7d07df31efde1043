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
"""

from __future__ import annotations

import argparse
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


def post(port: int, path: Path) -> tuple[float, str]:
    """(seconds from the first byte sent to the last byte read, the text)."""
    body, ctype = multipart(path, {"model": "whisper-1", "response_format": "text"})
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


def main() -> int:
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
    server = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(port),
                               "-q", *extra, *llm], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"bench_serve: the server stopped:\n{server.stderr.read()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if json.loads(conn.getresponse().read())["status"] == "ok":
                    break
            except OSError:
                pass
            time.sleep(0.1)
        ready = time.perf_counter() - t_start
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
        import soundfile as sf

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
    finally:
        server.terminate()
        server.wait(60)

    import soundfile as sf

    doc = {"clip": str(clip), "clip_seconds": round(sf.info(str(clip)).duration, 2),
           "server_ready_seconds": round(ready, 2),
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
                   ask_process_p50=round(statistics.median(ask_processes), 3))
    print(f"clip {doc['clip_seconds']} s; server ready in {doc['server_ready_seconds']} s")
    print(f"warm server request   p50 {doc['request_p50']:.3f} s  p90 {doc['request_p90']:.3f}"
          f" s  ({doc['requests']} requests)")
    if processes:
        print(f"as2d transcribe proc  p50 {doc['process_p50']:.3f} s  p90 "
              f"{doc['process_p90']:.3f} s  ({doc['processes']} runs, interleaved)")
    print(f"{len(files)} files ({audio:.0f} s): {args.clients} clients "
          f"{doc['served_audio_per_second']} audio s/s, one as2d transcribe process "
          f"{doc['one_process_audio_per_second']} audio s/s")
    print(f"server memory {doc['rss_mb_before']} -> {doc['rss_mb_after']} MB over "
          f"{len(served)} requests")
    if asked:
        print(f"/v1/audio/ask         p50 {doc['ask_p50']:.3f} s  p90 {doc['ask_p90']:.3f} s; "
              f"as2d ask process p50 {doc['ask_process_p50']:.3f} s")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
