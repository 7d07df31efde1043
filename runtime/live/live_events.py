"""Typed events of live dictation (``as2d mic``), beside the decoding events of
:mod:`as2d.runtime.events`.

A live session emits these to the same listener as the engine's own events (``Drafted``,
``Verified``, ``WindowDone``, ...), so a display sees the whole pipeline: the microphone, the
endpointer, each decode of the growing utterance, and what the agreement policy committed.
Audio positions (``start``, ``end``, ``at``) are seconds from the start of the input; wall times
are ``time.perf_counter()`` seconds. Nothing here knows about terminals.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ListenStarted:
    source: str  # "microphone: <device>" or the input file
    vad: str  # "silero" or "energy"
    rate: int  # samples per second delivered by the source (before resampling)
    speed: float | None  # pace of a file source (1.0 = real time); None for a microphone
    decoder: str
    target: str
    drafter: str | None


@dataclass(frozen=True)
class VoiceLevel:
    """Sampled about ten times a second: what the detector hears now."""

    at: float
    probability: float  # highest speech probability since the previous VoiceLevel
    level_db: float  # loudness (dBFS) of the loudest frame since then
    speaking: bool  # an utterance is open


@dataclass(frozen=True)
class UtteranceStarted:
    utterance: int
    start: float  # where its audio starts (speech start minus the padding)


@dataclass(frozen=True)
class UtteranceEnded:
    """The endpointer closed an utterance; its final decode is queued."""

    utterance: int
    start: float
    end: float  # end of its audio (speech end plus the padding)
    speech_end: float  # end of the last voiced frame: "end of speech" for latency
    reason: str  # "silence", "max-length", "end-of-input", "stopped" or "input-lost"


@dataclass(frozen=True)
class DecodeStarted:
    utterance: int
    start: float
    end: float
    final: bool  # the utterance has ended: this decode settles all of its text
    queued_seconds: float  # wall time the job waited for the decoder
    # The utterance probably ended (a pause began): its complete audio is decoded now, and
    # reused as the final decode if the pause lasts.
    speculative: bool = False


@dataclass(frozen=True)
class Hypothesis:
    """A decode of the utterance so far: settled words and the still-open rest."""

    utterance: int
    committed: str  # this utterance's committed text (never changes once shown)
    tentative: str  # the rest of the latest hypothesis (may still change)
    final: bool
    audio_seconds: float  # audio decoded
    decode_seconds: float  # wall time of the decode
    tokens: int  # tokens the target committed
    target_decode_seconds: float  # target decoding time (tokens/s = tokens / this)
    reused: bool = False  # the final reused a decode of exactly the same audio


@dataclass(frozen=True)
class Committed:
    """Words settled by the agreement policy: appended to the dictation, never withdrawn."""

    utterance: int
    text: str  # the new words, space-separated (no leading space)
    first: bool  # the first words of this utterance (a writer starts a new line or a space)
    final: bool  # committed by the utterance's final decode


@dataclass(frozen=True)
class UtteranceDone:
    """An utterance's text is settled: every word of it is committed."""

    utterance: int
    text: str
    start: float
    end: float
    speech_end: float
    reason: str
    latency: float | None  # wall seconds from end of speech to the last commit
    decodes: int  # decodes of this utterance (partials and the final)
    tokens: int  # tokens of the final decode
    target_decode_seconds: float  # of the final decode
    # Utterances the endpointer found that this one covers: more than one when they ended
    # while the decoder was behind and were decoded together (one line of text).
    merged: int = 1
    # End of speech → committed, for each of them (the last one is ``latency``).
    latencies: tuple[float, ...] = ()
    # Pauses where the text was committed (a settle) and the speaker then went on in the
    # same utterance: each is a place where the dictation was cut inside the speech.
    early_commits: int = 0


@dataclass(frozen=True)
class ListenDone:
    utterances: int
    interrupted: bool = False  # stopped by the user (Ctrl-C or stop())
    error: str | None = None  # the input failed (device lost, ...); committed text is kept
    wall_seconds: float = 0.0
    audio_seconds: float = 0.0
