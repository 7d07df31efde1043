"""Diarization: the DER scorer, speakers onto words and segments, the writers' speaker forms,
the command's errors, and the whole pipeline on a real two-speaker recording (two real
readers joined), tokens unchanged by --diarize."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from as2d import writers
from as2d.runtime.speakers.assign import assign_speakers, speaker_at
from as2d.runtime.speakers.der import der
from as2d.runtime.speakers.diarize import Turn
from as2d.runtime.transcribe.longform import Segment
from as2d.runtime.whisper.alignment import Word
from tests.helpers import cli, error_line, write_wav


# -- DER --------------------------------------------------------------------------------------
def test_der_hand_worked():
    ref = [(0.0, 10.0, "a"), (10.0, 20.0, "b")]
    assert der(ref, [(0.0, 10.0, "x"), (10.0, 20.0, "y")], collar=0)["der"] == 0.0
    # second half given to the wrong speaker: 10 s confusion of 20
    d = der(ref, [(0.0, 20.0, "x")], collar=0)
    assert d["confusion"] == pytest.approx(10.0) and d["der"] == pytest.approx(0.5)
    # 2 s missed, 1 s false alarm
    d = der(ref, [(0.0, 8.0, "x"), (10.0, 21.0, "y")], collar=0)
    assert d["missed"] == pytest.approx(2.0) and d["false_alarm"] == pytest.approx(1.0)
    # the collar forgives boundaries within 0.25 s
    assert der(ref, [(0.2, 10.2, "x"), (10.2, 19.8, "y")])["der"] == 0.0
    # overlap counted: both talk 5..10 in the reference, the system hears one
    d = der([(0.0, 10.0, "a"), (5.0, 15.0, "b")], [(0.0, 10.0, "x"), (10.0, 15.0, "y")],
            collar=0)
    assert d["total"] == pytest.approx(20.0) and d["missed"] == pytest.approx(5.0)


# -- what is embedded -------------------------------------------------------------------------
def test_a_voice_is_embedded_from_its_windows_own_parts_once():
    """One voice through three half-overlapping windows: each window embeds only its own part
    (no speech twice, none left out); a voice heard only outside a window's own part, or
    too little there, is embedded from all its clean speech in that window."""
    from as2d.runtime.speakers.diarize import DiarizeParams, _local_clips
    from as2d.runtime.speakers.segmentation import FRAMES, LocalActivity

    act = np.zeros((3, FRAMES, 3), dtype=np.uint8)
    act[:, :, 0] = 1  # local speaker 0 talks alone throughout
    # the middle window's speaker 1: alone for its first 1.7 s, outside the window's own part
    act[1, :100, 1], act[1, :100, 0] = 1, 0
    seg = LocalActivity([0, 80000, 160000], act)
    clips = {(i, k): set(rows.tolist()) for i, k, _, rows in
             _local_clips(320000, seg, DiarizeParams(owned_only=3.0))}
    own = [clips[(i, 0)] for i in range(3)]
    assert not (own[0] & own[1]) and not (own[1] & own[2])
    assert sorted(own[0] | own[1] | own[2]) == list(range(min(own[0]), max(own[2]) + 1))
    assert min(own[1]) * 160 > 80000 + 2 * 16000 and max(own[1]) * 160 < 80000 + 8 * 16000
    # speaker 1's clean speech lies before the middle window's own part: embedded anyway
    assert len(clips[(1, 1)]) > 150 and max(clips[(1, 1)]) * 160 < 80000 + 2 * 16000
    # owned_only=0: every window embeds all its clean speech, so the overlaps twice
    whole = {(i, k): rows for i, k, _, rows in
             _local_clips(320000, seg, DiarizeParams(owned_only=0.0))}
    assert sum(len(whole[(i, 0)]) for i in range(3)) > 1.4 * sum(len(o) for o in own)


def test_local_speakers_pair_with_speakers_as_an_assignment_solver_pairs_them():
    """The exhaustive pairing of a window's local speakers (at most three) with the
    recording's speakers is scipy's optimal assignment, on random similarities of every
    shape."""
    from scipy.optimize import linear_sum_assignment

    from as2d.runtime.speakers.diarize import best_pairs

    rng = np.random.default_rng(7)
    for n in (1, 2, 3):
        for k in (*range(1, 9), 40):
            for _ in range(20):
                sim = rng.uniform(-1, 1, (n, k))
                rows, cols = best_pairs(sim)
                want_rows, want_cols = linear_sum_assignment(-sim)
                assert rows.tolist() == want_rows.tolist()
                assert cols.tolist() == want_cols.tolist()
    assert [a.size for a in best_pairs(np.zeros((0, 4)))] == [0, 0]


# -- stopping ---------------------------------------------------------------------------------
def test_a_stopped_diarization_ends_at_its_next_window_and_nobody_waits():
    """A cancelled transcription stops its diarization: the work checks the flag between
    windows (segmenter batches, fbank chunks, embedding runs), and the running one returns."""
    import threading
    import time

    from as2d.runtime.speakers.diarize import diarize_samples, recording_fbank
    from as2d.runtime.speakers.pipeline import DiarizationStopped, RunningDiarization

    stop = threading.Event()
    stop.set()
    with pytest.raises(DiarizationStopped):
        recording_fbank(np.zeros(16000 * 60, dtype=np.float32), stop)
    calls = []

    def segmenter(samples, step, stop=None):
        calls.append(stop)
        from as2d.runtime.speakers.stop import check_stop
        check_stop(stop)

    with pytest.raises(DiarizationStopped):
        diarize_samples(np.zeros(16000 * 20, dtype=np.float32), segmenter, None, stop=stop)
    assert calls == [stop]

    started = threading.Event()

    class Slow:  # a diarization of a long file: one window a while
        def diarize(self, samples, options, stop):
            started.set()
            for _ in range(600):
                if stop.wait(0.05):
                    raise DiarizationStopped("stopped")
            return "finished"

    running = RunningDiarization(Slow(), np.zeros(16000, dtype=np.float32))
    assert started.wait(5)
    t0 = time.perf_counter()
    running.stop()
    with pytest.raises(DiarizationStopped):
        running.result()
    assert time.perf_counter() - t0 < 2 and running.done()


def test_speaker_names_and_clip_lengths_are_checked_before_any_model():
    from as2d.runtime.speakers.diarize import TooShortError
    from as2d.runtime.speakers.pipeline import Diarizer
    from as2d.runtime.speakers.speaker_options import SpeakerOptions, name_problem

    assert name_problem("Ann") is None and name_problem("José Ann-Marie") is None
    for bad in ("<b>Ann", "Ann>", "Ann\nBob", "A" * 101):
        assert name_problem(bad)
        with pytest.raises(ValueError):
            SpeakerOptions(references=((bad, "ann.wav"),))
    diarizer = object.__new__(Diarizer)  # the checks come before the models are used
    with pytest.raises(TooShortError) as err:
        diarizer.diarize(np.zeros(1600, dtype=np.float32))
    assert err.value.option == "file" and err.value.as_flags().startswith("the audio is 0.10 s")
    with pytest.raises(ValueError, match="at most 30 s"):
        diarizer.reference_embedding("Ann", np.zeros(16000 * 31, dtype=np.float32))


# -- words and segments -----------------------------------------------------------------------
def _segment(words, tokens_per_word=2):
    ws, toks, t = [], [50364], 100
    for text, a, b in words:
        wt = list(range(t, t + tokens_per_word))
        t += tokens_per_word
        ws.append(Word(text, a, b, 0.9, tokens=wt))
        toks += wt
    toks.append(50400)
    return Segment(0, 0, words[0][1], words[-1][2], "".join(w[0] for w in words), toks,
                   -0.2, 1.2, 0.01, words=ws)


def test_words_take_the_speaker_of_most_of_their_span_and_segments_split():
    seg = _segment([(" Hello", 0.0, 0.4), (" there.", 0.4, 0.9), (" Hi", 1.2, 1.5),
                    (" Bob.", 1.5, 2.0)])
    turns = [Turn(0.0, 1.0, "SPEAKER_00"), Turn(0.95, 2.1, "SPEAKER_01")]
    out = assign_speakers([seg], turns)
    assert [s.speaker for s in out] == ["SPEAKER_00", "SPEAKER_01"]
    assert [s.text for s in out] == [" Hello there.", " Hi Bob."]
    assert [t for s in out for t in s.tokens] == seg.tokens  # not a token changed
    assert "".join(s.text for s in out) == seg.text
    assert [s.id for s in out] == [0, 1] and out[1].start == 1.2
    assert [w.speaker for s in out for w in s.words] == ["SPEAKER_00"] * 2 + ["SPEAKER_01"] * 2


def test_segment_without_word_tokens_is_kept_whole():
    seg = _segment([(" Hello", 0.0, 0.4), (" Bob.", 1.5, 2.0)])
    for w in seg.words:
        w.tokens = []
    out = assign_speakers([seg], [Turn(0.0, 0.5, "A"), Turn(1.0, 2.0, "B"),
                                  Turn(2.0, 2.5, "B")])
    assert len(out) == 1 and out[0].tokens == seg.tokens and out[0].speaker == "B"
    assert speaker_at([Turn(0.0, 1.0, "A")], 5.0, 5.5) is None  # far from any turn


# -- writers ----------------------------------------------------------------------------------
def test_writers_say_who_speaks():
    seg = _segment([(" Hello", 0.0, 0.4), (" Hi", 1.2, 1.5)])
    out = assign_speakers([seg], [Turn(0.0, 1.0, "SPEAKER_00"), Turn(1.1, 2.0, "SPEAKER_01")])
    info = {"language": "en", "source": "my talk.wav",
            "speakers": [{"speaker": "SPEAKER_00", "speaking_time": 1.0}],
            "speaker_turns": [{"start": 0.0, "end": 1.0, "speaker": "SPEAKER_00"},
                              {"start": 1.1, "end": 2.0, "speaker": "SPEAKER_01"}]}
    assert writers.render("txt", out, info) == "[SPEAKER_00]: Hello\n[SPEAKER_01]: Hi\n"
    assert "\n[SPEAKER_01]: Hi\n" in writers.render("srt", out, info)
    assert "<v SPEAKER_00>Hello\n" in writers.render("vtt", out, info)
    assert writers.render("rttm", out, info).splitlines() == [
        "SPEAKER my_talk 1 0.000 1.000 <NA> <NA> SPEAKER_00 <NA> <NA>",
        "SPEAKER my_talk 1 1.100 0.900 <NA> <NA> SPEAKER_01 <NA> <NA>"]
    doc = json.loads(writers.render("json", out, info))
    assert [s["speaker"] for s in doc["segments"]] == ["SPEAKER_00", "SPEAKER_01"]
    assert doc["segments"][1]["words"][0]["speaker"] == "SPEAKER_01"
    assert doc["speakers"][0] == {"speaker": "SPEAKER_00", "speaking_time": 1.0}
    with pytest.raises(ValueError, match="diarize"):
        writers.render("rttm", out, {"language": "en"})


# -- command errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--diarize", "--num-speakers", "0"], ["--num-speakers", "1 or more"]),
    (["--diarize", "--min-speakers", "3", "--max-speakers", "2"], ["--min-speakers"]),
    (["--diarize", "--num-speakers", "2", "--max-speakers", "3"], ["cannot be given"]),
    (["--num-speakers", "2"], ["need --diarize"]),
    (["-f", "rttm"], ["rttm needs --diarize"]),
    (["--diarize", "--speaker", "Ann"], ["NAME=FILE"]),
    (["--diarize", "--speaker", "Ann=/no/such.wav"], ["no such file"]),
])
def test_bad_speaker_options_are_one_line_errors(args, words, tmp_path):
    clip = write_wav(tmp_path / "a.wav", np.zeros(16000, dtype=np.float32))
    error_line(cli("transcribe", clip, *args), 2, *words)


# -- the pipeline on real speech --------------------------------------------------------------
@pytest.fixture(scope="module")
def two_readers(clips, tmp_path_factory):
    """The LibriVox reader and the moonshine reader of A Tale of Two Cities, in turns: hers
    (7 s), his (8 s), hers again (8 s), 24.5 s with the pauses. One Whisper window: every
    test of the module transcribes and diarizes it, and nothing here is about a second
    window; a fourth turn (his again) lengthened every run by a window and told the voices
    apart no better (measured alone: 1.0 s of 29 confused, against 0.7 s of 21.5)."""
    from bench.questions import _read_16k

    austen = [c.path for c in clips if "austen" in c.path.name]
    dickens = [c.path for c in clips if c.path.name == "two_cities.wav"]
    if not austen or not dickens:
        pytest.skip("needs pocketsphinx-testdata and moonshine-voice")
    a = np.concatenate([_read_16k(p) for p in austen])
    b = _read_16k(dickens[0])
    gap = np.zeros(8000, dtype=np.float32)
    parts, turns, t = [], [], 0.0
    for who, x in (("A", a[:7 * 16000]), ("B", b[:8 * 16000]), ("A", a[7 * 16000:15 * 16000])):
        x = x / max(np.sqrt(np.mean(x ** 2)), 1e-6) * 0.05
        parts += [x.astype(np.float32), gap]
        turns.append((t, t + len(x) / 16000, who))
        t += (len(x) + len(gap)) / 16000
    path = write_wav(tmp_path_factory.mktemp("diar") / "two.wav", np.concatenate(parts))
    return path, turns


def _transcribe_json(path, models_root, out, decoder, *extra) -> dict:
    r = cli("transcribe", path, "-m", "tiny.en", "--decoder", decoder, "-f", "json",
            "-o", out, "-q", *extra, models_dir=models_root)
    assert r.exit_code == 0, r.stderr
    return json.loads((out / "two.json").read_text())


def test_diarize_never_changes_a_token(two_readers, models_root, tmp_path):
    """--diarize changes no token and finds the two real speakers (their turns held to the
    reference by DER). The diarizer runs on a thread of its own beside the decoder and labels
    the segments once they are decoded, whichever decoder made them: it runs beside AS²D
    here (its drafter named), which shares the cores with its drafter too. Its tokens are held to a
    plain run's (no --diarize) of the target alone: AS²D is lossless (tests/test_as2d.py)."""
    path, ref = two_readers
    plain = _transcribe_json(path, models_root, tmp_path / "plain", "target")
    # A named drafter: a one-window recording is otherwise decoded by the target alone.
    diarized = _transcribe_json(path, models_root, tmp_path, "as2d", "--diarize",
                                "--drafter", "tiny.en")
    assert diarized["decoder"] == "as2d", diarized["decoder"]
    assert [t for s in diarized["segments"] for t in s["tokens"]] == [
        t for s in plain["segments"] for t in s["tokens"]]
    assert {s["speaker"] for s in diarized["segments"]} == {"SPEAKER_00", "SPEAKER_01"}
    assert len(diarized["speakers"]) == 2
    d = der(ref, [(t["start"], t["end"], t["speaker"]) for t in diarized["speaker_turns"]])
    # The reference spans whole turns, pauses within them included (missed here): the
    # speakers must be told apart over most of the speech (measured: 0.7 s of 21.5 confused,
    # where one reader takes over from the other mid-window).
    assert d["confusion"] / d["total"] < 0.15 and d["der"] < 0.3, d


# -- the server -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def diarizing_server(models_root, tmp_path_factory):
    """One ``as2d serve -m tiny.en`` on loopback for the server's speaker tests (the OpenAI
    client's diarized_json, its stream, the page)."""
    import signal

    from tests.test_serve import KEY, _start

    srv = _start(models_root, tmp_path_factory.mktemp("serve-diar"), "-m", "tiny.en",
                 "--api-key", KEY)
    yield srv
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(60)
    assert "Traceback" not in srv.stderr(), srv.stderr()


def _data_url(path) -> str:
    import base64

    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def diarized_doc(two_readers, diarizing_server):
    """The server's diarized_json of the two readers, through the official client."""
    with open(two_readers[0], "rb") as f:
        return diarizing_server.client().audio.transcriptions.create(
            model="whisper-1", file=f, response_format="diarized_json",
            chunking_strategy="auto")


def _first_readers_clip(two_readers, folder: Path) -> Path:
    """The first reader's second turn as a clip of its own: a known speaker's reference."""
    import soundfile as sf

    path, ref = two_readers
    x, rate = sf.read(path, dtype="float32")
    return write_wav(folder / "ann.wav", x[int(ref[2][0] * rate):int(ref[2][1] * rate)])


def test_server_diarized_json_through_the_openai_client(two_readers, diarizing_server,
                                                        diarized_doc, tmp_path):
    """OpenAI's diarized_json on loopback, the official client: speakers lettered A, B (named
    from a known speaker's clip: test_server_streams_named_speakers_through_the_openai_client,
    one run for both). A name that would break a VTT <v name> span or an SRT cue, names and
    clips that do not pair up, a reference that is a recording, not a clip, and a main file
    too short: each a 400 naming the right field."""
    import soundfile as sf

    path, ref = two_readers
    url = _data_url(_first_readers_clip(two_readers, tmp_path))
    client = diarizing_server.client()
    plain = diarized_doc
    assert {s.speaker for s in plain.segments} == {"A", "B"}
    assert plain.segments[0].speaker == "A" and plain.segments[0].type == \
        "transcript.text.segment"
    with open(path, "rb") as f, pytest.raises(openai_errors().BadRequestError):
        client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="diarized_json",
            known_speaker_names=["Ann", "Bob"], known_speaker_references=[url])
    long_clip = tmp_path / "long.wav"
    write_wav(long_clip, np.zeros(16000 * 31, dtype=np.float32))
    long_url = _data_url(long_clip)
    short = write_wav(tmp_path / "short.wav", np.zeros(1600, dtype=np.float32))
    # A reference is measured when it is embedded, once the recording is diarized: the
    # request that sends the long one is a recording of one speaker to name (the first
    # reader's first turn), not the whole one, decoded and diarized for nothing.
    x, rate = sf.read(path, dtype="float32")
    first_turn = write_wav(tmp_path / "first.wav", x[:int(ref[0][1] * rate)])
    for file, names, refs, param in (
            (path, ["Ann</v>"], [url], "known_speaker_names"),
            (path, ["Ann\nBob"], [url], "known_speaker_names"),
            (first_turn, ["Ann"], [long_url], "known_speaker_references"),
            (short, ["Ann"], [url], "file")):
        with open(file, "rb") as f, pytest.raises(openai_errors().BadRequestError) as err:
            client.audio.transcriptions.create(
                model="whisper-1", file=f, response_format="diarized_json",
                known_speaker_names=names, known_speaker_references=refs)
        assert err.value.param == param, (names, err.value.body)
        assert "\n" not in err.value.message


def test_server_streams_named_speakers_through_the_openai_client(two_readers,
                                                                diarizing_server,
                                                                diarized_doc, tmp_path):
    """``stream=true`` with diarized_json and a known speaker's clip (a data URL), read by the
    official client's stream: the text's deltas as it is decoded, then OpenAI's
    ``transcript.text.segment`` events, then ``transcript.text.done``. The segments are the
    non-streamed document's (fields, ids, text) but for their speakers: the first reader is
    named after the clip, the other lettered A (a name only relabels a speaker's turns). One
    run for the stream and the names: each is a transcription and a diarization of the whole
    recording. A file too short to diarize is a 400 before any event."""
    path, _ = two_readers
    client, whole = diarizing_server.client(), diarized_doc
    url = _data_url(_first_readers_clip(two_readers, tmp_path))
    with open(path, "rb") as f:
        events = list(client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="diarized_json", stream=True,
            known_speaker_names=["Ann"], known_speaker_references=[url]))
    kinds = [e.type for e in events]
    first_segment = kinds.index("transcript.text.segment")
    assert set(kinds[:first_segment]) == {"transcript.text.delta"}
    assert set(kinds[first_segment:-1]) == {"transcript.text.segment"}
    assert kinds[-1] == "transcript.text.done"
    segments = [e for e in events if e.type == "transcript.text.segment"]
    named = {"A": "Ann", "B": "A"}
    assert [s.model_dump() for s in segments] == [
        {**s.model_dump(), "speaker": named[s.speaker]} for s in whole.segments]
    assert segments[0].speaker == "Ann" and {s.speaker for s in segments} == {"Ann", "A"}
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta").strip() \
        == events[-1].text == whole.text
    short = write_wav(tmp_path / "short.wav", np.zeros(1600, dtype=np.float32))
    with open(short, "rb") as f, pytest.raises(openai_errors().BadRequestError) as err:
        client.audio.transcriptions.create(
            model="whisper-1", file=f, response_format="diarized_json", stream=True)
    assert err.value.param == "file" and "too short" in err.value.message


def openai_errors():
    import openai

    return openai


def _contrast(rgb: str, background=(255, 255, 255)) -> float:
    """WCAG contrast ratio of a CSS ``rgb(r, g, b)`` colour against ``background``."""
    def lum(c):
        c = [x / 255 for x in c]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    fg = [int(v) for v in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3]]
    a, b = sorted((lum(fg), lum(background)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def test_the_page_shows_speakers_in_colour_in_chromium(two_readers, diarizing_server, tmp_path):
    """Headless Chromium: the page's Speakers box asks for diarized_json; every line shows its
    speaker's label in that speaker's colour (one per speaker, each readable on white), the
    downloads say who speaks, and the page's strict CSP is never violated."""
    import asyncio
    import base64
    import os
    import time

    from tests.conftest import ROOT
    from tests.test_serve import KEY, _browser, _chromium, _devtools

    if _chromium() is None:
        pytest.skip("chromium is not installed (apt)")
    path, _ = two_readers
    profile = tmp_path / "profile"
    browser = _browser(profile, size="1100,900")

    async def run():
        cdp = await _devtools(profile, browser)
        ws, deadline = cdp.ws, time.monotonic() + 60
        try:
            await cdp.call("Page.enable")
            await cdp.call("Page.addScriptToEvaluateOnNewDocument", source=(
                "window.cspViolations = []; document.addEventListener("
                "'securitypolicyviolation', (e) => window.cspViolations.push("
                "e.violatedDirective + ' ' + e.blockedURI));"))
            await cdp.call("Page.navigate", url=diarizing_server.url + "/")
            while await cdp.js("document.readyState") != "complete":
                await asyncio.sleep(0.1)
            while await cdp.js("document.getElementById('status').textContent") != "ready":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            await cdp.js(f"state.key = {json.dumps(KEY)}; document.getElementById('speakers')"
                         ".click(); true")
            doc = await cdp.call("DOM.getDocument")
            node = await cdp.call("DOM.querySelector", nodeId=doc["root"]["nodeId"],
                                  selector="#picker")
            await cdp.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node["nodeId"])
            deadline = time.monotonic() + 120
            while not await cdp.js("state.segments !== null && state.segments.length > 0"):
                assert time.monotonic() < deadline, await cdp.js(
                    "document.getElementById('file-state').textContent")
                await asyncio.sleep(0.1)
            lines = await cdp.js(
                "[...document.querySelectorAll('#segments > div')].map((l) => {"
                " const w = l.querySelector('.who');"
                " return {who: w && w.textContent, colour: w && getComputedStyle(w).color,"
                " bar: getComputedStyle(l).borderLeftColor, text: l.textContent}; })")
            shot = base64.b64decode((await cdp.call("Page.captureScreenshot",
                                                    format="png"))["data"])
            out = ROOT / "docs" if os.environ.get("AS2D_DOCS_SCREENSHOT") else tmp_path
            (out / "serve-speakers.png").write_bytes(shot)
            return (lines, await cdp.js("state.segments.map((s) => s.speaker)"),
                    await cdp.js("writers.txt(state.segments)"),
                    await cdp.js("writers.vtt(state.segments)"),
                    await cdp.js("document.getElementById('file-state').textContent"),
                    await cdp.js("window.cspViolations"))
        finally:
            await ws.close()

    try:
        lines, speakers, txt, vtt, status, violations = asyncio.run(run())
    finally:
        browser.terminate()
        browser.wait(30)
    assert violations == []
    assert [line["who"] for line in lines] == speakers and set(speakers) == {"A", "B"}
    colour = {}
    for line in lines:  # one colour per speaker, on its label and its line's bar alike
        assert colour.setdefault(line["who"], line["colour"]) == line["colour"] == line["bar"]
        assert _contrast(line["colour"]) >= 4.5, line
    assert colour["A"] != colour["B"]
    assert txt.splitlines()[0].startswith("[A]: ") and "<v B>" in vtt
    assert status.endswith("2 speakers")


# -- ask: who said it -------------------------------------------------------------------------
@pytest.mark.parametrize("question, words", [
    ("Who said 'it was the best of times'?", "'it was the best of times'?"),
    ("Which speaker asked about the rent?", "about the rent?"),
    ("Who was speaking about the age of wisdom?", "about the age of wisdom?"),
    ("who says that the war was lost?", "the war was lost?"),
    ("Who is Mr. John Dashwood?", None),  # a person, not a voice
    ("Who did the reader say was ill-disposed?", None),  # a person mentioned
    ("Who was ill-disposed?", None),
    ("Who said hello?", "hello?"),
    ("Who spoke first?", None),  # the turns' order, no words said
    ("Which speaker talked the most?", None),
])
def test_who_said_questions_are_told_from_questions_about_people(question, words):
    from as2d.runtime.ask.english.who import who_said

    assert who_said(question) == words


def test_spans_take_their_speaker_and_who_said_finds_the_passage(tmp_path):
    from as2d.cli.ask_cmd import _hint_speakers
    from as2d.engine import Heard
    from as2d.runtime.ask.attribution import has_speakers, label_spans, who_said
    from as2d.runtime.ask.judge import judge
    from as2d.runtime.ask.policies import policy_for
    from as2d.runtime.ask.spans import Span
    from as2d.runtime.ask.transcripts import Transcript, read_whisper_json

    spans = [Span(0.0, 4.0, " The rent is due on Friday."),
             Span(4.5, 9.0, " I paid the rent last week, so it was the best of times."),
             Span(30.0, 31.0, " Fine.")]
    turns = [Turn(0.0, 4.2, "Ann"), Turn(4.4, 8.0, "SPEAKER_01"), Turn(8.0, 9.5, "Ann")]
    labelled = label_spans(spans, turns)
    assert [s.speaker for s in labelled] == ["Ann", "SPEAKER_01", None]  # most of it; none near
    assert [s.text for s in labelled] == [s.text for s in spans] and not has_speakers(spans)
    assert labelled[1].to_dict()["speaker"] == "SPEAKER_01" and "speaker" not in spans[1].to_dict()
    assert who_said(labelled, "'the best of times'") == ("SPEAKER_01", 1)
    assert who_said(labelled, "the rent is due") == ("Ann", 0)
    assert who_said(labelled, "the price of tea in China") == (None, None)
    # a passage of several spans (a transcript too long to read whole) takes the speaker who
    # talks longest in it
    from as2d.runtime.ask.passages import passage

    assert passage(labelled, (0, 1)).speaker == "SPEAKER_01"  # 4.5 s against 4.0 s
    assert passage(labelled, (0, 0)).speaker == "Ann" and passage(spans, (0, 2)).speaker is None
    # the judge keeps a speaker as the answer (it is no person's name the transcript says)
    from as2d.runtime.ask.answer import Answer
    from as2d.runtime.ask.answer_events import AnswerStats

    found = Answer("Who said the best of times?", "SPEAKER_01", [], labelled, False, None,
                   "attributed", AnswerStats(), method="attributed", evidence=[labelled[1]])
    judged = judge(found, labelled, found.question, policy_for("en"))
    assert judged.text == "SPEAKER_01" and not judged.abstained
    assert judged.evidence[0].speaker == "SPEAKER_01"
    # a transcript file that says who speaks (as2d transcribe --diarize -f json, whisperX)
    doc = tmp_path / "t.json"
    doc.write_text(json.dumps({"language": "en", "segments": [
        {"start": 0.0, "end": 2.0, "text": " Hello.", "speaker": "SPEAKER_00"},
        {"start": 2.0, "end": 4.0, "text": " Hi."}]}))
    assert [s.speaker for s in read_whisper_json(doc).spans] == ["SPEAKER_00", None]
    # a who-said question about a transcript without speakers: one line says how to have them
    notes = []
    heard = Heard.of(Transcript(tuple(spans), "en", 31.0), "x.wav")
    _hint_speakers(heard, "Who said the rent is due?", notes.append)
    _hint_speakers(heard, "When is the rent due?", notes.append)
    assert len(notes) == 1 and "--diarize" in notes[0]


def test_ask_who_said_it_answers_with_the_speaker(two_readers, models_root, tmp_path,
                                                  monkeypatch):
    """``as2d ask --diarize``: the speaker of the passage that says the words, in the answer
    and in every evidence passage (--json); the same command again reads the cached
    transcript and diarizes it alone; then ``as2d.ask(diarize=True)`` on the cached
    transcript (its own code path) names the first reader from a clip of her voice."""
    import as2d

    monkeypatch.setenv("AS2D_TRANSCRIPT_CACHE", str(tmp_path / "transcripts"))
    path, _ = two_readers
    r = cli("ask", path, "Who said it was the best of times?",
            "Who said that he was not an ill-disposed young man?", "-m", "tiny.en",
            "--diarize", "--json", "-q", models_dir=models_root)
    assert r.exit_code == 0, r.stderr
    best, young = json.loads(r.stdout)
    assert best["method"] == young["method"] == "attributed"
    assert {best["answer"], young["answer"]} == {"SPEAKER_00", "SPEAKER_01"}
    assert "best of times" in best["evidence"][0]["text"]
    assert best["evidence"][0]["speaker"] == best["answer"]
    assert all("speaker" in e for d in (best, young) for e in d["evidence"])
    again = cli("ask", path, "Who said it was the best of times?", "-m", "tiny.en",
                "--diarize", "--json", "-q", models_dir=models_root)  # the cached transcript
    assert again.exit_code == 0, again.stderr
    cached = json.loads(again.stdout)
    assert cached["transcript"] == "cache" and cached["answer"] == best["answer"]
    clip = _first_readers_clip(two_readers, tmp_path)
    named = as2d.ask(str(path), "Who said that he was not an ill-disposed young man?",
                     model="tiny.en", diarize=True, speakers=[f"Ann={clip}"],
                     models_dir=models_root)
    assert named.to_dict()["transcript"] == "cache"  # not transcribed again
    assert named.text == "Ann" and named.evidence[0].speaker == "Ann"
    with pytest.raises(ValueError, match="diarize"):
        as2d.ask(None, "Who said it?", transcript=tmp_path / "x.json", diarize=True)
