"""Whisper's temperature fallback: a window that looks wrong is decoded again, sampling.

As openai-whisper and faster-whisper do: a greedy decode whose text compresses too well (a
loop) or whose average log-probability is low falls back to the next temperature of the
schedule, where ``best_of`` samples are drawn and the most probable per token wins; probable
silence is accepted as it is; when every temperature fails, the last decode is kept.

Greedy windows keep the run's decoder, all of which commit target-only greedy's tokens, so the
verdict, hence the samples, are the same whatever the decoder. Each sampled decode draws from a
generator seeded by the run's seed, the window, the temperature and the sample, once per
committed token, in order (:meth:`~as2d.runtime.whisper.logits.LogitRules.choose`): candidates
change the passes, never the draws, and a run is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from as2d.runtime.option_errors import OptionError, is_number, shown

# openai-whisper's default schedule: --temperature 0 --temperature_increment_on_fallback 0.2.
DEFAULT_TEMPERATURES: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


# The most temperatures one schedule may hold: each may decode a window again (best_of times),
# and an increment of 1e-9 would otherwise make a billion of them before anything is decoded.
MAX_TEMPERATURES = 100


def temperature_schedule(temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
                         increment: float | None = None) -> tuple[float, ...]:
    """The temperatures a window may be decoded at, in order.

    A sequence is used as given. A single value with an ``increment`` (> 0) grows into
    ``temperature, temperature + increment, ...`` up to 1.0, as openai-whisper's command line
    does; without one it is the only temperature (no fallback). Text is ``--temperature`` as
    typed: one number (grown by ``increment``) or a comma list (used as given). The one parser
    of temperatures, whatever the face. Raises :class:`OptionError` (a ValueError) for a
    temperature that is not a finite number of 0 or more, an empty schedule or one of more than
    :data:`MAX_TEMPERATURES`.
    """
    if isinstance(temperature, str):
        parts = [p.strip() for p in temperature.split(",") if p.strip()]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise OptionError("temperature", "takes a number or a comma-separated list of "
                              f"numbers, not {temperature!r}") from None
        temperature, increment = (values[0], increment) if len(values) == 1 else (values, None)
    if increment is not None and not (is_number(increment) and np.isfinite(increment)
                                      and increment >= 0):
        raise OptionError("temperature_increment_on_fallback",
                          f"must be a number of 0 or more, not {shown(increment)}")
    if is_number(temperature):
        t0 = float(temperature)
        _check_temperature(t0)
        if increment:
            if (1.0 + 1e-6 - t0) / float(increment) >= MAX_TEMPERATURES:  # may be inf
                raise OptionError("temperature_increment_on_fallback",
                                  f"{shown(increment)} makes a schedule of more than "
                                  f"{MAX_TEMPERATURES} temperatures from {t0:g} to 1 (each may "
                                  "decode a window again; whisper's has 6)")
            temps = tuple(round(float(t), 6)
                          for t in np.arange(t0, 1.0 + 1e-6, float(increment)))
            temps = temps or (t0,)  # a start above 1.0: that one temperature
        else:
            temps = (t0,)
    elif isinstance(temperature, bytes) or not isinstance(temperature, Sequence):
        raise OptionError("temperature", "takes a number or a sequence of numbers, not "
                          f"{shown(temperature)}")
    else:
        if len(temperature) > MAX_TEMPERATURES:
            raise OptionError("temperature", f"holds {len(temperature)} temperatures (at most "
                              f"{MAX_TEMPERATURES}: each may decode a window again)")
        for t in temperature:
            _check_temperature(t)
        temps = tuple(float(t) for t in temperature)
    if not temps:
        raise OptionError("temperature", "is an empty schedule (give at least one temperature)")
    return temps


def _check_temperature(t) -> None:
    if not (is_number(t) and np.isfinite(t) and t >= 0):
        raise OptionError("temperature", f"must be a finite number of 0 or more, not {shown(t)}")


@dataclass
class Judgement:
    """Why a decode is (or is not) good enough to keep."""

    needs_fallback: bool
    reason: str = ""


def judge(avg_logprob: float, compression_ratio: float, no_speech_prob: float,
          compression_ratio_threshold: float | None, logprob_threshold: float | None,
          no_speech_threshold: float | None) -> Judgement:
    """openai-whisper's ``decode_with_fallback`` test of one decode."""
    reasons = []
    if compression_ratio_threshold is not None and compression_ratio > compression_ratio_threshold:
        reasons.append(f"compression ratio {compression_ratio:.2f} > "
                       f"{compression_ratio_threshold:g}")
    if logprob_threshold is not None and avg_logprob < logprob_threshold:
        reasons.append(f"average log-probability {avg_logprob:.2f} < {logprob_threshold:g}")
    if (no_speech_threshold is not None and no_speech_prob > no_speech_threshold
            and logprob_threshold is not None and avg_logprob < logprob_threshold):
        return Judgement(False, "silence")  # the window loop skips it: no need to sample
    return Judgement(bool(reasons), "; ".join(reasons))


def window_rng(seed: int, seek: int, temperature: float, draw: int) -> np.random.Generator:
    """The generator of one sampled decode: the same for every decoder and every run with
    this ``seed``, different for each window, temperature and sample."""
    return np.random.default_rng([int(seed), int(seek), int(round(temperature * 1000)),
                                  int(draw)])
