"""Where the target opens its next segment after closing one: a guess from the audio.

The closing timestamp often comes free, verified with the segment's last words; the opening one
does not (no text candidate knows it), so unless guessed exactly it costs a target pass of its
own. In continuous speech the two times are the same; after a pause the audio knows where speech
resumes (the drafter's times sit on another model's grid). On a 608-s file of clips with pauses,
Whisper base opened at the closing time at 34 of 230 boundaries, and 198 of AS²D's 985 passes
only committed an opening timestamp.

The audio's guess: past the last word's tail (:data:`TAIL`) and a pause (:data:`QUIET` under the
speech level), where sound lasts again (:data:`SOUND`), moved by the offset the target keeps
from that sound (learned from :data:`LEAD`), on the grid the target writes its times on (0.2 s
for base, learned). Which guess is offered, the same time or the audio's, is learned too. On
that file the guess named 131 of the 230 openings and the passes fell from 985 to 869; on 56
boundaries of continuous speech it named 49. A wrong guess costs nothing: the pass it rides on
was needed anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from as2d.runtime.audio import SAMPLE_RATE
from as2d.runtime.whisper.tokenizer import TIME_PRECISION

ONSET_DB = 30.0  # speech: within this many dB of the loudest frame around the closing time
LEAD = 0.1  # seconds the opening time comes before the sound, until the target says
NEAR = 25  # steps (0.5 s) within which an opening is taken for the sound's
LOOK_AHEAD = 5.0  # seconds after the closing time searched for the onset
TAIL = 0.2  # seconds of sound after the closing time that are still the last word's
QUIET = 0.1  # seconds below the speech level that make a pause
SOUND = 0.06  # seconds above it that make speech again
AROUND = 10.0  # seconds either side of the closing time whose loudest frame sets the level
SILENCE_DB = -70.0  # no quieter frame (dB of full scale) is speech, however quiet the rest
COARSE = 10  # a coarse grid, in time steps: 0.2 s
DECAY = 0.9  # of the learned counts (recent boundaries weigh more)
OFFSET_RATE = 0.2  # how far each opening moves the learned offset toward its own
SAME, ONSET = "same", "onset"
MAX_STEP = 1500  # the last time of a 30-s window, in steps
GOES_ON = -1  # the sound at a closing time goes on: no pause


def closing_time(at: float, window_start: float, timestamp_begin: int) -> list[int]:
    """``[t]``: the timestamp token of ``at`` (where the drafter closed a segment) in the window
    that starts at ``window_start``, if it falls within it; empty otherwise."""
    step = round((at - window_start) / TIME_PRECISION)
    return [timestamp_begin + step] if 0 <= step <= MAX_STEP else []


def opening_time(seq: Sequence[int], timestamp_begin: int) -> list[int]:
    """``[t]`` when ``seq`` ends with a segment's closing timestamp ``t`` (text before it): in
    continuous speech Whisper opens the next segment at the same time. Empty otherwise."""
    if len(seq) >= 2 and seq[-1] >= timestamp_begin > seq[-2]:
        return [seq[-1]]
    return []


class OpeningTimes:
    """Guesses the opening timestamp after a closing one, and learns from what the target
    writes (its habits carry across windows and files; the audio is set per file)."""

    def __init__(self, timestamp_begin: int, rate: int = SAMPLE_RATE) -> None:
        self.tb = timestamp_begin
        self.rate = rate
        self.frame = round(TIME_PRECISION * rate)  # samples a time step spans
        self._samples: np.ndarray | None = None
        # Decayed counts: committed times on the coarse grid and off it; openings each guess
        # named exactly. Priors: the coarse grid, the audio's guess first.
        self._on_grid, self._off_grid = 1.0, 0.0
        self._hits = {SAME: 1.0, ONSET: 1.0}
        # Steps from where sound resumes to the opening time the target writes (negative:
        # before), learned; and the sound found for the last guess (its closing token, step).
        self._offset = -LEAD / TIME_PRECISION
        self._sound: tuple[int, int] | None = None
        self.openings = 0  # openings the target wrote after a closing time, so far
        self.named = {SAME: 0, ONSET: 0}  # of those, the ones each guess named exactly

    def audio(self, samples: np.ndarray | None) -> None:
        """The samples of the file being decoded (16 kHz mono), or None: the same time only."""
        self._samples = samples

    @property
    def grid(self) -> int:
        """Time steps between the times the target writes: 10 (0.2 s) or 1."""
        return COARSE if self._on_grid >= 4.0 * self._off_grid else 1

    def guesses(self, context: Sequence[int], window_start: float) -> dict[str, int]:
        """``{kind: timestamp token}`` for the opening after ``context``'s closing timestamp;
        empty unless ``context`` ends with one (text before it)."""
        same = opening_time(context, self.tb)
        if not same:
            return {}
        closing = same[0]
        out = {SAME: closing}
        sound = self._resumes(closing - self.tb, window_start)
        self._sound = None if sound is None or sound == GOES_ON else (closing, sound)
        if sound == GOES_ON:  # speech goes on: the audio says the same time
            out[ONSET] = closing
        elif sound is not None:
            grid = self.grid
            step = max(closing - self.tb, int(round((sound + self._offset) / grid)) * grid)
            if step <= MAX_STEP:
                out[ONSET] = self.tb + step
        return out

    def choose(self, guesses: dict[str, int]) -> list[int]:
        """The guess to offer, ``[token]``: the kind that named more openings (the audio's on a
        tie); empty when there is none."""
        if not guesses:
            return []
        kind = max(guesses, key=lambda k: (self._hits[k], k == ONSET))
        return [guesses[kind]]

    def observe(self, guesses: dict[str, int], committed: Sequence[int]) -> None:
        """A pass committed ``committed`` after ``guesses`` (those made for its start): learn the
        grid from every time, and each guess's aim from the opening, if the pass wrote one."""
        for t in committed:
            if t >= self.tb:
                coarse = (t - self.tb) % COARSE == 0
                self._on_grid = self._on_grid * DECAY + coarse
                self._off_grid = self._off_grid * DECAY + (not coarse)
        if guesses and committed and committed[0] >= self.tb:
            opening = committed[0]
            self.openings += 1
            for kind, guess in guesses.items():  # each counted where it was made
                hit = guess == opening
                self._hits[kind] = self._hits[kind] * DECAY + hit
                self.named[kind] += hit
            if self._sound is not None and self._sound[0] == guesses.get(SAME):
                gap = opening - self.tb - self._sound[1]
                if abs(gap) <= NEAR:  # this pause's opening: how far from the sound it sits
                    self._offset += OFFSET_RATE * (gap - self._offset)
        self._sound = None

    def _resumes(self, closing: int, window_start: float) -> int | None:
        """The step where sound resumes after the step ``closing`` (window-relative),
        :data:`GOES_ON` where it does not stop, None where no speech follows (or no audio)."""
        samples = self._samples
        if samples is None:
            return None
        # Frames of one time step each, on the grid that starts at the closing time's sample.
        first = round(window_start * self.rate) + closing * self.frame
        before = min(first // self.frame, round(AROUND / TIME_PRECISION))
        after = min((len(samples) - first) // self.frame, round(AROUND / TIME_PRECISION))
        ahead = min(after, round(LOOK_AHEAD / TIME_PRECISION))
        if ahead <= 0:
            return None
        lo = first - before * self.frame
        chunk = np.asarray(samples[lo: lo + (before + after) * self.frame], np.float32)
        power = np.square(chunk.reshape(before + after, self.frame), dtype=np.float64).mean(axis=1)
        level = 10.0 * np.log10(power + 1e-10)
        floor = max(level.max() - ONSET_DB, SILENCE_DB)
        speech = level[before: before + ahead] > floor
        # Sound at the closing time is the last word's tail; sound past TAIL with no quiet is
        # speech that continues (the same time).
        quiet = _first_run(~speech, round(QUIET / TIME_PRECISION))
        if quiet is None:
            return GOES_ON if len(speech) > round(TAIL / TIME_PRECISION) else None
        if quiet > round(TAIL / TIME_PRECISION):
            return GOES_ON
        resumes = _first_run(speech[quiet:], round(SOUND / TIME_PRECISION))
        if resumes is None:
            return None
        return closing + quiet + resumes


def _first_run(mask: np.ndarray, n: int) -> int | None:
    """Where ``mask`` is first true ``n`` times in a row, or None."""
    if n <= 1:
        return int(np.argmax(mask)) if mask.any() else None
    runs = np.convolve(mask.astype(np.int32), np.ones(n, np.int32), "valid")
    hit = np.flatnonzero(runs == n)
    return int(hit[0]) if len(hit) else None
