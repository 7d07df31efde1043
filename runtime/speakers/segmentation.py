"""Local speaker activity: pyannote's segmentation-3.0 over sliding 10-s windows.

The model (MIT, an ONNX file of 6 MB) reads 10 s of 16-kHz audio and gives, for each of 589
frames (a step of 270 samples, 16.875 ms), log-probabilities over 7 *powerset* classes: nobody,
speaker 1, 2, 3, 1+2, 1+3, 2+3, where the speakers are the window's own (local, up to three;
"speaker 1" in one window need not be "speaker 1" in the next). The most probable class of a
frame says who is speaking in it, overlaps included. :func:`powerset_to_speakers` turns classes
into a (frames, 3) activity; the windows overlap, so the clustering in
:mod:`as2d.runtime.speakers.diarize` later ties local speakers to the recording's speakers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 10 * SAMPLE_RATE
FRAMES = 589  # frames per 10-s window
FRAME_STEP = 270 / SAMPLE_RATE  # seconds between frames (the SincNet + pooling stride)
FRAME_SPAN = 991 / SAMPLE_RATE  # the receptive field of one frame
LOCAL_SPEAKERS = 3

# Powerset class -> which local speakers it holds (the order segmentation-3.0 was trained on).
POWERSET = np.array([[0, 0, 0],
                     [1, 0, 0], [0, 1, 0], [0, 0, 1],
                     [1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=np.uint8)


def powerset_to_speakers(log_probs: np.ndarray) -> np.ndarray:
    """(..., frames, 7) powerset scores -> (..., frames, 3) 0/1 activity of the local speakers
    (the most probable class of each frame)."""
    return POWERSET[np.argmax(log_probs, axis=-1)]


def window_starts(n_samples: int, step: float) -> list[int]:
    """Start sample of each window: every ``step`` seconds, and one more ending at the last
    sample, so every sample is seen (a recording under 10 s is one zero-padded window)."""
    step_samples = max(1, round(step * SAMPLE_RATE))
    if n_samples <= WINDOW_SAMPLES:
        return [0]
    starts = list(range(0, n_samples - WINDOW_SAMPLES + 1, step_samples))
    if starts[-1] + WINDOW_SAMPLES < n_samples:
        starts.append(n_samples - WINDOW_SAMPLES)
    return starts


@dataclass
class LocalActivity:
    """The segmentation of a recording: window ``i`` starts at ``starts[i]`` (samples) and
    ``activity[i]`` is its (589, 3) 0/1 activity of local speakers."""

    starts: list[int]
    activity: np.ndarray  # (windows, 589, 3) uint8


class Segmenter:
    """segmentation-3.0 in onnxruntime; a few windows per run (batching cuts per-call cost)."""

    def __init__(self, path, threads: int = 1, batch: int = 8) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        # No spinning between operators: diarization runs beside a transcription whose
        # threads hold the cores, and a spinning pool takes their time for nothing.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types for a damaged file
            raise ValueError(f"the speaker segmentation model {path} cannot be loaded "
                             f"({str(exc).splitlines()[0][:120]}); remove it to reinstall"
                             ) from None
        self.input = self.session.get_inputs()[0].name
        self.batch = batch

    def __call__(self, samples: np.ndarray, step: float = 1.0, stop=None) -> LocalActivity:
        """The windows' activity; ``stop`` (a ``threading.Event``), once set, ends the work
        between batches of windows (:class:`~as2d.runtime.speakers.stop.DiarizationStopped`)."""
        from as2d.runtime.speakers.stop import check_stop

        samples = np.asarray(samples, dtype=np.float32)
        starts = window_starts(len(samples), step)
        out = np.zeros((len(starts), FRAMES, LOCAL_SPEAKERS), dtype=np.uint8)
        for at in range(0, len(starts), self.batch):
            check_stop(stop)
            group = starts[at:at + self.batch]
            x = np.zeros((len(group), 1, WINDOW_SAMPLES), dtype=np.float32)
            for j, s in enumerate(group):
                piece = samples[s:s + WINDOW_SAMPLES]
                x[j, 0, :len(piece)] = piece
            scores = self.session.run(None, {self.input: x})[0]
            out[at:at + len(group)] = powerset_to_speakers(scores)
        return LocalActivity(starts, out)
