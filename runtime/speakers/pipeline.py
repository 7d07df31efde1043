"""The loaded diarizer: the two speaker models and what is done with them (diarize a
recording, name its speakers from reference clips).

One thread by default: it runs beside the transcription, which keeps the other cores.
"""

from __future__ import annotations

import threading

import numpy as np

from as2d.runtime.speakers.diarize import (
    Diarization,
    DiarizationError,
    DiarizeParams,
    TooShortError,
    diarize_samples,
)
from as2d.runtime.speakers.speaker_options import SpeakerOptions
from as2d.runtime.speakers.stop import DiarizationStopped, check_stop

__all__ = ["Diarizer", "DiarizationStopped", "RunningDiarization"]

# Cosine similarity a speaker's centroid needs to a reference clip to take its name.
NAME_THRESHOLD = 0.5
MIN_SAMPLES = 16000 // 4  # a quarter second: shorter audio holds no word to place
MAX_REFERENCE_SECONDS = 30.0  # a reference is a short clip of one voice, not a recording


class Diarizer:
    """Segmenter + speaker embedder, loaded once, used for many recordings."""

    def __init__(self, segmentation, embedding, threads: int = 1,
                 params: DiarizeParams | None = None) -> None:
        from as2d.runtime.speakers.embedding import SpeakerEmbedder
        from as2d.runtime.speakers.segmentation import Segmenter

        self.segmenter = Segmenter(segmentation, threads)
        self.embedder = SpeakerEmbedder(embedding, threads)
        self.params = params or DiarizeParams()

    def diarize(self, samples: np.ndarray, options: SpeakerOptions | None = None,
                stop: threading.Event | None = None) -> Diarization:
        """Turns of 16-kHz mono ``samples``; speakers named when ``options`` has references.
        ``stop``, once set, ends the work between windows and chunks with
        :class:`DiarizationStopped` (see :class:`RunningDiarization`)."""
        options = options or SpeakerOptions()
        samples = np.asarray(samples, dtype=np.float32)
        if len(samples) < MIN_SAMPLES:
            raise TooShortError(f"is {len(samples) / 16000:.2f} s long, too short to tell "
                                "speakers apart (a word takes at least 0.25 s)")
        result = diarize_samples(samples, self.segmenter, self.embedder, self.params,
                                 options.num_speakers, options.min_speakers,
                                 options.max_speakers, stop)
        check_stop(stop)
        if options.references:
            result = self.name(result, options.references)
        return result

    def reference_embedding(self, name: str, samples: np.ndarray) -> np.ndarray:
        """The embedding of a reference clip's speech (the frames the segmenter hears a
        voice in); a clip with no speech is a :class:`DiarizationError`."""
        samples = np.asarray(samples, dtype=np.float32)
        if len(samples) > MAX_REFERENCE_SECONDS * 16000:
            raise DiarizationError(f"the reference clip of {name} is {len(samples) / 16000:.1f}"
                                   f" s long; a reference is a short clip of one voice (at "
                                   f"most {MAX_REFERENCE_SECONDS:.0f} s)")
        seg = self.segmenter(samples, self.params.step)
        speech = []
        for i, start in enumerate(seg.starts):
            frames = np.flatnonzero(seg.activity[i].any(axis=1))
            idx = (start + frames[:, None] * 270 + np.arange(270)[None, :]).ravel()
            speech.append(samples[idx[idx < len(samples)]])
        clip = np.concatenate(speech) if speech else samples[:0]
        if len(clip) < MIN_SAMPLES:
            raise DiarizationError(f"the reference clip of {name} holds no speech")
        vec = np.asarray(self.embedder.embed_many([clip])[0], dtype=np.float64)
        return vec / max(np.linalg.norm(vec), 1e-9)

    def name(self, result: Diarization, references) -> Diarization:
        """Speakers renamed after the references they match (one to one, cosine similarity
        over :data:`NAME_THRESHOLD`); the others keep their labels."""
        from scipy.optimize import linear_sum_assignment

        from as2d.runtime.audio import load_audio

        labels = list(result.centroids)
        if not labels:
            return result
        refs = []
        for name, audio in references:
            if isinstance(audio, np.ndarray):
                samples = audio
            else:
                loaded = load_audio(audio)
                samples = loaded.samples
            refs.append(self.reference_embedding(name, samples))
        sim = np.stack([result.centroids[s] for s in labels]) @ np.stack(refs).T
        rows, cols = linear_sum_assignment(-sim)
        names = {labels[r]: references[c][0] for r, c in zip(rows, cols)
                 if sim[r, c] >= NAME_THRESHOLD}
        return result.renamed(names)


class RunningDiarization:
    """A diarization on its own thread, beside a transcription of the same audio.

    :meth:`result` waits for it; :meth:`stop` (the transcription was cancelled or failed)
    makes it end at its next window or chunk, and nobody need wait for that: the thread is a
    daemon whose result is dropped. ``diarizer`` is a Diarizer or a callable giving one
    (loaded on the thread)."""

    def __init__(self, diarizer, samples: np.ndarray, options: SpeakerOptions | None = None
                 ) -> None:
        from as2d.runtime.sessions import Background

        self._stop = threading.Event()
        get = diarizer if callable(diarizer) else (lambda: diarizer)
        self._work = Background(lambda: get().diarize(samples, options, self._stop),
                                name="as2d-diarize")

    def stop(self) -> None:
        self._stop.set()

    def done(self) -> bool:
        return self._work.done()

    def result(self) -> Diarization:
        return self._work.result()
