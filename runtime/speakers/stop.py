"""Stopping a diarization that runs beside a transcription that was cancelled or failed.

The caller holds a ``threading.Event``; the segmenter, the fbank and the embedder check it
between windows and chunks, so a stop takes effect within one batch of work."""

from __future__ import annotations


class DiarizationStopped(Exception):
    """The diarization was stopped before it finished (not a ValueError: no one reports it
    as a bad request)."""


def check_stop(stop) -> None:
    """Raise :class:`DiarizationStopped` once ``stop`` (a ``threading.Event`` or None) is
    set."""
    if stop is not None and stop.is_set():
        raise DiarizationStopped("the diarization was stopped")
