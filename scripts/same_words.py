"""The same words whatever the face and the thread count: one table, token for token.

Transcribes the same real clips through every face with the same options and the encoder back
end this machine's ``--encoder auto`` chose (the default), and compares every segment's tokens
against ``as2d transcribe -t 2``:

* ``as2d transcribe FILES -t 1`` and ``-t 2`` (one process each);
* ``as2d.transcribe(path)`` (the Python API, default threads);
* ``as2d batch FILES`` (a local Ray cluster, one thread per worker);
* ``as2d serve`` on loopback, each file sent with the official ``openai`` client
  (``response_format="verbose_json"``, its segments' tokens).

    python scripts/same_words.py [--models-dir DIR] [FILES...]

Prints one line a face and exits 1 if any file differs. Loopback only (127.0.0.1).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")


def clips() -> list[Path]:
    found = sorted(LIBRIVOX.glob("*.wav")) + sorted(CARDS.glob("*.wav"))
    try:
        import moonshine_voice

        assets = Path(moonshine_voice.__file__).parent / "assets"
        found += [assets / n for n in ("beckett.wav", "two_cities.wav") if (assets / n).is_file()]
    except ImportError:
        pass
    return found + sorted((ROOT / "samples").glob("*.wav"))


def tokens_of(doc: dict) -> list[list[int]]:
    return [s["tokens"] for s in doc["segments"]]


def cli(files: list[Path], out: Path, *args: str) -> dict[str, list]:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "as2d", *args, *map(str, files), "-l", "en",
                    "-f", "json", "-o", str(out), "--no-live", "-q"], check=True, cwd="/",
                   stdout=subprocess.DEVNULL)
    return {f.name: tokens_of(json.loads((out / f"{f.stem}.json").read_text()))
            for f in files}


def api(files: list[Path]) -> dict[str, list]:
    import as2d

    with as2d.Transcriber() as t:
        return {f.name: [s.tokens for s in t.transcribe(f, language="en")[0]] for f in files}


def serve(files: list[Path]) -> dict[str, list]:
    from openai import OpenAI

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--host", "127.0.0.1",
                             "--port", str(port)], cwd="/", stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=300)
        deadline = time.monotonic() + 300
        while True:
            try:
                client.models.list()
                break
            except Exception:  # noqa: BLE001 - still loading
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.5)
        out = {}
        for f in files:
            with open(f, "rb") as fh:
                r = client.audio.transcriptions.create(model="whisper-1", file=fh, language="en",
                                                       response_format="verbose_json")
            out[f.name] = [s.tokens for s in r.segments]
        return out
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models-dir", default=None)
    ap.add_argument("files", nargs="*", type=Path)
    a = ap.parse_args()
    if a.models_dir:
        os.environ["AS2D_MODELS_DIR"] = a.models_dir
    files = a.files or clips()
    work = Path(tempfile.mkdtemp(prefix="as2d-same-words-"))
    reference = cli(files, work / "t2", "transcribe", "-t", "2")
    faces = {
        "transcribe -t 1": lambda: cli(files, work / "t1", "transcribe", "-t", "1"),
        "as2d.transcribe (API)": lambda: api(files),
        "batch (Ray, 1 thread a worker)": lambda: cli(files, work / "batch", "batch"),
        "serve (openai client)": lambda: serve(files),
    }
    total = sum(len(t) for doc in reference.values() for t in doc)
    print(f"{'transcribe -t 2':32s} {len(files)} files, {total} tokens (the reference)")
    bad = 0
    for name, run in faces.items():
        got = run()
        differ = [f for f in reference if got.get(f) != reference[f]]
        bad += len(differ)
        print(f"{name:32s} differ: {len(differ)}" + (f"  {differ}" if differ else ""),
              flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
