"""The opening timestamp after a closing one, guessed from the audio (OpeningTimes).

A guess only ever changes which candidates a pass verifies, never a token: the first tests pin
the guess itself on audio whose pauses are known; the last checks on real speech with real
pauses that AS²D still commits the target-only tokens, and that the audio named openings the
same-time rule could not.
"""

from __future__ import annotations

import numpy as np
import pytest

from as2d.runtime.audio import SAMPLE_RATE, Audio, load_audio
from as2d.runtime.speculative.align import Aligner
from as2d.runtime.speculative.stream import CandidateStream
from as2d.runtime.transcribe.as2d import AS2D
from as2d.runtime.transcribe.longform import LongFormTranscriber
from as2d.runtime.transcribe.opening_times import MAX_STEP, ONSET, SAME, OpeningTimes
from as2d.runtime.transcribe.strategy import TargetOnly
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

TB = 50364  # Whisper base's first timestamp token (any value works: times are relative)


def tone(seconds: float, level: float = 0.3, seed: int = 0) -> np.ndarray:
    """Noise loud enough to be speech, for the energy to find."""
    return (np.random.default_rng(seed).standard_normal(round(seconds * SAMPLE_RATE))
            * level).astype(np.float32)


def hush(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SAMPLE_RATE), np.float32)


def text_then(closing: float) -> list[int]:
    """A context whose last segment closed at ``closing`` seconds (window-relative)."""
    return [TB, 440, 1000, TB + round(closing / 0.02)]


def times_for(samples: np.ndarray) -> OpeningTimes:
    times = OpeningTimes(TB)
    times.audio(samples)
    return times


def test_after_a_pause_the_audio_names_where_speech_starts_on_the_coarse_grid():
    # speech to 2.0 s, silence to 3.53 s, speech again: opening 0.1 s before, on 0.2 s steps
    times = times_for(np.concatenate([tone(2.0), hush(1.53), tone(2.0, seed=1)]))
    guesses = times.guesses(text_then(2.0), 0.0)
    assert guesses[SAME] == TB + 100
    assert guesses[ONSET] == TB + 170  # 3.53 - 0.1 = 3.43 → 3.4 s
    assert times.choose(guesses) == [TB + 170]  # the audio's guess first, before any evidence


def test_the_window_start_places_the_closing_time_in_the_file():
    # the same pause, 30 s into the file: times stay window-relative
    samples = np.concatenate([tone(30.0, seed=2), tone(2.0), hush(1.53), tone(2.0, seed=1)])
    guesses = times_for(samples).guesses(text_then(2.0), 30.0)
    assert guesses[ONSET] == TB + 170


def test_in_continuous_speech_the_guess_is_the_closing_time():
    times = times_for(tone(6.0))
    assert times.guesses(text_then(2.0), 0.0) == {SAME: TB + 100, ONSET: TB + 100}


def test_no_guess_without_a_closing_timestamp_and_none_before_it():
    times = times_for(tone(6.0))
    assert times.guesses([TB, 440, 1000], 0.0) == {}  # text last: no segment closed
    assert times.guesses([TB, 440, TB + 50, TB + 50], 0.0) == {}  # already opened
    assert times.guesses([TB + 10], 0.0) == {}
    # silence to the end of the look-ahead: nothing to name but the same time
    assert times_for(np.concatenate([tone(2.0), hush(8.0)])).guesses(
        text_then(2.0), 0.0) == {SAME: TB + 100}
    # no audio given: the same time only
    assert OpeningTimes(TB).guesses(text_then(2.0), 0.0) == {SAME: TB + 100}


def test_a_guess_never_goes_past_the_window():
    times = times_for(np.concatenate([tone(29.0), hush(1.5), tone(3.0)]))
    guesses = times.guesses(text_then(29.0), 0.0)
    assert guesses == {SAME: TB + 1450}  # the onset (30.4 s) is past the window's last time
    assert MAX_STEP == 1500


def test_a_model_that_writes_fine_times_gets_the_fine_grid():
    times = times_for(np.concatenate([tone(2.0), hush(1.53), tone(2.0, seed=1)]))
    assert times.grid == 10
    for step in (13, 27, 41, 55, 69, 83):  # times off the 0.2-s grid
        times.observe({}, [440, TB + step])
    assert times.grid == 1
    assert times.guesses(text_then(2.0), 0.0)[ONSET] == TB + 171  # 3.43 s, to the step


def test_the_guess_offered_is_the_one_that_has_been_right():
    times = times_for(np.concatenate([tone(2.0), hush(1.53), tone(2.0, seed=1)]))
    guesses = times.guesses(text_then(2.0), 0.0)
    for _ in range(3):  # a target that keeps the same time even after a pause
        times.observe(guesses, [guesses[SAME], 440])
    assert times.choose(guesses) == [guesses[SAME]]
    assert times.openings == 3 and times.named == {SAME: 3, ONSET: 0}
    for _ in range(5):  # and then opens where the audio says
        times.observe(guesses, [guesses[ONSET], 440])
    assert times.choose(guesses) == [guesses[ONSET]]
    # a pass that wrote no timestamp first is no opening: nothing learned
    times.observe(guesses, [440])
    assert times.openings == 8


class _DraftNothing(AS2D):
    """AS²D with a drafter that has nothing to say: every closing time is committed by a pass
    of its own, so every opening is a guess (whichever the run offers, the tokens are the
    target's)."""

    def start_early(self, mel, language, options):
        pass

    def _start_drafting(self, mel, language, options):
        self._drafting = True
        self.stream = CandidateStream()
        self.aligner = Aligner(self.stream, keys=self.keys)
        self.stream.finish()


class _DraftFirst(AS2D):
    """AS²D whose drafter finishes before the target starts (the run does not depend on how
    busy the machine is)."""

    def begin(self, mel, language, options):
        super().begin(mel, language, options)
        self.worker.join()


@pytest.mark.slow
def test_real_pauses_are_named_by_the_audio_and_the_tokens_stay_the_targets(whisper, clips):
    """Seven short real clips with 1.5 s of silence between them (26 s: one window; where a
    later window's times land is test_the_window_start_places_the_closing_time_in_the_file):
    the audio names the openings after the pauses, which the same time cannot, and AS²D
    commits exactly the target-only tokens with nothing drafted and with a real drafter."""
    names = ["sense_and_sensibility_01_austen_64kb-0880.wav", "001.wav",
             "sense_and_sensibility_01_austen_64kb-0930.wav", "002.wav", "003.wav", "004.wav",
             "005.wav"]
    by_name = {c.name: c for c in clips}
    assert set(names) <= set(by_name), "the test clips are missing"
    parts = []
    for name in names:
        parts += [load_audio(by_name[name].path).samples, hush(1.5)]
    audio = Audio(np.concatenate(parts), "paused")
    target = whisper("base", "int8", threads=2)
    drafter = whisper("tiny.en", "int8", threads=1, role="drafter")
    opts = TranscribeOptions(language="en")

    def tokens(strategy) -> list[list[int]]:
        return [s.tokens for s in LongFormTranscriber(target, strategy).transcribe(audio, opts)]

    reference = tokens(TargetOnly(target))
    alone = _DraftNothing(target, drafter)
    assert tokens(alone) == reference
    times = alone.times
    assert times.openings >= 5  # six pauses: one may fall inside a segment on some CPU
    assert times.named[ONSET] >= 2 and times.named[ONSET] > times.named[SAME]
    assert tokens(_DraftFirst(target, drafter)) == reference
