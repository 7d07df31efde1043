"""A drafter that is ahead leaves the cores to the target's encoder; one that is behind does
not wait (its candidates are needed for the window being encoded).

Observed through states, never through durations: the encoder is held until the test releases
it, and a drafter's wait is run on a thread whose end the test watches.
"""

from __future__ import annotations

import threading

from as2d.runtime.transcribe.turns import EncoderTurns

ENDED = 30.0  # seconds a thread that should end is given (it ends at once when correct)
STILL = 0.3  # how long a thread that should keep waiting is watched


def hold_encoder(turns: EncoderTurns, audio: object, end: float):
    """The target encodes ``audio``'s window ending at ``end`` until ``release`` is set."""
    started, release = threading.Event(), threading.Event()

    def run():
        with turns.target_encoding(audio, end):
            started.set()
            release.wait()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    started.wait()
    return release, t


def drafter_waits(turns: EncoderTurns, audio: object, drafted_until: float,
                  stop: threading.Event | None = None) -> threading.Event:
    """A drafter step's wait on its own thread; the event is set when it returns."""
    done = threading.Event()

    def run():
        turns.wait_if_ahead(audio, drafted_until, stop or threading.Event())
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_no_target_encoder_running_means_no_wait():
    assert drafter_waits(EncoderTurns(), object(), 100.0).wait(ENDED)


def test_a_drafter_ahead_of_the_window_waits_for_the_encoder_and_no_longer():
    turns, audio = EncoderTurns(), object()
    release, t = hold_encoder(turns, audio, end=30.0)
    done = drafter_waits(turns, audio, drafted_until=60.0)
    assert not done.wait(STILL)  # waiting while the encoder runs
    release.set()
    assert done.wait(ENDED)  # and going on once it is done
    t.join()


def test_a_drafter_still_inside_the_window_keeps_drafting():
    turns, audio = EncoderTurns(), object()
    release, t = hold_encoder(turns, audio, end=30.0)
    assert drafter_waits(turns, audio, drafted_until=12.0).wait(ENDED)
    assert t.is_alive()  # it went on while the encoder was still running
    release.set()
    t.join()


def test_a_drafter_of_the_next_file_waits_for_this_files_encoder():
    turns = EncoderTurns()
    release, t = hold_encoder(turns, object(), end=30.0)
    done = drafter_waits(turns, object(), drafted_until=0.0)
    assert not done.wait(STILL)
    release.set()
    assert done.wait(ENDED)
    t.join()


def test_a_stop_ends_the_wait():
    turns, audio, stop = EncoderTurns(), object(), threading.Event()
    release, t = hold_encoder(turns, audio, end=30.0)
    done = drafter_waits(turns, audio, drafted_until=60.0, stop=stop)
    assert not done.wait(STILL)
    stop.set()
    assert done.wait(ENDED)
    assert t.is_alive()  # the stop ended it, not the encoder
    release.set()
    t.join()
