"""Transcript writers produce exactly the formats whisper users and subtitle players expect."""

from __future__ import annotations

import json

import pytest

from as2d import writers
from as2d.runtime.transcribe.transcriber import Segment


def seg(i, start, end, text, tokens=(1, 2)):
    return Segment(i, 0, start, end, text, list(tokens), -0.25, 1.2, 0.01)


SEGMENTS = [
    seg(0, 0.0, 2.5, " Hello there."),
    seg(1, 2.5, 61.04, " General --> Kenobi!"),
    seg(2, 3599.9996, 3723.4567, " Ça\tva?\n\nOui."),
]


# -- timestamps -------------------------------------------------------------------------------
@pytest.mark.parametrize("seconds,srt,vtt", [
    (0.0, "00:00:00,000", "00:00:00.000"),
    (1.5, "00:00:01,500", "00:00:01.500"),
    (61.04, "00:01:01,040", "00:01:01.040"),
    (59.9996, "00:01:00,000", "00:01:00.000"),  # rounding carries into the minutes
    (3723.4567, "01:02:03,457", "01:02:03.457"),
    (36000.0, "10:00:00,000", "10:00:00.000"),
    (-0.2, "00:00:00,000", "00:00:00.000"),  # never negative
])
def test_subtitle_timestamps(seconds, srt, vtt):
    assert writers.srt_time(seconds) == srt
    assert writers.vtt_time(seconds) == vtt


# -- documents --------------------------------------------------------------------------------
def test_txt_is_one_stripped_line_per_segment():
    assert writers.to_txt(SEGMENTS) == "Hello there.\nGeneral --> Kenobi!\nÇa\tva?\n\nOui.\n"


def test_srt_numbers_cues_and_ends_each_with_a_blank_line():
    assert writers.to_srt(SEGMENTS) == (
        "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
        "2\n00:00:02,500 --> 00:01:01,040\nGeneral -> Kenobi!\n\n"
        "3\n01:00:00,000 --> 01:02:03,457\nÇa\tva?\nOui.\n\n"
    )


def test_vtt_has_its_header_and_dotted_timestamps():
    assert writers.to_vtt(SEGMENTS) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:02.500\nHello there.\n\n"
        "00:00:02.500 --> 00:01:01.040\nGeneral -> Kenobi!\n\n"
        "01:00:00.000 --> 01:02:03.457\nÇa\tva?\nOui.\n\n"
    )


def test_subtitles_skip_cues_without_text_and_keep_numbering_contiguous():
    segs = [seg(0, 0, 1, " one"), seg(1, 1, 2, "   "), seg(2, 2, 3, " three")]
    assert writers.to_srt(segs) == ("1\n00:00:00,000 --> 00:00:01,000\none\n\n"
                                    "2\n00:00:02,000 --> 00:00:03,000\nthree\n\n")
    assert writers.to_vtt(segs).count(" --> ") == 2


def test_tsv_is_whisper_style_integer_milliseconds_one_row_per_segment():
    assert writers.to_tsv(SEGMENTS) == (
        "start\tend\ttext\n"
        "0\t2500\tHello there.\n"
        "2500\t61040\tGeneral --> Kenobi!\n"
        "3600000\t3723457\tÇa va? Oui.\n"
    )
    rows = writers.to_tsv(SEGMENTS).splitlines()
    assert all(len(r.split("\t")) == 3 for r in rows)


def test_json_carries_info_text_and_every_segment():
    info = {"language": "en", "duration": 3724.0, "source": "talk.wav", "model": "base-int8"}
    doc = json.loads(writers.to_json(SEGMENTS, info))
    for k, v in info.items():
        assert doc[k] == v
    assert doc["text"] == "".join(s.text for s in SEGMENTS)
    assert [s["id"] for s in doc["segments"]] == [0, 1, 2]
    first = doc["segments"][0]
    assert first["start"] == 0.0 and first["end"] == 2.5 and first["text"] == " Hello there."
    assert first["tokens"] == [1, 2]
    assert set(first) >= {"id", "seek", "start", "end", "text", "tokens", "avg_logprob",
                          "compression_ratio", "no_speech_prob", "temperature"}
    assert doc["segments"][2]["end"] == 3723.457  # rounded to milliseconds
    assert "Ça" in writers.to_json(SEGMENTS, info), "non-ASCII text is written as is"


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
