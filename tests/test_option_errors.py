"""Option errors name the option the way each face spells it: field names for the Python API
and the server, flags for the command line."""

from __future__ import annotations

import numpy as np
import pytest

from as2d.engine import EngineSpec, parse_budget
from as2d.runtime.live.endpoint import EndpointConfig
from as2d.runtime.option_errors import OptionError, as_flags
from as2d.runtime.transcribe.beam import check
from tests.helpers import cli, error_line, write_wav


def test_engine_options_are_named_by_their_fields():
    with pytest.raises(OptionError) as caught:
        EngineSpec(decoder="fast")
    assert str(caught.value) == "decoder must be as2d, sd or target, not 'fast'"
    assert caught.value.as_flags() == "--decoder must be as2d, sd or target, not 'fast'"
    with pytest.raises(OptionError, match="^budget must be"):
        parse_budget("0")
    with pytest.raises(OptionError) as caught:
        EngineSpec(drafter_threads=-1)
    assert str(caught.value) == "threads and drafter_threads cannot be negative"
    assert as_flags(caught.value) == "--threads and --drafter-threads cannot be negative"


def test_flags_that_differ_from_their_fields():
    with pytest.raises(OptionError) as caught:
        EndpointConfig(settle=5.0, min_silence=0.5).validate()
    assert str(caught.value) == "settle must be positive and at most min_silence"
    assert caught.value.as_flags() == "--settle must be positive and at most --silence"


def test_beam_checks_and_plain_errors():
    with pytest.raises(OptionError) as caught:
        check(0, None, None)
    assert caught.value.option == "beam_size"
    assert caught.value.as_flags().startswith("--beam-size must be a whole number")
    assert isinstance(caught.value, ValueError)  # callers that catch ValueError still do
    assert as_flags(ValueError("anything else")) == "anything else"


def test_a_value_with_braces_is_quoted_not_formatted():
    from tests.helpers import cli, error_line

    with pytest.raises(OptionError) as caught:
        EngineSpec(decoder="{x}")
    assert str(caught.value) == "decoder must be as2d, sd or target, not '{x}'"
    error_line(cli("transcribe", "nothing.wav", "--decoder", "{0}"), 2, "--decoder must be")
    error_line(cli("transcribe", "nothing.wav", "--temperature", "{"), 2, "--temperature takes")


# -- one parser per option, whatever the face (issue #45) -------------------------------------
# Each bound lives where the option is made (TranscribeOptions, beam.check, the temperature
# schedule, AskOptions, EngineSpec); the faces only word the OptionError: a flag and exit code
# 2 on the command line, the field in the Python API's ValueError and the server's 400.

BAD_TRANSCRIBE_OPTIONS = [
    ({"beam_size": 1_000_000}, "beam_size", "at most 16"),
    ({"beam_size": 17}, "beam_size", "at most 16"),
    ({"beam_size": 2.5}, "beam_size", "whole number"),
    ({"beam_size": "five"}, "beam_size", "whole number"),
    ({"beam_size": 5, "patience": float("nan")}, "patience", "more than 0"),
    ({"beam_size": 5, "patience": 1e308}, "patience", "at most 100"),
    ({"beam_size": 5, "length_penalty": float("nan")}, "length_penalty", "between 0 and 1"),
    ({"best_of": 100_000}, "best_of", "at most 16"),
    ({"best_of": 0}, "best_of", "1 or more"),
    ({"best_of": 10 ** 400}, "best_of", "at most 16"),
    ({"seed": -1}, "seed", "0 or more"),
    ({"no_speech_threshold": float("nan")}, "no_speech_threshold", "finite"),
    ({"no_speech_threshold": 1.5}, "no_speech_threshold", "from 0 to 1"),
    ({"compression_ratio_threshold": float("nan")}, "compression_ratio_threshold", "finite"),
    ({"compression_ratio_threshold": 0}, "compression_ratio_threshold", "more than 0"),
    ({"logprob_threshold": float("nan")}, "logprob_threshold", "finite"),
    ({"logprob_threshold": float("-inf")}, "logprob_threshold", "finite"),
    ({"logprob_threshold": 0.5}, "logprob_threshold", "0 or less"),
    ({"silence_peak": float("nan")}, "silence_peak", "finite"),
    ({"max_initial_timestamp": float("inf")}, "max_initial_timestamp", "finite"),
    ({"prompt_reset_on_temperature": float("nan")}, "prompt_reset_on_temperature", "finite"),
    ({"temperatures": (0.0, float("nan"))}, "temperature", "finite"),
    ({"temperatures": ()}, "temperature", "empty"),
    ({"temperatures": tuple([0.5] * 101)}, "temperature", "at most 100"),
    ({"task": "summarize"}, "task", "transcribe or translate"),
    ({"language": 42}, "language", "text"),
    ({"initial_prompt": b"bytes"}, "initial_prompt", "text"),
    ({"multilingual": "yes"}, "multilingual", "true or false"),
    ({"multilingual": True, "language": "en"}, "multilingual", "leave language out"),
]


@pytest.mark.parametrize("kw,option,fragment", BAD_TRANSCRIBE_OPTIONS)
def test_transcribe_options_refuse_what_cannot_run(kw, option, fragment):
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    with pytest.raises(OptionError) as caught:
        TranscribeOptions(**kw)
    assert caught.value.option == option
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_defaults_and_whispers_settings_pass():
    from as2d.runtime.transcribe.fallback import DEFAULT_TEMPERATURES
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    TranscribeOptions()
    TranscribeOptions(temperatures=list(DEFAULT_TEMPERATURES), best_of=16, beam_size=16,
                      patience=2, length_penalty=0.6, no_speech_threshold=None,
                      logprob_threshold=None, compression_ratio_threshold=None)


@pytest.mark.parametrize("temperature,increment,option,fragment", [
    (float("nan"), 0.2, "temperature", "finite"),  # was numpy's "arange: cannot compute length"
    (float("inf"), None, "temperature", "finite"),
    (-1.0, None, "temperature", "0 or more"),
    (0.0, float("nan"), "temperature_increment_on_fallback", "0 or more"),
    (0.0, 1e-9, "temperature_increment_on_fallback", "more than 100 temperatures"),
    (0.0, 5e-324, "temperature_increment_on_fallback", "more than 100 temperatures"),
    (b"0.5", None, "temperature", "a number or a sequence"),
    ("0.5,x", None, "temperature", "comma-separated list"),  # --temperature's text
])
def test_the_temperature_schedule_is_parsed_once(temperature, increment, option, fragment):
    from as2d.runtime.transcribe.fallback import temperature_schedule

    with pytest.raises(OptionError) as caught:
        temperature_schedule(temperature, increment)
    assert caught.value.option == option and fragment in str(caught.value)


@pytest.mark.parametrize("args,fragment", [
    (["--beam-size", "1000000"], "--beam-size must be at most 16"),
    (["--temperature", "0.5", "--best-of", "100000"], "--best-of must be at most 16"),
    (["--no-speech-threshold", "nan"], "--no-speech-threshold must be a finite number"),
    (["--compression-ratio-threshold", "nan"], "--compression-ratio-threshold must be"),
    (["--logprob-threshold", "nan"], "--logprob-threshold must be a finite number"),
    (["--temperature", "nan"], "--temperature must be a finite number"),
    (["--temperature", "0,inf"], "--temperature must be a finite number"),
    (["--temperature-increment-on-fallback", "1e-9"], "more than 100 temperatures"),
    (["--beam-size", "5", "--patience", "nan"], "--patience must be more than 0"),
    (["--task", "summarize"], "--task must be transcribe or translate"),
    (["--multilingual", "--language", "de"],
     "--multilingual detects every window's language: leave --language out"),
])
def test_transcribe_refuses_before_any_model_loads(args, fragment, tmp_path):
    path = write_wav(tmp_path / "a.wav", np.zeros(1600, np.float32))
    # An empty models folder: a model load would fail otherwise (or install one).
    error_line(cli("transcribe", path, *args, models_dir=tmp_path / "models"), 2, fragment)


@pytest.mark.parametrize("args,fragment", [
    (["--long-minutes", "nan"], "--long-minutes must be a finite number"),
    (["--long-minutes", "-1"], "more than 0 and at most 600"),
    (["--long-minutes", "0"], "more than 0 and at most 600"),
    (["--long-minutes", "1e7"], "at most 600"),
    (["--long-minutes", "inf"], "--long-minutes"),
    (["--beam-size", "1000000"], "--beam-size must be at most 16"),
    (["--repeats", "0"], "--repeats"),
    (["--warmup", "-5"], "--warmup"),
])
def test_bench_refuses_before_building_anything(args, fragment, tmp_path):
    error_line(cli("bench", "--set", "long", *args, models_dir=tmp_path / "models"), 2,
               fragment)


@pytest.mark.parametrize("args,fragment", [
    (["--speed", "nan"], "--speed must be a finite number of 0 or more"),
    (["--speed", "-1"], "--speed must be a finite number of 0 or more"),
    (["--silence", "nan"], "--silence must be a finite number"),
    (["--min-speech", "nan"], "--min-speech must be a finite number"),
    (["--pad", "inf"], "--pad must be a finite number"),
    (["--max-utterance", "nan"], "--max-utterance must be a finite number"),
])
def test_mic_refuses_numbers_that_are_not(args, fragment, tmp_path):
    path = write_wav(tmp_path / "a.wav", np.zeros(1600, np.float32))
    error_line(cli("mic", "--input", path, *args, models_dir=tmp_path / "models"), 2, fragment)


def test_the_server_applies_the_same_beam_bounds():
    """No copy of the bound in the server: its 400 is TranscribeOptions' own message."""
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.server.api_errors import APIError
    from as2d.server.forms import parse_audio_request
    from as2d.server.uploads import Upload

    for fields, engine_kw, option in (({"beam_size": "17"}, {"beam_size": 17}, "beam_size"),
                                      ({"beam_size": "5", "patience": "101"},
                                       {"beam_size": 5, "patience": 101.0}, "patience")):
        upload = Upload(fields={"model": ["whisper-1"], **{k: [v] for k, v in fields.items()}},
                        files={"file": ("/nonexistent", "a.wav")})
        with pytest.raises(APIError) as caught:
            parse_audio_request(upload, "transcribe", "as2d")
        with pytest.raises(OptionError) as engine:
            TranscribeOptions(**engine_kw)
        assert caught.value.param == option and str(engine.value) in str(caught.value)


def test_every_face_turns_the_same_words_into_the_same_options():
    """One parser per option: the command line, the Python API and the server give
    TranscribeOptions.parse the user's words; the language is a code however it was spelled,
    the temperature grows into whisper's schedule."""
    from dataclasses import fields
    from types import SimpleNamespace

    from as2d.cli.transcribe_cmd import OPTION_FLAGS, TranscribeRequest, transcribe_options
    from as2d.runtime.transcribe.fallback import DEFAULT_TEMPERATURES
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.server.audio_api import engine_options
    from as2d.server.forms import parse_audio_request
    from as2d.server.uploads import Upload

    flags = {f.name: f.default for f in fields(TranscribeRequest) if f.name in OPTION_FLAGS}
    cli = transcribe_options(SimpleNamespace(**{**flags, "language": "English"}))
    api = TranscribeOptions.parse(language="English")
    upload = Upload(fields={"model": ["whisper-1"], "language": ["English"],
                            "temperature": ["0"]}, files={"file": ("/nonexistent", "a.wav")})
    server = engine_options(parse_audio_request(upload, "transcribe", "as2d"))
    assert cli == api == server
    assert api.language == "en" and api.temperatures == DEFAULT_TEMPERATURES


def test_the_servers_multilingual_field_is_the_engines_option():
    from as2d.server.audio_api import engine_options
    from as2d.server.forms import parse_audio_request
    from as2d.server.uploads import Upload

    def request(**fields):
        upload = Upload(fields={"model": ["whisper-1"], **{k: [v] for k, v in fields.items()}},
                        files={"file": ("/nonexistent", "a.wav")})
        return engine_options(parse_audio_request(upload, "transcribe", "as2d"))

    assert request(multilingual="true").multilingual and not request().multilingual
    with pytest.raises(OptionError) as caught:  # answered 400, param "multilingual"
        request(multilingual="true", language="de")
    assert caught.value.option == "multilingual"


@pytest.mark.parametrize("field,value,fragment", [
    ("model", "x" * 5000, "too long to be a model name"),
    ("llm", "ollama:" + "x" * 5000, "too long to be a model name"),
    ("model", "a/" + "b" * 300, "too long to be a model name"),
    ("drafter", "", "must be a model name"),
    ("model", "base\x00", "NUL"),
])
def test_model_names_are_checked_where_the_spec_is_made(field, value, fragment):
    with pytest.raises(OptionError) as caught:
        EngineSpec(**{field: value})
    assert caught.value.option == field and fragment in str(caught.value)
    assert len(str(caught.value)) < 200  # the name is quoted short, not 5,000 characters


def test_a_long_model_name_is_one_line_not_an_output_error(tmp_path):
    path = write_wav(tmp_path / "a.wav", np.zeros(1600, np.float32))
    line = error_line(cli("transcribe", path, "-m", "x" * 5000,
                          models_dir=tmp_path / "models"), 2, "--model is too long")
    assert "cannot write the output" not in line
    error_line(cli("ask", path, "Who is it?", "--llm", "ollama:" + "x" * 5000,
                   models_dir=tmp_path / "models"), 2, "--llm is too long")


def test_ask_options_refuse_no_tokens():
    from as2d.runtime.ask.answer import AskOptions

    with pytest.raises(OptionError) as caught:
        AskOptions(max_tokens=0)
    assert caught.value.as_flags() == "--max-tokens must be a whole number of 1 or more, not 0"
    AskOptions(max_tokens=1)
