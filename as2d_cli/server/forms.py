"""The fields of OpenAI's audio requests, checked one by one into engine options.

Field for field as OpenAI's ``/v1/audio/transcriptions`` and ``/v1/audio/translations`` take
them (``file``, ``model``, ``language``, ``prompt``, ``response_format``, ``temperature``,
``timestamp_granularities[]``, ``stream``), plus as2d's own optional ``decoder``,
``hotwords``, ``vad_filter`` and beam search (``beam_size``, ``patience``,
``length_penalty``, checked by the engine's own rule and bounds, the ones ``as2d transcribe
--beam-size`` applies). Each bad value is a 400 that names its field, so a client sees which
one to fix. ``response_format=diarized_json`` says who speaks (OpenAI's
``known_speaker_names[]``/``known_speaker_references[]`` name them). Fields OpenAI added for
other models (``include[]``, ``chunking_strategy``, ...) are accepted and ignored: whole files
are decoded in 30-s windows whatever chunking is asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from as2d.runtime.ask.question import question_error
from as2d.runtime.option_errors import OptionError
from as2d.server.api_errors import APIError
from as2d.server.uploads import Upload

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
MAX_REFERENCES = 4  # OpenAI's limit of known_speaker_references[]
GRANULARITIES = ("segment", "word")
BEAM_FIELDS = ("beam_size", "patience", "length_penalty")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass
class AudioRequest:
    task: str  # transcribe | translate
    file: str  # the upload's temporary path
    filename: str
    model: str
    response_format: str = "json"
    language: str | None = None
    multilingual: bool = False  # as2d's (faster-whisper's): each window's language detected
    prompt: str | None = None
    temperature: float = 0.0
    granularities: tuple[str, ...] = ("segment",)
    stream: bool = False
    decoder: str | None = None
    hotwords: str | None = None
    vad_filter: bool = False
    beam_size: int | None = None  # None: greedy (what the speculative decoders speed up)
    patience: float | None = None
    length_penalty: float | None = None
    question: str | None = None  # /v1/audio/ask
    speakers: object = None  # SpeakerOptions, with diarized_json
    extras: dict = field(default_factory=dict)

    @property
    def words(self) -> bool:
        return "word" in self.granularities


def is_path_like(name: str) -> bool:
    """A model name that names a file or folder: clients never choose files on the server."""
    return (any(c in name for c in "/\\\x00") or name.startswith((".", "~"))
            or (len(name) > 1 and name[1] == ":"))


def _flag(upload: Upload, name: str) -> bool:
    value = upload.get(name)
    if value is None or value == "":
        return False
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise APIError(400, f"{name} must be true or false, not {value!r}", param=name,
                   code="invalid_value")


def _text(upload: Upload, name: str, limit: int = 4000) -> str | None:
    value = upload.get(name)
    if value is None or not value.strip():
        return None
    if len(value) > limit:
        raise APIError(400, f"{name} is too long (at most {limit} characters)", param=name,
                       code="invalid_value")
    return value


def _number(upload: Upload, name: str) -> float | None:
    """A finite number, or None when the field is absent or empty."""
    value = upload.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise APIError(400, f"{name} must be a number, not {value[:40]!r}", param=name,
                       code="invalid_value")
    return number


def _beam(upload: Upload, req: AudioRequest) -> None:
    """``beam_size``, ``patience`` and ``length_penalty``: the engine's check and bounds
    (:class:`~as2d.runtime.transcribe.transcribe_options.TranscribeOptions`, the same rule
    as ``as2d transcribe --beam-size`` and the Python API's)."""
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    size, patience, penalty = (_number(upload, name) for name in BEAM_FIELDS)
    if size is not None and size.is_integer():
        size = int(size)
    try:
        TranscribeOptions(beam_size=size, patience=patience, length_penalty=penalty)
    except OptionError as exc:  # named by its field, as a server client spells it
        raise APIError(400, str(exc), param=exc.option, code="invalid_value") from None
    req.beam_size, req.patience, req.length_penalty = size, patience, penalty


def parse_audio_request(upload: Upload, task: str, loaded_decoder: str) -> AudioRequest:
    """The request's options, or an :class:`APIError` naming the first bad field."""
    if "file" not in upload.files:
        if upload.get("file") is not None:
            raise APIError(400, "file must be an uploaded file (a multipart file part with a "
                                "filename), not a text field", param="file",
                           code="invalid_value")
        raise APIError(400, "you must provide a file (the audio to transcribe)", param="file",
                       code="missing_required_parameter")
    path, filename = upload.files["file"]
    model = upload.get("model")
    if model is None or not model.strip():
        raise APIError(400, "you must provide a model parameter (any name: this server "
                            "decodes with the model it loaded)", param="model",
                       code="missing_required_parameter")
    model = model.strip()
    if len(model) > 200:
        raise APIError(400, f"model is too long ({len(model)} characters, at most 200); use "
                            "any model name (e.g. whisper-1)", param="model",
                       code="invalid_value")
    if is_path_like(model):
        raise APIError(400, f"model {model[:80]!r} looks like a path: clients cannot choose "
                            "model files on the server; use any model name (e.g. whisper-1)",
                       param="model", code="model_not_found")
    req = AudioRequest(task=task, file=path, filename=filename, model=model)

    fmt = (upload.get("response_format") or "json").strip()
    if fmt not in RESPONSE_FORMATS:
        raise APIError(400, f"response_format must be one of {', '.join(RESPONSE_FORMATS)}, "
                            f"not {fmt!r}", param="response_format", code="invalid_value")
    req.response_format = fmt

    if task == "transcribe":
        language = _text(upload, "language", 40)
        if language is not None:
            from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

            try:  # parsed as every face parses it: by the options it goes into
                req.language = TranscribeOptions(language=language).language
            except ValueError:
                raise APIError(400, f"language {language!r} is not a language Whisper knows "
                                    "(give an ISO-639-1 code such as en)", param="language",
                               code="invalid_value") from None
    req.prompt = _text(upload, "prompt")

    temperature = upload.get("temperature")
    if temperature is not None and temperature.strip() != "":
        try:
            value = float(temperature)
        except ValueError:
            raise APIError(400, f"temperature must be a number, not {temperature!r}",
                           param="temperature", code="invalid_value") from None
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise APIError(400, f"temperature must be between 0 and 1, not {temperature}",
                           param="temperature", code="invalid_value")
        req.temperature = value

    grains = upload.get_all("timestamp_granularities[]") + upload.get_all(
        "timestamp_granularities")
    if grains:
        for g in grains:
            if g not in GRANULARITIES:
                raise APIError(400, "timestamp_granularities[] takes segment and/or word, not "
                                    f"{g!r}", param="timestamp_granularities",
                               code="invalid_value")
        if fmt != "verbose_json":
            raise APIError(400, "timestamp_granularities[] needs response_format "
                                "verbose_json", param="timestamp_granularities",
                           code="invalid_value")
        req.granularities = tuple(dict.fromkeys(grains))

    req.stream = _flag(upload, "stream")
    if req.stream and fmt not in ("json", "text", "diarized_json"):
        raise APIError(400, f"stream=true sends text events; it cannot be combined with "
                            f"response_format {fmt}", param="stream", code="invalid_value")

    decoder = _text(upload, "decoder", 20)
    if decoder is not None:
        decoder = decoder.strip()
        from as2d.engine import Decoder

        try:
            decoder = Decoder.parse(decoder)
        except OptionError as exc:
            raise APIError(400, str(exc), param="decoder", code="invalid_value") from None
        if decoder != loaded_decoder:
            raise APIError(400, f"this server decodes with {loaded_decoder} (as2d serve "
                                f"--decoder {loaded_decoder}); every decoder gives the same "
                                "text", param="decoder", code="invalid_value")
        req.decoder = decoder
    req.hotwords = _text(upload, "hotwords", 1000)
    req.vad_filter = _flag(upload, "vad_filter")
    req.multilingual = _flag(upload, "multilingual")
    _beam(upload, req)
    _speakers(upload, req)
    return req


def _count(upload: Upload, name: str) -> int | None:
    value = _text(upload, name, 10)
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise APIError(400, f"{name} must be a whole number, not {value!r}", param=name,
                       code="invalid_value") from None


def _speakers(upload: Upload, req: AudioRequest) -> None:
    """diarized_json: OpenAI's ``known_speaker_names[]`` with ``known_speaker_references[]``
    (data URLs of short clips), and as2d's own speaker counts, checked by the one rule every
    face uses (:func:`as2d.runtime.speakers.speaker_options.from_flags`)."""
    import base64
    import binascii

    from as2d.runtime.speakers.speaker_options import from_flags, name_problem

    names = upload.get_all("known_speaker_names[]") + upload.get_all("known_speaker_names")
    refs = upload.get_all("known_speaker_references[]") + upload.get_all(
        "known_speaker_references")
    counts = {n: _count(upload, n) for n in ("num_speakers", "min_speakers", "max_speakers")}
    diarize = req.response_format == "diarized_json"
    if not diarize and (names or refs or any(v is not None for v in counts.values())):
        raise APIError(400, "known speakers and speaker counts need response_format "
                            "diarized_json", param="response_format", code="invalid_value")
    if not diarize:
        return
    if len(names) != len(refs):
        raise APIError(400, f"known_speaker_names[] ({len(names)}) and "
                            f"known_speaker_references[] ({len(refs)}) must pair up",
                       param="known_speaker_references", code="invalid_value")
    if len(names) > MAX_REFERENCES:
        raise APIError(400, f"at most {MAX_REFERENCES} known speakers",
                       param="known_speaker_names", code="invalid_value")
    pairs = []
    for name, ref in zip(names, refs):
        problem = name_problem(name) if name.strip() else None
        if problem:  # the name goes into VTT <v name> spans and SRT cues as it is
            raise APIError(400, problem, param="known_speaker_names", code="invalid_value")
        head, sep, data = ref.partition(",")
        if not sep or not head.startswith("data:") or not head.endswith(";base64"):
            raise APIError(400, f"the reference of {name!r} must be a data URL "
                                "(data:audio/wav;base64,...)",
                           param="known_speaker_references", code="invalid_value")
        try:
            pairs.append((name, base64.b64decode(data, validate=True)))
        except (binascii.Error, ValueError):
            raise APIError(400, f"the reference of {name!r} is not valid base64",
                           param="known_speaker_references", code="invalid_value") from None
    try:
        req.speakers = from_flags(True, counts["num_speakers"], counts["min_speakers"],
                                  counts["max_speakers"], pairs)
    except ValueError as exc:
        raise APIError(400, str(exc), param=exc.option if isinstance(exc, OptionError) else None,
                       code="invalid_value") from None


def parse_ask_request(upload: Upload, loaded_decoder: str) -> AudioRequest:
    """``/v1/audio/ask``: a file and a question (``model`` optional here)."""
    if upload.get("model") is None:
        upload.fields["model"] = ["as2d"]
    req = parse_audio_request(upload, "transcribe", loaded_decoder)
    question = upload.get("question")
    if question is None or not question.strip():
        raise APIError(400, "you must provide a question", param="question",
                       code="missing_required_parameter")
    problem = question_error(question)
    if problem:
        raise APIError(400, problem, param="question", code="invalid_value")
    req.question = question.strip()
    return req
