"""Option errors name the option the way each face spells it: field names for the Python API
and the server, flags for the command line."""

from __future__ import annotations

import pytest

from as2d.engine import EngineSpec, parse_budget
from as2d.runtime.live.endpoint import EndpointConfig
from as2d.runtime.option_errors import OptionError, as_flags
from as2d.runtime.transcribe.beam import check


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
