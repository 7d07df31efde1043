"""What a transcription run is asked for: whisper's and faster-whisper's decoding options.

:class:`TranscribeOptions` is the one record of them that every face fills in (the command
line, the Python API, the server, batch workers); the long-form loop reads it. The helpers
beside it turn it into what the loop decodes with (:func:`beam_options`,
:func:`resolve_language`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from as2d.runtime.option_errors import OptionError, check_finite, check_whole, shown
from as2d.runtime.transcribe import beam
from as2d.runtime.transcribe import vad_filter as vad
from as2d.runtime.transcribe.beam import BeamOptions
from as2d.runtime.transcribe.fallback import DEFAULT_TEMPERATURES, temperature_schedule
from as2d.runtime.whisper.alignment import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS
from as2d.runtime.whisper.tokenizer import normalize_language

TASKS = ("transcribe", "translate")
# Samples drawn per fallback temperature: each is a row of every decoder pass and a decoder
# cache of its own (they decode as one batch), so 100,000 asked for 85 GiB before anything was
# decoded. whisper's default is 5; 16 leaves three times that. The beam's bound,
# beam.MAX_BEAM_SIZE, is the same for the same reason.
MAX_BEST_OF = 16


def resolve_language(model, language: str | None) -> str | None:
    """The language to decode ``model``'s audio in: ``language`` (a code, as
    :class:`TranscribeOptions` holds it), "en" for an English-only model, None (detect)
    otherwise.

    Raises ValueError for a language an English-only model cannot transcribe.
    """
    if language is not None:
        if not model.multilingual and language != "en":
            raise ValueError(f"{model.name} is English-only; it cannot transcribe "
                             f"language {language!r}")
    if not model.multilingual:
        language = "en"
    return language


def check_model(model, options: TranscribeOptions) -> str | None:
    """What ``model`` cannot do of ``options``, refused before anything is decoded: a language
    an English-only model cannot transcribe, a translation by an English-only model (it has no
    translate task: it would silently transcribe). An unknown language was refused when the
    options were made. Returns the language to decode in (as :func:`resolve_language`); raises
    a ValueError (:class:`OptionError` for the task)."""
    if options.task == "translate" and not model.multilingual:
        raise OptionError("task", f"translate needs a multilingual model: {model.name} is "
                          "English-only and cannot translate (use base, small, ... without .en)")
    return resolve_language(model, options.language)


@dataclass
class TranscribeOptions:
    language: str | None = None
    # Code-switching (faster-whisper's multilingual=True): the language is detected again for
    # every 30-s window, from the window's own encoding (one decoder step), and each segment
    # records it. Detection needs no language given; an English-only model's windows are all
    # English.
    multilingual: bool = False
    task: str = "transcribe"
    timestamps: bool = True
    condition_on_previous_text: bool = True
    initial_prompt: str | None = None
    no_speech_threshold: float | None = 0.6
    # Silence gate: a window whose samples all stay within this amplitude (2^-10: -60 dBFS,
    # 32 steps of 16-bit audio) is silence and is not decoded. Whisper normalises each
    # window's level, so digital silence or dither looks like noise to it and it confidently
    # writes "you" (the no-speech rule above does not catch it: avg_logprob stays > -1).
    silence_peak: float | None = 2.0 ** -10
    logprob_threshold: float | None = -1.0
    compression_ratio_threshold: float | None = 2.4
    suppress_blank: bool = True
    max_initial_timestamp: float = 1.0
    # Repeated-text guard: a window whose text still compresses too well (a loop) once the
    # temperature schedule is spent (or with a single temperature) is decoded again without
    # the previous text as prompt; if it still loops, the repetition is cut.
    retry_repetitive: bool = True
    # Temperature fallback (fallback.py). The engine's default is greedy only, which live
    # dictation, `ask` and the benchmark rely on; `as2d transcribe` and the Python API pass
    # whisper's schedule (fallback.DEFAULT_TEMPERATURES).
    temperatures: tuple[float, ...] = (0.0,)
    best_of: int = 5  # samples drawn at a temperature above 0; the most probable is kept
    # Beam search at temperature 0 (beam.py, whisper's --beam_size/--patience/--length_penalty):
    # None or 1 decodes greedily (a beam of one commits greedy's tokens), with the run's
    # speculative decoder; sampled windows stay best_of samples, as in whisper.
    beam_size: int | None = None
    patience: float | None = None
    length_penalty: float | None = None
    seed: int = 0  # seeds the sampled windows: same seed, same output
    # A window decoded above this temperature does not prompt the next one (whisper's 0.5).
    prompt_reset_on_temperature: float = 0.5
    hotwords: str | None = None  # faster-whisper's hint phrases, before the previous text
    # VAD filter (vad_filter.py): decode only the speech chunks; needs a voice detector.
    vad_filter: bool = False
    vad_parameters: vad.VadParameters = field(default_factory=vad.VadParameters)
    # Word timestamps (whisper's --word_timestamps): each window's committed tokens are aligned
    # to the audio afterwards (as2d.runtime.whisper.alignment); the tokens do not change.
    word_timestamps: bool = False
    prepend_punctuations: str = PREPEND_PUNCTUATIONS
    append_punctuations: str = APPEND_PUNCTUATIONS

    def __post_init__(self) -> None:
        """Every option is checked here, once, for every face (the command line, the Python
        API, the server, batch): an :class:`OptionError` names the option as its field, and
        each face words it (``--best-of`` on the command line, ``best_of`` elsewhere)."""
        if self.task not in TASKS:
            raise OptionError("task", f"must be transcribe or translate, not {shown(self.task)}")
        if not isinstance(self.multilingual, bool):
            raise OptionError("multilingual",
                              f"must be true or false, not {shown(self.multilingual)}")
        if self.multilingual and self.language is not None:
            raise OptionError("multilingual", "detects every window's language: leave {0} out",
                              others=("language",))
        for name, value in (("language", self.language), ("initial_prompt", self.initial_prompt),
                            ("hotwords", self.hotwords)):
            if value is not None and not isinstance(value, str):
                raise OptionError(name, f"must be text, not {shown(value)}")
        if self.language is not None:  # a name or code → its code, here and nowhere else
            self.language = normalize_language(self.language)
        _optional("no_speech_threshold", self.no_speech_threshold, 0.0, 1.0,
                  " (a probability)")
        _optional("silence_peak", self.silence_peak, 0.0, 1.0,
                  " (an amplitude; 1 is full scale)")
        _optional("logprob_threshold", self.logprob_threshold, None, 0.0,
                  " (an average log-probability)")
        _optional("compression_ratio_threshold", self.compression_ratio_threshold, 0.0, None,
                  " (a compression ratio)", above=True)
        check_finite("max_initial_timestamp", self.max_initial_timestamp, 0.0)
        check_finite("prompt_reset_on_temperature", self.prompt_reset_on_temperature, 0.0)
        self.temperatures = temperature_schedule(tuple(self.temperatures)
                                                 if isinstance(self.temperatures, list)
                                                 else self.temperatures)
        check_whole("best_of", self.best_of, 1, MAX_BEST_OF,
               " (every sample is a decoder cache and a row of every pass; whisper's "
               "default is 5)")
        check_whole("seed", self.seed, 0)
        if self.beam_size is None and self.patience is not None:
            raise OptionError("patience", "needs {0}", others=("beam_size",))
        if self.beam_size is None and self.length_penalty is not None:
            raise OptionError("length_penalty", "needs {0}", others=("beam_size",))
        beam.check(self.beam_size, self.patience, self.length_penalty)
        if not isinstance(self.vad_parameters, vad.VadParameters):
            raise OptionError("vad_parameters", "must be VadParameters (or use "
                              f"VadParameters.parse), not {shown(self.vad_parameters)}")

    @classmethod
    def parse(cls, *, temperature=DEFAULT_TEMPERATURES,
              temperature_increment_on_fallback: float | None = None,
              vad_parameters: vad.VadParameters | dict | str | None = None,
              **fields) -> TranscribeOptions:
        """The options from a user's words, the one translation every face makes (the command
        line, the Python API, the server, batch): ``temperature`` a number, a sequence or
        ``--temperature``'s text, grown by the increment (:func:`.fallback.temperature_schedule`);
        ``vad_parameters`` a dict or ``name=value,...`` text; the other keywords are fields.
        Each face words the :class:`OptionError` (a ValueError) in its own shape."""
        return cls(temperatures=temperature_schedule(temperature,
                                                     temperature_increment_on_fallback),
                   vad_parameters=vad.VadParameters.parse(vad_parameters), **fields)


def _optional(name: str, value, low: float | None, high: float | None,
              what: str = "", above: bool = False) -> None:
    if value is not None:  # None: the rule is off
        check_finite(name, value, low, high, what, above)


def beam_options(options: TranscribeOptions) -> BeamOptions | None:
    """The run's beam search (None: greedy), from options :class:`TranscribeOptions` checked
    when it was made (a ``BeamOptions`` checks its own numbers again)."""
    if options.beam_size is None or options.beam_size <= 1:
        return None
    return BeamOptions(int(options.beam_size), options.patience, options.length_penalty)


def describe_search(beam_: BeamOptions | None) -> str:
    """How windows at temperature 0 are decoded, for --stats and bench."""
    if beam_ is None:
        return "greedy"
    extra = []
    if beam_.patience is not None:
        extra.append(f"patience {beam_.patience:g}")
    if beam_.length_penalty is not None:
        extra.append(f"length penalty {beam_.length_penalty:g}")
    return f"beam {beam_.beam_size}" + (f" ({', '.join(extra)})" if extra else "")
