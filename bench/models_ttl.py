"""A model per request: memory before, with, and after a second model in ``as2d serve``.

    python bench/models_ttl.py --models-dir .cache/models --json bench/results/models_ttl.json

Starts ``as2d serve`` (base) with ``--model-ttl 5``, then with OpenAI's client sends a 7-s clip
as ``model="whisper-1"`` (the server's own model) and as ``model="tiny.en"`` (another installed
model, loaded for it), checks each answer against ``as2d transcribe --model X`` of the same clip,
and records the server's resident memory (``/proc/PID/status``) before, after the tiny.en
request, and once ``/health`` no longer lists tiny.en (the TTL passed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_serve import (  # noqa: E402 - the server helpers of the serve benchmark
    LIBRIVOX,
    free_port,
    health,
    load_average,
    rss_mb,
    stop,
    transcribe_process,
    wait_ready,
    write_result,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--ttl", type=float, default=5.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import openai

    clip = LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0870.wav"
    extra = ["--models-dir", str(args.models_dir)] if args.models_dir else []
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(port), "-q",
                               "--model-ttl", str(args.ttl), *extra], cwd=ROOT,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0,
                           timeout=600)
    doc: dict = {"ttl_seconds": args.ttl, "load_average_start": load_average()}
    try:
        wait_ready(server, port, "as2d serve")

        def ask(model: str) -> tuple[str, float]:
            t = time.perf_counter()
            with open(clip, "rb") as f:
                text = client.audio.transcriptions.create(file=f, model=model,
                                                          response_format="text")
            return str(text).strip(), round(time.perf_counter() - t, 3)

        own, doc["own_seconds"] = ask("whisper-1")
        time.sleep(1)
        doc["rss_mb_before"] = round(rss_mb(server.pid), 1)
        doc["loaded_before"] = health(port)["loaded"]
        tiny, doc["tiny_first_seconds"] = ask("tiny.en")  # loads it
        _, doc["tiny_warm_seconds"] = ask("tiny.en")
        doc["rss_mb_with_tiny"] = round(rss_mb(server.pid), 1)
        doc["loaded_with_tiny"] = health(port)["loaded"]
        t0 = time.monotonic()
        while "tiny.en-int8" in health(port)["loaded"]:
            time.sleep(0.25)
            if time.monotonic() - t0 > args.ttl + 60:
                raise SystemExit("models_ttl: tiny.en was never unloaded")
        doc["unloaded_after_seconds"] = round(time.monotonic() - t0, 2)
        time.sleep(1)
        doc["rss_mb_after_ttl"] = round(rss_mb(server.pid), 1)
        doc["loaded_after_ttl"] = health(port)["loaded"]
        doc["models_listed"] = sorted(m.id for m in client.models.list().data)
    finally:
        stop(server)
    for model, text in (("base", own), ("tiny.en", tiny)):
        _, want = transcribe_process([clip], ["--model", model, *extra])
        doc[f"{model}_same_text_as_transcribe"] = text == want.strip()
        doc[f"{model}_text"] = text
    doc["rss_drop_mb"] = round(doc["rss_mb_with_tiny"] - doc["rss_mb_after_ttl"], 1)
    doc["load_average_end"] = load_average()
    print(json.dumps(doc, indent=1))
    write_result(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
