"""A drafter that is ahead leaves the cores to the target's encoder; one that is behind does
not wait (its candidates are needed for the window being encoded)."""

from __future__ import annotations

import threading
import time

from as2d.runtime.transcribe.turns import EncoderTurns


def waited(turns: EncoderTurns, audio: object, drafted_until: float,
           stop: threading.Event | None = None) -> float:
    t0 = time.perf_counter()
    turns.wait_if_ahead(audio, drafted_until, stop or threading.Event())
    return time.perf_counter() - t0


def encode_for(turns: EncoderTurns, audio: object, end: float, seconds: float) -> threading.Thread:
    started = threading.Event()

    def run():
        with turns.target_encoding(audio, end):
            started.set()
            time.sleep(seconds)

    t = threading.Thread(target=run)
    t.start()
    started.wait()
    return t


def test_no_target_encoder_running_means_no_wait():
    assert waited(EncoderTurns(), object(), 100.0) < 0.15


def test_a_drafter_ahead_of_the_window_waits_for_the_encoder_and_no_longer():
    turns, audio = EncoderTurns(), object()
    t = encode_for(turns, audio, end=30.0, seconds=0.3)
    assert 0.2 <= waited(turns, audio, drafted_until=60.0) < 0.6
    t.join()


def test_a_drafter_still_inside_the_window_keeps_drafting():
    turns, audio = EncoderTurns(), object()
    t = encode_for(turns, audio, end=30.0, seconds=0.3)
    assert waited(turns, audio, drafted_until=12.0) < 0.15
    t.join()


def test_a_drafter_of_the_next_file_waits_for_this_files_encoder():
    turns = EncoderTurns()
    t = encode_for(turns, object(), end=30.0, seconds=0.3)
    assert waited(turns, object(), drafted_until=0.0) >= 0.2
    t.join()


def test_a_stop_ends_the_wait():
    turns, audio, stop = EncoderTurns(), object(), threading.Event()
    t = encode_for(turns, audio, end=30.0, seconds=1.0)
    threading.Timer(0.1, stop.set).start()
    assert waited(turns, audio, drafted_until=60.0, stop=stop) < 0.5
    t.join()
