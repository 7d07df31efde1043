"""Endpointing: where utterances start and end, from per-frame speech probabilities.

A pure state machine (no threads, no audio, no clock) so that it can be tested frame by frame
and replayed offline. It follows Silero's own streaming rules, tuned for dictation:

* **Hysteresis.** A frame at or above ``threshold`` is speech; once inside an utterance, frames
  stay speech down to ``neg_threshold`` (default ``threshold - 0.15``), so a soft syllable does
  not split a word.
* **Minimum speech.** An utterance exists only once it holds ``min_speech`` seconds of voiced
  frames; a cough or a click that ends earlier is dropped without a decode.
* **End of utterance.** ``min_silence`` seconds below ``neg_threshold`` close it. Long before
  that, once ``tail`` seconds of silence are in (a few frames), a *tentative end* is announced:
  the caller may decode the utterance right away, because its final audio (speech plus
  ``tail``) is complete; if the silence holds, that decode is the final one. Once ``settle``
  seconds of silence are in, a *settle* is announced: the speaker has paused long enough for
  the tentative decode's text to be committed, though the utterance stays open (its audio is
  not cut) until ``min_silence``; speech that resumes in between continues the same utterance.
  So the end-of-speech latency is ``max(settle, tail + decode)``, not ``min_silence + decode``.
* **Maximum length.** An utterance reaching ``max_utterance`` seconds is cut at the least
  speech-like frame of its last ``cut_search`` seconds, and the next one starts there: Whisper
  decodes at most 30 s at a time, and a long monologue should still commit as it goes.
* **Padding.** Each utterance's audio starts ``pad`` seconds before its first voiced frame and
  ends ``tail`` seconds after its last one: Whisper transcribes clipped words badly (the VAD's
  end-of-speech threshold already lets the last syllable decay, so the tail can be short).

Positions are sample indices from the start of the stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from as2d.runtime.option_errors import OptionError

# the command line's names where they are not the fields' (``as2d mic --silence``)
_FLAGS = {"min_silence": "--silence"}

FRAME = 512
RATE = 16000


@dataclass(frozen=True)
class EndpointConfig:
    threshold: float = 0.5
    neg_threshold: float | None = None  # default: threshold - 0.15
    min_speech: float = 0.25  # seconds of voiced frames before an utterance counts
    min_silence: float = 0.5  # seconds of silence that end an utterance
    pad: float = 0.25  # seconds of audio kept before the speech
    # Seconds kept after it (None: ``pad``); the tentative end's wait. 0.05 s: end of speech to
    # text 0.06 s sooner than at 0.1 s, the same text (scripts/mic_latency.py ':tail=', on the
    # default and the eval clips, 2-core Zen 4, 2026-12-03).
    tail: float | None = 0.05
    settle: float | None = 0.25  # seconds of silence that commit the text (None: at the end)
    max_utterance: float = 20.0  # seconds; longer speech is cut
    cut_search: float = 3.0  # seconds before the limit searched for the quietest cut

    def validate(self) -> None:
        """Raise ValueError for values that cannot work (the CLI reports them)."""
        for name in ("threshold", "neg_threshold", "min_speech", "min_silence", "pad", "tail",
                     "settle", "max_utterance", "cut_search"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):  # NaN passes every comparison
                raise OptionError(name, f"must be a finite number, not {value}", flags=_FLAGS)
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("the speech threshold must be between 0 and 1")
        neg = self.negative
        if not 0.0 <= neg <= self.threshold:
            raise ValueError("the end-of-speech threshold must be between 0 and the speech "
                             "threshold")
        if self.min_speech < 0 or self.pad < 0:
            raise OptionError("min_speech", "and {0} cannot be negative", ("pad",), _FLAGS)
        if self.min_silence <= 0:
            raise OptionError("min_silence", "must be positive", flags=_FLAGS)
        if self.tail is not None and self.tail < 0:
            raise OptionError("tail", "cannot be negative", flags=_FLAGS)
        if self.settle is not None and not 0 < self.settle <= self.min_silence:
            raise OptionError("settle", "must be positive and at most {0}", ("min_silence",),
                              _FLAGS)
        if self.max_utterance < 2.0:
            raise OptionError("max_utterance", "must be at least 2 seconds", flags=_FLAGS)
        if self.max_utterance <= 2 * self.pad + self.min_speech:
            raise OptionError("max_utterance", "is too short for the padding and minimum speech",
                              flags=_FLAGS)

    @property
    def end_pad(self) -> float:
        return self.pad if self.tail is None else self.tail

    @property
    def negative(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(0.01, self.threshold - 0.15)


@dataclass(frozen=True)
class Boundary:
    """One decision of the endpointer.

    ``kind``: ``start`` (an utterance is confirmed; ``start`` is where its audio begins),
    ``tentative`` (``tail`` of silence after speech: the audio up to ``end`` is final unless the
    speaker resumes), ``settle`` (``settle`` of silence: commit the tentative decode's text;
    same ``start``/``end``), ``resume`` (speech came back after a tentative end), ``end`` (the
    utterance is over: audio ``start``..``end``, last voiced sample ``speech_end``), or
    ``drop`` (too little speech: forget it).
    """

    kind: str
    utterance: int
    start: int
    end: int = 0
    speech_end: int = 0
    reason: str = ""


class Endpointer:
    """Feed it one probability per frame, in order; it returns the boundaries they cause."""

    def __init__(self, config: EndpointConfig | None = None, frame: int = FRAME,
                 rate: int = RATE) -> None:
        self.config = config or EndpointConfig()
        self.config.validate()
        self.frame, self.rate = frame, rate
        c = self.config
        self._thr, self._neg = c.threshold, c.negative
        self._pad = int(round(c.pad * rate))
        self._tail = int(round(c.end_pad * rate))
        self._settle = None if c.settle is None else int(round(c.settle * rate))
        self._min_speech = int(round(c.min_speech * rate))
        self._min_silence = max(int(round(c.min_silence * rate)), self._tail)
        self._max = int(round(c.max_utterance * rate))
        self._search = max(frame, int(round(c.cut_search * rate)))
        self.frames = 0  # frames seen
        self.utterances = 0  # utterances confirmed so far
        self._reset_utterance()
        self._floor = 0  # no utterance may start before this sample (the previous one's end)

    # -- state ----------------------------------------------------------------------------------
    def _reset_utterance(self) -> None:
        self.active = False  # inside speech or its trailing silence
        self.confirmed = False
        self._start = 0  # audio start of the utterance (sample)
        self._voiced = 0  # voiced samples
        self._speech_end = 0  # end of the last voiced frame (sample)
        self._silent_from: int | None = None  # first silent sample after speech
        self._tentative = False
        self._settled = False
        self._probs: list[tuple[int, float]] = []  # (frame start, prob) of the current utterance

    @property
    def position(self) -> int:
        return self.frames * self.frame

    @property
    def utterance_start(self) -> int:
        return self._start

    @property
    def speaking(self) -> bool:
        return self.active and self._silent_from is None

    # -- feeding --------------------------------------------------------------------------------
    def push(self, prob: float) -> list[Boundary]:
        i0 = self.frames * self.frame
        i1 = i0 + self.frame
        self.frames += 1
        out: list[Boundary] = []
        if not self.active:
            if prob >= self._thr:
                self.active = True
                self._start = max(self._floor, i0 - self._pad)
                self._voiced = self.frame
                self._speech_end = i1
                self._probs = [(i0, prob)]
                self._confirm(out)
            return out
        self._probs.append((i0, prob))
        if self._silent_from is None:  # in speech
            if prob >= self._neg:
                if prob >= self._thr:
                    self._voiced += self.frame
                self._speech_end = i1
                self._confirm(out)
            else:
                self._silent_from = i0
        else:  # in the silence after speech
            if prob >= self._thr:
                self._silent_from = None
                self._voiced += self.frame
                self._speech_end = i1
                if self._tentative:
                    self._tentative = self._settled = False
                    out.append(Boundary("resume", self.utterances, self._start))
                self._confirm(out)
            else:
                silent = i1 - self._silent_from
                if silent >= self._min_silence:
                    self._close(out, "silence", i1)
                    return out
                if self.confirmed and not self._tentative and silent >= self._tail:
                    self._tentative = True
                    out.append(Boundary("tentative", self.utterances, self._start,
                                        self._speech_end + self._tail, self._speech_end))
                if (self._tentative and not self._settled and self._settle is not None
                        and silent >= self._settle):
                    self._settled = True
                    out.append(Boundary("settle", self.utterances, self._start,
                                        self._speech_end + self._tail, self._speech_end))
        if self.active and self.confirmed and i1 - self._start >= self._max:
            self._cut(out, i1)
        return out

    def finish(self, reason: str = "end-of-input") -> list[Boundary]:
        """The input ended (or was stopped): close the utterance in progress, if any."""
        out: list[Boundary] = []
        if self.active:
            self._close(out, reason, self.position)
        return out

    # -- helpers --------------------------------------------------------------------------------
    def _confirm(self, out: list[Boundary]) -> None:
        if not self.confirmed and self._voiced >= self._min_speech:
            self.confirmed = True
            self.utterances += 1
            out.append(Boundary("start", self.utterances, self._start))

    def _close(self, out: list[Boundary], reason: str, available: int) -> None:
        if self.confirmed:
            end = min(self._speech_end + self._tail, max(available, self._speech_end))
            out.append(Boundary("end", self.utterances, self._start, end, self._speech_end,
                                reason))
            self._floor = end
        else:
            out.append(Boundary("drop", self.utterances + 1, self._start))
        self._reset_utterance()

    def _cut(self, out: list[Boundary], now: int) -> None:
        """Cut a too-long utterance at its least speech-like recent frame; speech goes on."""
        if self._silent_from is not None:  # already in a pause: end it there
            self._close(out, "max-length", now)
            return
        lo = max(self._start + self._min_speech + self._pad, now - self._search)
        cands = [(p, f) for f, p in self._probs if f >= lo] or [(0.0, now - self.frame)]
        _, frame_at = min(cands)  # lowest probability; earliest on ties
        cut = frame_at + self.frame // 2
        out.append(Boundary("end", self.utterances, self._start, cut, cut, "max-length"))
        self._floor = cut
        # The rest is a new utterance that starts at the cut, already confirmed (it is speech).
        probs = [(f, p) for f, p in self._probs if f >= frame_at]
        self._reset_utterance()
        self.active = True
        self.confirmed = True
        self.utterances += 1
        self._start = cut
        self._voiced = now - cut
        self._speech_end = now
        self._probs = probs
        out.append(Boundary("start", self.utterances, cut))
