"""Transcript writers write what openai-whisper's writers write, byte for byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from as2d import writers
from as2d.runtime.transcribe.longform import Segment
from as2d.runtime.whisper.alignment import Word
from as2d.writers import SubtitleOptions


def seg(i, start, end, text, tokens=(1, 2)):
    return Segment(i, 0, start, end, text, list(tokens), -0.25, 1.2, 0.01)


SEGMENTS = [
    seg(0, 0.0, 2.5, " Hello there."),
    seg(1, 2.5, 61.04, " General --> Kenobi!"),
    seg(2, 3599.9996, 3723.4567, " Ça\tva? Oui."),
]
DATA = Path(__file__).parent / "data" / "whisper_writers"
# The word options of each fixture file (scripts/whisper_writer_fixtures.py makes the files
# with openai-whisper's own writers).
OPTION_SETS = {
    "plain": SubtitleOptions(),
    "width20": SubtitleOptions(max_line_width=20),
    "width24_lines2": SubtitleOptions(max_line_width=24, max_line_count=2),
    "width42_lines1": SubtitleOptions(max_line_width=42, max_line_count=1),
    "words3": SubtitleOptions(max_words_per_line=3),
    "highlight": SubtitleOptions(highlight_words=True),
    "highlight_width30_lines2": SubtitleOptions(highlight_words=True, max_line_width=30,
                                                max_line_count=2),
}


def from_whisper(d: dict) -> Segment:
    """A whisper result segment as as2d's Segment."""
    words = None if "words" not in d else [Word(**w) for w in d["words"]]
    return Segment(d["id"], d["seek"], d["start"], d["end"], d["text"], d["tokens"],
                   d["avg_logprob"], d["compression_ratio"], d["no_speech_prob"],
                   d["temperature"], words=words)


def whisper_fixtures():
    results = json.loads((DATA / "results.json").read_text(encoding="utf-8"))
    for path in sorted(DATA.glob("*.*.*")):
        name, opts, fmt = path.name.split(".")
        yield pytest.param(results[name], OPTION_SETS[opts], fmt, path.read_bytes(),
                           id=path.name)


# -- byte identity with openai-whisper's writers ----------------------------------------------
@pytest.mark.parametrize("result,options,fmt,expected", list(whisper_fixtures()))
def test_documents_are_byte_identical_to_whisper_writers(result, options, fmt, expected):
    segments = [from_whisper(s) for s in result["segments"]]
    got = writers.render(fmt, segments, {"language": result["language"]}, options)
    assert got.encode("utf-8") == expected


def test_the_fixtures_cover_every_format_and_word_option():
    names = {p.name for p in DATA.glob("*.*.*")}
    assert {f"edge.plain.{f}" for f in writers.FORMATS} <= names
    assert {f"words.{o}.{f}" for o in OPTION_SETS for f in ("srt", "vtt")} <= names
    assert any(n.startswith("two_cities.") for n in names), "a real run with words"


# -- timestamps -------------------------------------------------------------------------------
@pytest.mark.parametrize("seconds,srt,vtt", [
    (0.0, "00:00:00,000", "00:00.000"),
    (1.5, "00:00:01,500", "00:01.500"),
    (61.04, "00:01:01,040", "01:01.040"),
    (59.9996, "00:01:00,000", "01:00.000"),  # rounding carries into the minutes
    (3599.9996, "01:00:00,000", "01:00:00.000"),  # ... and into the hours: vtt shows them
    (3723.4567, "01:02:03,457", "01:02:03.457"),
    (36000.0, "10:00:00,000", "10:00:00.000"),
    (-0.2, "00:00:00,000", "00:00.000"),  # never negative
])
def test_subtitle_timestamps_vtt_omits_hours_under_an_hour(seconds, srt, vtt):
    assert writers.srt_time(seconds) == srt
    assert writers.vtt_time(seconds) == vtt


# -- documents --------------------------------------------------------------------------------
def test_txt_is_one_stripped_line_per_segment():
    assert writers.to_txt(SEGMENTS) == "Hello there.\nGeneral --> Kenobi!\nÇa\tva? Oui.\n"


def test_srt_numbers_cues_and_ends_each_with_a_blank_line():
    assert writers.to_srt(SEGMENTS) == (
        "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
        "2\n00:00:02,500 --> 00:01:01,040\nGeneral -> Kenobi!\n\n"
        "3\n01:00:00,000 --> 01:02:03,457\nÇa\tva? Oui.\n\n"
    )


def test_vtt_has_its_header_and_dotted_timestamps():
    assert writers.to_vtt(SEGMENTS) == (
        "WEBVTT\n\n"
        "00:00.000 --> 00:02.500\nHello there.\n\n"
        "00:02.500 --> 01:01.040\nGeneral -> Kenobi!\n\n"
        "01:00:00.000 --> 01:02:03.457\nÇa\tva? Oui.\n\n"
    )


def test_tsv_is_integer_milliseconds_and_tabs_in_text_become_spaces():
    assert writers.to_tsv(SEGMENTS) == (
        "start\tend\ttext\n"
        "0\t2500\tHello there.\n"
        "2500\t61040\tGeneral --> Kenobi!\n"
        "3600000\t3723457\tÇa va? Oui.\n"
    )


def test_json_is_whisper_layout_then_as2d_keys():
    info = {"language": "en", "duration": 3724.0, "source": "talk.wav", "model": "base-int8"}
    text = writers.to_json(SEGMENTS, info)
    doc = json.loads(text)
    assert list(doc) == ["text", "segments", "language", "duration", "source", "model"]
    assert doc["text"] == "".join(s.text for s in SEGMENTS)
    assert list(doc["segments"][0]) == ["id", "seek", "start", "end", "text", "tokens",
                                        "temperature", "avg_logprob", "compression_ratio",
                                        "no_speech_prob"]
    assert doc["segments"][2]["end"] == 3723.4567  # as decoded, as whisper writes it
    assert "\\u00c7a" in text and "\n" not in text, "json.dump's defaults: ASCII, one line"
    # Without as2d's keys the document is whisper's, byte for byte.
    whisper_doc = {k: doc[k] for k in ("text", "segments", "language")}
    assert writers.to_json(SEGMENTS, {"language": "en"}) == json.dumps(whisper_doc)


def test_json_marks_a_segment_cut_short_and_carries_words():
    cut = seg(0, 0.0, 1.0, " Hel")
    cut.partial = True
    cut.words = [Word(" Hel", 0.0, 1.0, 0.5)]
    d = json.loads(writers.to_json([cut], {"language": "en"}))["segments"][0]
    assert d["partial"] is True
    assert d["words"] == [{"word": " Hel", "start": 0.0, "end": 1.0, "probability": 0.5}]
    assert "partial" not in json.loads(writers.to_json(SEGMENTS, {}))["segments"][0]


def test_word_options_without_words_leave_cues_as_segments():
    opts = SubtitleOptions(max_line_width=5, max_line_count=1, highlight_words=True)
    assert writers.to_srt(SEGMENTS, opts) == writers.to_srt(SEGMENTS)


def test_line_width_and_count_shape_the_cues():
    words = [Word(f" w{i:02d}", i * 0.5, i * 0.5 + 0.4, 0.9) for i in range(8)]
    s = seg(0, 0.0, 4.0, "".join(w.word for w in words))
    s.words = words
    # 4-character words: three fit a 12-character line; two lines a cue.
    srt = writers.to_srt([s], SubtitleOptions(max_line_width=12, max_line_count=2))
    assert srt == ("1\n00:00:00,000 --> 00:00:02,900\nw00 w01 w02\nw03 w04 w05\n\n"
                   "2\n00:00:03,000 --> 00:00:03,900\nw06 w07\n\n")


def test_highlight_underlines_each_word_in_turn():
    s = seg(0, 0.0, 2.0, " Hi there")
    s.words = [Word(" Hi", 0.0, 0.5, 0.9), Word(" there", 1.0, 2.0, 0.9)]
    assert writers.to_vtt([s], SubtitleOptions(highlight_words=True)) == (
        "WEBVTT\n\n"
        "00:00.000 --> 00:00.500\n<u>Hi</u> there\n\n"
        "00:00.500 --> 00:01.000\nHi there\n\n"  # the gap between the words
        "00:01.000 --> 00:02.000\nHi <u>there</u>\n\n")


def test_empty_transcripts_are_valid_documents():
    assert writers.to_txt([]) == ""
    assert writers.to_srt([]) == ""
    assert writers.to_vtt([]) == "WEBVTT\n\n"
    assert writers.to_tsv([]) == "start\tend\ttext\n"
    assert json.loads(writers.to_json([], {"language": None}))["segments"] == []


def test_render_dispatches_and_refuses_unknown_formats():
    for fmt in writers.FORMATS:
        assert writers.render(fmt, SEGMENTS, {}) == (
            writers.to_json(SEGMENTS, {}) if fmt == "json" else
            getattr(writers, f"to_{fmt}")(SEGMENTS))
    with pytest.raises(ValueError):
        writers.render("docx", SEGMENTS, {})


# -- -f parsing -------------------------------------------------------------------------------
@pytest.mark.parametrize("values,expected", [
    (None, ["txt"]),
    ([], ["txt"]),
    (["srt"], ["srt"]),
    (["srt,vtt"], ["srt", "vtt"]),
    (["SRT", "srt", " vtt "], ["srt", "vtt"]),
    (["all"], list(writers.FORMATS)),
    (["json", "all"], ["json", "txt", "srt", "vtt", "tsv"]),
    ([","], ["txt"]),
])
def test_parse_formats(values, expected):
    assert writers.parse_formats(values) == expected


def test_parse_formats_names_the_unknown_format():
    with pytest.raises(ValueError, match="'docx'"):
        writers.parse_formats(["srt,docx"])


# -- files ------------------------------------------------------------------------------------
def test_file_outputs_write_stem_dot_format_and_leave_no_partial_files(tmp_path):
    out = writers.FileOutputs(tmp_path / "sub" / "dir", ["txt", "srt", "json"])
    out.prepare()
    written = out.write("/some/where/talk.final.wav", SEGMENTS, {"language": "en"})
    assert [p.name for p in written] == ["talk.final.txt", "talk.final.srt", "talk.final.json"]
    assert sorted(p.name for p in (tmp_path / "sub" / "dir").iterdir()) == sorted(
        p.name for p in written)
    assert written[1].read_text(encoding="utf-8") == writers.to_srt(SEGMENTS)


def test_file_outputs_refuse_a_file_as_the_output_folder(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(OSError):
        writers.FileOutputs(f, ["txt"]).prepare()


# -- the naming rule across runs and processes (issue #45) ------------------------------------
def test_an_existing_output_is_replaced_and_said_so(tmp_path):
    """Re-running over an output replaces it (as whisper does), never silently: ``replaced``
    names it, whoever wrote it (an earlier run, another process writing the same name)."""
    out = writers.FileOutputs(tmp_path, ["txt", "srt"])
    (tmp_path / "x.txt").write_text("another recording's transcript\n")
    written = out.write("/b/x.wav", SEGMENTS, {})
    assert out.replaced == [tmp_path / "x.txt"]
    assert written[0].read_text() == writers.to_txt(SEGMENTS)
    again = writers.FileOutputs(tmp_path, ["txt", "srt"])
    again.write("/b/x.wav", SEGMENTS, {})
    assert again.replaced == written
    fresh = writers.FileOutputs(tmp_path / "new", ["txt"])
    fresh.write("/b/x.wav", SEGMENTS, {})
    assert fresh.replaced == []
    assert not list(tmp_path.rglob("*.part"))


def test_without_hard_links_the_rule_is_the_same(tmp_path, monkeypatch):
    def no_links(*args):
        raise PermissionError(1, "operation not permitted")

    monkeypatch.setattr(writers.os, "link", no_links)
    out = writers.FileOutputs(tmp_path, ["txt"])
    out.write("/a/x.wav", SEGMENTS, {})
    assert out.replaced == []
    writers.FileOutputs(tmp_path, ["txt"]).write("/b/x.wav", SEGMENTS, {})
    second = writers.FileOutputs(tmp_path, ["txt"])
    second.write("/c/x.wav", SEGMENTS, {})
    assert second.replaced == [tmp_path / "x.txt"]
    assert not list(tmp_path.glob("*.part"))


def test_each_process_writes_its_own_temporary_file(tmp_path, monkeypatch):
    """Two processes writing ``x.txt`` at once never share a ``.part`` file (their bytes would
    mix): the temporary name holds the process id."""
    opened = []
    real_open = open

    def spy(path, *args, **kw):
        opened.append(Path(path).name)
        return real_open(path, *args, **kw)

    monkeypatch.setattr("builtins.open", spy)
    writers.FileOutputs(tmp_path, ["txt"]).write("/a/x.wav", SEGMENTS, {})
    assert opened == [f"x.txt.{os.getpid()}.part"]


def test_one_run_never_writes_two_inputs_into_one_file(tmp_path):
    out = writers.FileOutputs(tmp_path, ["txt"])
    first = out.write("/a/x.wav", SEGMENTS, {})
    second = out.write("/b/x.wav", SEGMENTS[:1], {})
    assert [p.name for p in first + second] == ["x.txt", "x-2.txt"]
    assert out.replaced == []
