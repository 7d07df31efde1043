"""Where a transcription's resident memory goes, in one process: after loading the models,
after a first short file, and the peak over a long file (sampled every 50 ms), for each
configuration asked, each in a process of its own.

    python scripts/memory_probe.py LONG.wav --short samples/jfk.wav \\
        --config auto --config onnxruntime --config auto:fp32 --json bench/results/memory-X.json

A configuration is an encoder back end (``auto``, ``onnxruntime``, ``openvino``), optionally
``:fp32`` to have OpenVINO's bf16 compile the fp32 graph as 0.2.0 did (``:f16w``, the fp16-weight
graph, is the default), and optionally ``+target`` for the target alone; or
``faster-whisper=CT2_FOLDER`` (the same weights in CTranslate2's format, greedy, int8).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path


def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process in MB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) // 1024
    return out


def probe(config: str, long: str, short: str, model: str, drafter: str, threads: int) -> dict:
    """Child process: one configuration's figures."""
    import os

    if config.startswith("faster-whisper="):
        return probe_faster_whisper(config, long, short, threads)

    rest, _, alone = config.partition("+")
    backend, _, graph = rest.partition(":")
    os.environ["AS2D_ENCODER"] = backend
    import as2d
    from as2d.runtime.events import WindowDone
    from as2d.runtime.whisper import encoders

    if graph:
        encoders.OV_GRAPH_KIND["bf16"] = graph
    windows: list = []

    def listen(event) -> None:
        if isinstance(event, WindowDone):
            windows.append(event.stats)

    row = {"config": config, "imported": status()}
    t = as2d.Transcriber(model=model, drafter=drafter, threads=threads, listener=listen,
                         decoder="target" if alone == "target" else "as2d")
    row["loaded"] = status()
    row["encoder"] = t.engine.target.encoder_name
    segments, _ = t.transcribe(short, language="en")
    list(segments)
    row["after_short"] = status()
    windows.clear()
    row = _peak_over(row, lambda: list(t.transcribe(long, language="en")[0]))
    # What the long file's decoding did: the words, windows, and the decodes a fallback ran
    # and dropped (each holds its samples' caches while it runs).
    row["windows"] = len(windows)
    row["dropped_decodes"] = sum(w.dropped_decodes for w in windows)
    t.close()
    return row


def probe_faster_whisper(config: str, long: str, short: str, threads: int) -> dict:
    """faster-whisper on the same weights (``faster-whisper=CT2_FOLDER``), greedy as as2d's
    default, measured the same way."""
    from faster_whisper import WhisperModel

    row = {"config": "faster-whisper", "imported": status()}
    model = WhisperModel(config.split("=", 1)[1], device="cpu", compute_type="int8",
                         cpu_threads=threads, num_workers=1)
    row["loaded"] = status()
    kwargs = {"language": "en", "beam_size": 1, "best_of": 1, "vad_filter": False}
    list(model.transcribe(short, **kwargs)[0])
    row["after_short"] = status()
    return _peak_over(row, lambda: list(model.transcribe(long, **kwargs)[0]))


def _peak_over(row: dict, run) -> dict:
    """``row`` with the peak resident memory (sampled every 50 ms; the process's own peak
    where that is higher) and wall of ``run()``, its segments' count and a digest of their
    text (two configurations that decoded other words took other paths)."""
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], status()["VmRSS"])
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    segments = run()
    row["long_seconds"] = round(time.perf_counter() - t0, 2)
    text = "".join(s.text for s in segments)
    row["segments"] = len(segments)
    row["text_sha256"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    stop.set()
    sampler.join()
    row["after_long"] = status()
    row["peak_rss_mb"] = max(peak[0], row["after_long"]["VmHWM"])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("long")
    ap.add_argument("--short", required=True)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--model", default="base")
    ap.add_argument("--drafter", default="tiny.en")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(probe(a.child, a.long, a.short, a.model, a.drafter, a.threads)))
        return
    rows = []
    for config in a.config or ["auto"]:
        out = subprocess.run([sys.executable, __file__, a.long, "--short", a.short, "--model",
                              a.model, "--drafter", a.drafter, "--threads", str(a.threads),
                              "--child", config], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{config:>22}: loaded {row['loaded']['VmRSS']} MB, after the short file "
              f"{row['after_short']['VmRSS']} MB, peak {row['peak_rss_mb']} MB "
              f"({row['long_seconds']} s; text {row['text_sha256']}, "
              f"{row.get('dropped_decodes', '-')} fallback decodes)", flush=True)
        rows.append(row)
    if a.json:
        import soundfile as sf

        report = {"machine": platform.processor() or platform.machine(),
                  "cpu": _cpu_name(), "threads": a.threads, "model": a.model,
                  "drafter": a.drafter, "long": Path(a.long).name,
                  "long_seconds": round(sf.info(a.long).duration, 1),
                  "short": Path(a.short).name, "command": " ".join(sys.argv), "rows": rows}
        a.json.write_text(json.dumps(report, indent=1) + "\n")


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


if __name__ == "__main__":
    main()
