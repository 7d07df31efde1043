"""The engine's front door (as2d.engine.Engine) as every face uses it: its life cycle."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from as2d.engine import Engine, EngineSpec
from as2d.runtime.audio import load_audio
from as2d.runtime.events import Note
from as2d.runtime.transcribe.longform import TranscriptionInfo
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

# One 3-s sentence: each test is about which models run, not about the words.
CLIP = Path("/usr/share/pocketsphinx/test/data/librivox/"
            "sense_and_sensibility_01_austen_64kb-0880.wav")

pytestmark = pytest.mark.slow


def tokens(engine: Engine, audio, language: str = "en") -> list:
    return planned(engine, audio, TranscribeOptions(language=language))[0]


def planned(engine: Engine, audio, options):
    """The run's tokens and its plan (what it decoded with)."""
    info = TranscriptionInfo(None, 0.0, audio.duration)
    return [s.tokens for s in engine.transcribe(audio, options, info)], info.plan


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
        german, plan = planned(engine, audio, TranscribeOptions(language="de"))
        assert plan.drafter is None  # base on German: nothing smaller saves time
        assert engine.decoder == "as2d" and plan.decoder == "target"  # as reported
        assert plan.reason.startswith("drafter: ") and plan.language == "de"
        assert engine.loaded_drafter == "tiny.en-int8"  # loaded, unused by this run
    assert sum("drafter:" in n for n in notes) == 1
    with Engine(EngineSpec(model="base", decoder="target", threads=2,
                           models_dir=models_root)) as alone:
        assert tokens(alone, audio, "de") == german


def test_a_one_window_recording_is_decoded_by_the_target_alone_unless_a_drafter_is_named(
        models_root):
    """`--drafter auto` loads no drafter for a one-shot run of one window (its load costs more
    than it can save there): the engine plans and decodes as `--decoder target` does, says so
    once, and gives the same tokens as a drafting engine. A named drafter drafts anyway; a
    longer recording, or an engine that serves many (no length), keeps AS²D."""
    from as2d.engine import SharedModels

    audio = load_audio(CLIP)  # 3 s
    said: list[str] = []
    shared, roles = SharedModels(models_root), []

    def load(name, precision, threads, role, spin):
        roles.append(role)
        return shared(name, precision, threads, role, spin)

    spec = EngineSpec(model="base", threads=2, models_dir=models_root,
                      recording_seconds=audio.duration)
    with Engine(spec, progress=said.append, load_whisper=load) as engine:
        assert roles == ["target"], "a drafter was loaded"
        assert engine.decoder == "target" and engine.loaded_drafter is None
        assert engine.thread_plan.spin  # target-only's own plan
        alone, plan = planned(engine, audio, TranscribeOptions(language="en"))
        assert (plan.decoder, plan.drafter) == ("target", None)
        assert plan.reason.startswith("one window of audio")
    assert len(said) == 1 and "one window of audio (3.0 s)" in said[0], said
    assert "--drafter tiny.en" in said[0]
    with Engine(EngineSpec(model="base", threads=2, drafter="tiny.en", models_dir=models_root,
                           recording_seconds=audio.duration), load_whisper=load) as drafting:
        assert sorted(roles[1:]) == ["drafter", "target"]  # loaded side by side
        assert drafting.decoder == "as2d" and drafting.loaded_drafter == "tiny.en-int8"
        drafted, plan = planned(drafting, audio, TranscribeOptions(language="en"))
        assert drafted == alone and alone
        assert (plan.decoder, plan.drafter, plan.reason) == ("as2d", "tiny.en-int8", None)


def test_lone_window_is_only_for_auto_s_drafter_on_one_known_window():
    from as2d.engine import ONE_WINDOW_SECONDS, lone_window_note

    def why(**kw):
        return lone_window_note(EngineSpec(**kw))

    assert why(recording_seconds=ONE_WINDOW_SECONDS) is not None
    assert why(recording_seconds=0.5) is not None
    assert why(recording_seconds=ONE_WINDOW_SECONDS + 0.01) is None  # two windows
    assert why() is None  # an engine for many recordings (the server, the API, mic)
    assert why(recording_seconds=5, drafter="tiny.en") is None  # asked for by name
    assert why(recording_seconds=5, decoder="sd") is None
    assert why(recording_seconds=5, decoder="target") is None  # nothing to leave out


def test_a_run_reports_the_decoder_it_used(models_root):
    """The JSON outputs' ``decoder`` and ``drafter`` are what the run used (as ``--stats``
    says), not what was asked for: serial SD with a beam has no drafter's stream to verify
    beams against, so that run is the target's alone; the next greedy run drafts again."""
    audio = load_audio(CLIP)
    with Engine(EngineSpec(model="base", drafter="tiny.en", decoder="sd", threads=2,
                           models_dir=models_root)) as engine:
        assert (engine.decoder, engine.loaded_drafter) == ("sd", "tiny.en-int8")  # loaded
        beam, plan = planned(engine, audio, TranscribeOptions(language="en", beam_size=5))
        assert beam and (plan.decoder, plan.drafter) == ("target", None)
        assert "no drafter's stream" in plan.reason and plan.search_name == "beam 5"
        greedy, plan = planned(engine, audio, TranscribeOptions(language="en"))
        assert greedy and (plan.decoder, plan.drafter) == ("sd", "tiny.en-int8")
        # The plan is there before the run starts: a face reading it after a Ctrl-C that
        # came before the first window finds what the run would have used.
        info = TranscriptionInfo(None, 0.0, audio.duration)
        engine.transcribe(audio, TranscribeOptions(language="en", beam_size=5), info).close()
        assert (info.plan.decoder, info.plan.search_name) == ("target", "beam 5")  # one plan
