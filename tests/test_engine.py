"""The engine's front door (as2d.engine.Engine) as every face uses it: its life cycle."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from as2d.engine import Engine, EngineSpec
from as2d.runtime.audio import load_audio
from as2d.runtime.events import Note
from as2d.runtime.transcribe.longform import TranscribeOptions

CLIP = Path("/usr/share/pocketsphinx/test/data/librivox/"
            "sense_and_sensibility_01_austen_64kb-0870.wav")

pytestmark = pytest.mark.slow


def tokens(engine: Engine, audio, language: str = "en") -> list:
    return [s.tokens for s in engine.transcribe(audio, TranscribeOptions(language=language))]


def test_a_stop_with_no_run_in_progress_does_not_stop_the_next_one(models_root):
    audio = load_audio(CLIP)
    with Engine(EngineSpec(model="tiny.en", decoder="target", threads=1,
                           models_dir=models_root)) as engine:
        whole = tokens(engine, audio)
        engine.stop()  # e.g. a client that went away after its request was answered
        assert tokens(engine, audio) == whole and whole


def test_a_language_run_is_made_once_whichever_thread_asks_first(models_root):
    """The reader thread prefetches the next file while the main thread transcribes: both
    may ask for the run of a language no run exists for yet; one is made (the note says so
    once) and both use it."""
    notes: list[str] = []
    audio = load_audio(CLIP)
    spec = EngineSpec(model="base", threads=2, models_dir=models_root)
    with Engine(spec, listener=lambda e: notes.append(e.message)
                if isinstance(e, Note) else None) as engine:
        opts = TranscribeOptions(language="de")
        threads = [threading.Thread(target=engine.prefetch, args=(audio, opts))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        german = tokens(engine, audio, "de")
        assert engine.drafter_name is None  # base on German: nothing smaller saves time
    assert sum("drafter:" in n for n in notes) == 1
    with Engine(EngineSpec(model="base", decoder="target", threads=2,
                           models_dir=models_root)) as alone:
        assert tokens(alone, audio, "de") == german
