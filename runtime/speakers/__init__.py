"""Speakers: the speaker-embedding model and its fbank front end (diarization builds on these).

The graphs are installed by ``as2d.models.speakers``; the engine only reads them by path.
"""

from as2d.runtime.speakers.embedding import MIN_FRAMES, MIN_SAMPLES, SpeakerEmbedder, cosine
from as2d.runtime.speakers.fbank import fbank, speaker_features

__all__ = ["MIN_FRAMES", "MIN_SAMPLES", "SpeakerEmbedder", "cosine", "fbank", "speaker_features"]
