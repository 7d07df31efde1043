"""The evidence an answer rests on: passages of the transcript, with their times.

An answer about a recording is only checkable with *where* it was said, so every answer
carries the passages it rests on (best first), whatever face shows it: ``as2d ask`` prints them
under the answer (``[0:03–0:08] "…"``), ``--json``, ``as2d.ask`` and the server's
``/v1/audio/ask`` give them as ``evidence``: a list of ``{start, end, text}``, and
``speaker`` (a label such as ``SPEAKER_01``, or a name from ``--speaker NAME=FILE``) when the
recording was diarized (``as2d ask --diarize``) or the transcript file says who speaks.

A transcript :class:`~as2d.runtime.ask.spans.Span` *is* an :class:`Evidence` (its subclass), so
an answer can cite the spans it was found in as they are, and compare them with its context.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Evidence:
    """One passage of the transcript: audio times in seconds and what was said there."""

    start: float
    end: float
    text: str
    speaker: str | None = None  # who speaks over most of it (None: not known)

    def to_dict(self) -> dict:
        d = {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text.strip()}
        if self.speaker is not None:
            d["speaker"] = self.speaker
        return d
