"""``Engine.ask``: one answer document per run, rendered by every face (issue #44).

The engine is a stand-in here (no model loads): :meth:`Engine.ask` and its transcription loop
run on an object with the engine's few parts ask uses (``prepare_answerer``, ``transcribe``,
``stop``, ``drafted_text``, ``target``), so the document, the stops and the errors are tested
in milliseconds. The real models' documents are compared byte for byte by the CLI, API and
server tests (tests/test_ask.py, tests/test_api.py, tests/test_serve.py).
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field

import pytest

from as2d.engine import AnswerError, AskResult, Engine
from as2d.loading import ModelError
from as2d.runtime.ask.answer import DEFAULT_MAX_TOKENS, AskOptions
from as2d.runtime.events import Note, RunDone, SegmentDone
from as2d.runtime.sessions import Background
from as2d.runtime.transcribe.stats import RunStats, StatsCollector


@dataclass
class Seg:
    start: float
    end: float
    text: str


@dataclass
class Plan:
    decoder: str = "as2d"
    drafter: str | None = "tiny.en-int8"


@dataclass
class FakeStats:
    def to_dict(self) -> dict:
        return {"answer_tokens": 3}


@dataclass
class FakeAnswer:
    question: str
    spans: list
    drafted: str | None
    stats: FakeStats = field(default_factory=FakeStats)
    text: str = "Dashwood."

    def to_dict(self) -> dict:
        return {"question": self.question, "answer": self.text, "method": "extracted",
                "abstained": False, "evidence": [],
                "context": {"selected": False, "note": None, "spans": []},
                "stopped": "stop"}


class FakeAnswerer:
    def __init__(self, lossless: bool = True, fails: ValueError | None = None) -> None:
        self.model = types.SimpleNamespace(name="gemma-3-270m-int8")
        self.lossless, self.fails = lossless, fails

    def ask(self, spans, question, drafted, language=None, keep_rows=True):
        if self.fails is not None:
            raise self.fails
        return FakeAnswer(question, spans, drafted)


class FakeAudio:
    source, duration = "clip.wav", 44.0


class FakeEngine:
    """What Engine.ask reads of an engine, with its transcription scripted: each item is a
    segment, or an exception raised where the next segment would come."""

    def __init__(self, items, answerer=None, answerer_error=None) -> None:
        self.items = list(items)
        self.target = types.SimpleNamespace(name="base-int8")
        self.stops = 0
        self.closed = False
        self._answerers: list = []
        self._answerer, self._answerer_error = answerer or FakeAnswerer(), answerer_error
        self.ask = types.MethodType(Engine.ask, self)
        self.hear = types.MethodType(Engine.hear, self)
        self.answer = types.MethodType(Engine.answer, self)
        self._hear = types.MethodType(Engine._hear, self)
        self.collect = types.MethodType(Engine.collect, self)

    def prepare_answerer(self, options, listener=None, question=None):
        def make():
            if self._answerer_error is not None:
                raise self._answerer_error
            return self._answerer

        pending = Background(make)
        pending._thread.join()  # made before the first segment comes
        self._answerers.append(pending)
        return pending

    def transcribe(self, audio, options=None, info=None):
        info.plan = Plan()
        info.language = "en"
        return Run(self, info)

    def stop(self) -> None:
        self.stops += 1

    def drafted_text(self) -> str | None:
        return "drafted words"


class Run:
    """The scripted transcription: a KeyboardInterrupt raised where a segment would come
    leaves it running (a signal lands in the consumer), as a stop ends it after the pass."""

    def __init__(self, engine: FakeEngine, info) -> None:
        self.engine, self.info = engine, info

    def __iter__(self):
        return self

    def __next__(self):
        engine = self.engine
        if not engine.items or engine.closed:
            raise StopIteration
        item = engine.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        if engine.stops:
            self.info.interrupted = True
            raise StopIteration
        return item

    def close(self) -> None:
        self.engine.closed = True


SEGMENTS = [Seg(0.0, 4.0, " Mr. John Dashwood had then leisure"), Seg(4.0, 9.5, " to consider.")]


def test_the_document_is_the_answer_then_the_run_in_todays_order():
    stats = StatsCollector()
    run = RunStats("clip.wav", "as2d", "base-int8", "tiny.en-int8", {}, 44.0)
    stats.runs.append(run)
    result = FakeEngine(SEGMENTS).ask(FakeAudio(), "Who?", AskOptions(), source="talks/clip.wav",
                                      stats=stats)
    assert isinstance(result, AskResult) and result.answer.drafted == "drafted words"
    assert [s.text for s in result.spans] == ["Mr. John Dashwood had then leisure",
                                              "to consider."]
    doc = result.to_dict()
    assert list(doc) == ["question", "answer", "method", "abstained", "evidence", "context",
                         "stopped", "source", "duration", "language", "interrupted",
                         "transcript", "models", "candidates", "stats"]
    assert doc["source"] == "talks/clip.wav" and doc["duration"] == 44.0
    assert doc["language"] == "en" and doc["interrupted"] is False
    assert doc["models"] == {"target": "base-int8", "drafter": "tiny.en-int8",
                             "decoder": "as2d", "llm": "gemma-3-270m-int8"}
    assert doc["candidates"] == "verified"
    assert doc["stats"] == {"transcription": run.summary(), "answer": {"answer_tokens": 3}}
    json.dumps(doc, allow_nan=False)


def test_the_source_defaults_to_the_audios_and_stats_to_none():
    result = FakeEngine(SEGMENTS).ask(FakeAudio(), "Who?")
    doc = result.to_dict()
    assert doc["source"] == "clip.wav" and doc["stats"]["transcription"] is None


@pytest.mark.parametrize("options,answerer,word", [
    (AskOptions(), FakeAnswerer(), "verified"),
    (AskOptions(candidates=False), FakeAnswerer(), "off"),
    (AskOptions(), FakeAnswerer(lossless=False),
     "unavailable: the model's passes are not row-exact")])
def test_the_candidates_word(options, answerer, word):
    assert FakeEngine(SEGMENTS, answerer).ask(FakeAudio(), "Who?", options).candidates == word


def test_no_speech_is_no_answer_and_the_answerer_is_settled_and_forgotten():
    engine = FakeEngine([Seg(0, 1, "  ")])
    result = engine.ask(FakeAudio(), "Who?")
    assert result.answer is None and result.spans == [] and not result.interrupted
    assert engine._answerers == []  # a server asks many times: nothing kept per ask


def test_a_first_interrupt_stops_and_answers_from_what_was_heard():
    notes, events = [], []
    engine = FakeEngine([SEGMENTS[0], KeyboardInterrupt(), SEGMENTS[1]])
    result = engine.ask(FakeAudio(), "Who?", listener=events.append,
                        on_interrupt=lambda: notes.append("stopping"))
    assert notes == ["stopping"] and engine.stops == 1 and engine.closed
    assert result.interrupted and result.answer is not None
    assert result.transcribed == 4.0 and [s.end for s in result.spans] == [4.0]
    said = [e.message for e in events if isinstance(e, Note)]
    assert said == ["transcription interrupted: answering from the 4 s transcribed so far"]


def test_an_interrupt_before_any_speech_is_no_answer_and_says_interrupted():
    result = FakeEngine([KeyboardInterrupt(), SEGMENTS[0]]).ask(
        FakeAudio(), "Who?", on_interrupt=lambda: None)
    assert result.answer is None and result.interrupted


def test_a_second_interrupt_or_one_nobody_handles_propagates():
    engine = FakeEngine([KeyboardInterrupt(), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        engine.ask(FakeAudio(), "Who?", on_interrupt=lambda: None)
    assert engine.closed and engine._answerers == []
    with pytest.raises(KeyboardInterrupt):
        FakeEngine([KeyboardInterrupt()]).ask(FakeAudio(), "Who?")


def test_a_cancelled_run_is_stopped_and_not_answered():
    engine = FakeEngine(SEGMENTS)
    result = engine.ask(FakeAudio(), "Who?", cancelled=lambda: True)
    assert engine.stops == 1 and result.answer is None and result.interrupted


def test_an_answering_model_that_cannot_load_fails_at_the_first_segment():
    engine = FakeEngine(SEGMENTS, answerer_error=ModelError("not a language model"))
    with pytest.raises(ModelError, match="not a language model"):
        engine.ask(FakeAudio(), "Who?")
    assert engine.closed and len(engine.items) == 1  # stopped after the first segment


def test_errors_say_their_stage():
    with pytest.raises(AnswerError) as caught:
        FakeEngine(SEGMENTS, answerer_error=ValueError("no chat template")).ask(
            FakeAudio(), "Who?")
    assert caught.value.stage == "answerer" and str(caught.value) == "no chat template"
    with pytest.raises(AnswerError) as caught:
        FakeEngine(SEGMENTS, FakeAnswerer(fails=ValueError("no room"))).ask(FakeAudio(), "Who?")
    assert caught.value.stage == "answer" and isinstance(caught.value.error, ValueError)
    with pytest.raises(ValueError, match="language") as caught:  # the transcription's: as is
        FakeEngine([ValueError("unknown language")]).ask(FakeAudio(), "Who?")
    assert not isinstance(caught.value, AnswerError)


def test_the_command_lines_answer_length_is_every_faces():
    """``as2d ask`` leaves --max-tokens unset (AskOptions decides); its --help says the same
    number without loading the answerer's code for every command."""
    import typing

    from as2d.cli.ask_cmd import AskRequest

    option = typing.get_type_hints(AskRequest, include_extras=True)["max_tokens"]
    help_text = option.__metadata__[0].help
    assert AskRequest.max_tokens is None
    assert f"[default: {DEFAULT_MAX_TOKENS}]" in help_text
    assert AskOptions().max_tokens == DEFAULT_MAX_TOKENS


def test_the_progress_note_says_what_was_transcribed():
    import io

    from as2d.cli.ask_display import PlainAskReporter

    out = io.StringIO()
    reporter = PlainAskReporter(out)
    reporter.start("clip.wav", 120.0, "Who?")
    reporter(SegmentDone(types.SimpleNamespace(text=" Hello.", end=12.5)))
    reporter(RunDone(3.0, interrupted=True))
    assert out.getvalue() == "as2d: transcribed 12.5 s of 120.0 s of audio in 3.0 s (stopped)\n"
    whole = io.StringIO()
    reporter = PlainAskReporter(whole)
    reporter.start("clip.wav", 120.0, "Who?")
    reporter(RunDone(9.0))
    assert whole.getvalue() == "as2d: transcribed 120.0 s of audio in 9.0 s\n"
