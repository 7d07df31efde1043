"""The VAD filter for files: decode only the speech, time it on the original recording.

faster-whisper's ``vad_filter``: a voice detector (Silero, as ``as2d mic`` uses) scores every
32-ms frame; frames over ``threshold`` open a speech chunk, closed after
``min_silence_duration_ms`` under ``neg_threshold``; chunks shorter than
``min_speech_duration_ms`` are dropped, longer than ``max_speech_duration_s`` split (at a pause
of 98 ms when there is one), and each is padded by ``speech_pad_ms`` (half the gap between two
close ones). The chunks are joined into one recording for the window loop, and every timestamp
is mapped back (a segment's end exactly on a chunk's end stays in that chunk). The detector is
passed in by whoever builds the transcriber, so this room does not depend on the live one.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, fields

import numpy as np

from as2d.runtime.audio import Audio
from as2d.runtime.events import Listener, Note

SAMPLE_RATE = 16000
FRAME = 512  # samples per detector decision (Silero at 16 kHz)
# A pause this long inside an over-long chunk is where it may be split (faster-whisper's rule).
_SPLIT_PAUSE = SAMPLE_RATE * 98 // 1000


@dataclass
class VadParameters:
    """faster-whisper's ``VadOptions``, with its defaults."""

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = math.inf
    min_silence_duration_ms: int = 2000
    speech_pad_ms: int = 400

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"VAD threshold must be between 0 and 1, not {self.threshold}")
        if self.neg_threshold is not None and not 0.0 <= self.neg_threshold <= self.threshold:
            raise ValueError(f"VAD neg_threshold must be between 0 and threshold, "
                             f"not {self.neg_threshold}")
        for name, value in (("min_speech_duration_ms", self.min_speech_duration_ms),
                            ("min_silence_duration_ms", self.min_silence_duration_ms),
                            ("speech_pad_ms", self.speech_pad_ms)):
            if value < 0:
                raise ValueError(f"VAD {name} must be 0 or more, not {value}")
        if not self.max_speech_duration_s > 0:
            raise ValueError(f"VAD max_speech_duration_s must be positive, "
                             f"not {self.max_speech_duration_s}")

    @classmethod
    def parse(cls, value: VadParameters | dict | str | None) -> VadParameters:
        """From a dict, ``"name=value,name=value"`` text (``--vad-parameters``) or None."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            pairs = {}
            for part in (p.strip() for p in value.split(",")):
                if not part:
                    continue
                name, eq, text = part.partition("=")
                if not eq:
                    raise ValueError(f"VAD parameters are name=value pairs, not {part!r}")
                pairs[name.strip()] = text.strip()
            value = pairs
        known = {f.name: f for f in fields(cls)}
        out = {}
        for name, raw in dict(value).items():
            if name not in known:
                raise ValueError(f"unknown VAD parameter {name!r} (known: "
                                 f"{', '.join(known)})")
            try:
                if raw is None or (isinstance(raw, str) and raw.lower() == "none"):
                    out[name] = None if name == "neg_threshold" else cls.__dataclass_fields__[
                        name].default
                elif name.endswith("_ms"):
                    out[name] = int(float(raw))
                else:
                    out[name] = float(raw)
            except ValueError:
                raise ValueError(f"VAD parameter {name} takes a number, not {raw!r}") from None
        return cls(**out)


def speech_probabilities(samples: np.ndarray, detector) -> np.ndarray:
    """One probability per 512-sample frame, the last frame zero-padded (as faster-whisper)."""
    n = len(samples)
    frames = n // FRAME + 1
    padded = np.zeros(frames * FRAME, np.float32)
    padded[:n] = samples
    return np.asarray(detector.probabilities(padded), dtype=np.float32)


def speech_chunks(probs: np.ndarray, n_samples: int,
                  params: VadParameters | None = None) -> list[tuple[int, int]]:
    """Speech chunks ``(start, end)`` in samples from per-frame probabilities."""
    p = params or VadParameters()
    sr = SAMPLE_RATE
    on = p.threshold
    off = p.neg_threshold if p.neg_threshold is not None else max(on - 0.15, 0.01)
    min_speech = sr * p.min_speech_duration_ms / 1000
    pad = sr * p.speech_pad_ms / 1000
    max_speech = sr * p.max_speech_duration_s - FRAME - 2 * pad
    min_silence = sr * p.min_silence_duration_ms / 1000

    chunks: list[list[int]] = []
    start: int | None = None  # the open chunk's start (None: not in speech)
    quiet_since = 0  # where the current run of quiet frames began (0: none)
    last_pause_end = 0  # end of speech before the last pause of 98 ms or more (0: none)
    resume = 0  # where speech resumed after that pause
    for i, prob in enumerate(probs):
        at = FRAME * i
        if prob >= on and quiet_since:
            quiet_since = 0
            if resume < last_pause_end:
                resume = at
        if prob >= on and start is None:
            start = at
            continue
        if start is not None and at - start > max_speech:
            # Too long: end at the last real pause if there was one, else right here.
            if last_pause_end:
                chunks.append([start, last_pause_end])
                start = None if resume < last_pause_end else resume
                last_pause_end = resume = quiet_since = 0
            else:
                chunks.append([start, at])
                start = None
                last_pause_end = resume = quiet_since = 0
                continue
        if prob < off and start is not None:
            if not quiet_since:
                quiet_since = at
            if at - quiet_since > _SPLIT_PAUSE:
                last_pause_end = quiet_since
            if at - quiet_since < min_silence:
                continue
            if quiet_since - start > min_speech:
                chunks.append([start, quiet_since])
            start = None
            last_pause_end = resume = quiet_since = 0
    if start is not None and n_samples - start > min_speech:
        chunks.append([start, n_samples])

    # Padding: each side by speech_pad_ms, or half the gap when two chunks are that close.
    for i, c in enumerate(chunks):
        if i == 0:
            c[0] = int(max(0, c[0] - pad))
        if i + 1 < len(chunks):
            nxt = chunks[i + 1]
            gap = nxt[0] - c[1]
            if gap < 2 * pad:
                c[1] += int(gap // 2)
                nxt[0] = int(max(0, nxt[0] - gap // 2))
            else:
                c[1] = int(min(n_samples, c[1] + pad))
                nxt[0] = int(max(0, nxt[0] - pad))
        else:
            c[1] = int(min(n_samples, c[1] + pad))
    return [(int(a), int(b)) for a, b in chunks]


class Timeline:
    """Maps times in the joined speech back to the original recording."""

    def __init__(self, chunks: list[tuple[int, int]]) -> None:
        self.chunks = list(chunks)
        self._ends: list[int] = []  # each chunk's end in the joined audio (samples)
        self._skipped: list[float] = []  # seconds removed before each chunk
        removed = prev_end = 0
        for a, b in self.chunks:
            removed += a - prev_end
            prev_end = b
            self._ends.append(b - removed)
            self._skipped.append(removed / SAMPLE_RATE)

    @property
    def speech_seconds(self) -> float:
        return sum(b - a for a, b in self.chunks) / SAMPLE_RATE

    def chunk_of(self, t: float, is_end: bool = False) -> int:
        sample = int(t * SAMPLE_RATE)
        if is_end:
            i = bisect.bisect_left(self._ends, sample)
            if i < len(self._ends) and self._ends[i] == sample:
                return i  # an end on a chunk's last sample belongs to that chunk
        return min(bisect.bisect_right(self._ends, sample), len(self._ends) - 1)

    def original(self, t: float, is_end: bool = False, chunk: int | None = None) -> float:
        """The original time of ``t`` seconds into the joined speech."""
        if not self._ends:
            return t
        i = self.chunk_of(t, is_end) if chunk is None else chunk
        return round(self._skipped[i] + t, 3)

    def restore(self, segment) -> None:
        """Put ``segment``'s times (and its words', if it has any) on the original audio.

        Words are mapped within the chunk of their middle, so a word never straddles a cut;
        the segment then spans its words."""
        words = segment.words or []
        if words:
            for w in words:
                i = self.chunk_of((w.start + w.end) / 2)
                w.start = self.original(w.start, chunk=i)
                w.end = self.original(w.end, chunk=i)
            segment.start = words[0].start
            segment.end = words[-1].end
        else:
            segment.start = self.original(segment.start)
            segment.end = self.original(segment.end, is_end=True)


def join_speech(samples: np.ndarray, chunks: list[tuple[int, int]]) -> np.ndarray:
    """The speech chunks of ``samples`` one after another."""
    if not chunks:
        return np.zeros(0, np.float32)
    return np.ascontiguousarray(np.concatenate([samples[a:b] for a, b in chunks]),
                                dtype=np.float32)


def speech_only(audio: Audio, detector, params: VadParameters, extra: dict, emit: Listener
                ) -> tuple[Audio, Timeline | None]:
    """``audio``'s speech chunks joined, and the map back to its times (None: no speech at
    all); the chunks and timings go into ``extra`` (``TranscriptionInfo.extra``)."""
    if detector is None:
        raise ValueError("the VAD filter needs a voice detector (LongFormTranscriber("
                         "voice_detector=as2d.runtime.vad.silero.SileroVAD()))")
    t0 = time.perf_counter()
    chunks = speech_chunks(speech_probabilities(audio.samples, detector), len(audio.samples),
                           params)
    timeline = Timeline(chunks)
    extra["vad_chunks"] = [(a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in chunks]
    extra["vad_speech_seconds"] = timeline.speech_seconds
    extra["vad_seconds"] = time.perf_counter() - t0
    emit(Note(f"VAD filter: {timeline.speech_seconds:.1f} s of speech in {len(chunks)} chunk(s) "
              f"kept of {audio.duration:.1f} s ({time.perf_counter() - t0:.2f} s)"))
    if not chunks:
        return audio, None
    return Audio(join_speech(audio.samples, chunks), audio.source, audio.source_rate,
                 audio.source_channels, audio.truncated), timeline
