"""What a whisper user hands ``as2d transcribe``: any container, a pipe, a hostile file.

Every file here is made from a real LibriVox clip by PyAV (the FFmpeg that ``av``'s wheels
bundle): phone memos (m4a, raw aac), videos (mp4/h264, mkv/mpeg4, webm/vp8), opus, ogg, mp3,
flac; a video with two audio tracks and one with none. The decode tests need no model; the
transcript tests (marked slow) run the real models and check that a container gives the
original's words and that the command line gives the same tokens from a file as from a pipe,
drafted or not (the API's AS²D against the target alone, from a path or an array:
tests/test_api.py; a container is decoded to its samples before any decoder sees it).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers import cli, write_wav

from as2d.runtime import audio as audio_mod
from as2d.runtime.audio import SAMPLE_RATE, AudioError, load_audio

av = pytest.importorskip("av")

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
# extension → how PyAV writes it (codec, container format, video codec, rate, layout)
FORMATS = {
    "m4a": dict(codec="aac"),
    "aac": dict(codec="aac", fmt="adts"),
    "mp4": dict(codec="aac", video="libx264"),
    "mkv": dict(codec="libopus", video="mpeg4"),
    "webm": dict(codec="libopus", video="libvpx"),
    "opus": dict(codec="libopus"),
    "mp3": dict(codec="libmp3lame", rate=44100),
    "flac": dict(codec="flac", rate=16000, layout="mono"),
    "ogg": None,  # Vorbis: FFmpeg's encoder is experimental; libsndfile writes it
}
# Those libsndfile does not read go through FFmpeg.
FFMPEG_ONLY = {"m4a", "aac", "mp4", "mkv", "webm"}


def encode(dest: Path, tracks: list[np.ndarray], *, codec: str = "aac", fmt: str | None = None,
           video: str | None = None, rate: int = 48000, layout: str = "stereo") -> Path:
    """Write 16-kHz mono ``tracks`` as audio streams of ``dest`` (plus a small video)."""
    import soxr

    out = av.open(str(dest), "w", format=fmt)
    seconds = max((len(t) for t in tracks), default=SAMPLE_RATE * 3) / SAMPLE_RATE
    try:
        # Every stream is declared before the first packet is written (the header).
        streams = [out.add_stream(codec, rate=rate, layout=layout) for _ in tracks]
        if video:
            vs = out.add_stream(video, rate=5)
            vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
            for i in range(int(seconds * 5) + 1):
                img = np.full((48, 64, 3), (i * 7) % 255, np.uint8)
                frame = av.VideoFrame.from_ndarray(img, format="rgb24")
                frame.pts = i
                for p in vs.encode(frame):
                    out.mux(p)
            for p in vs.encode(None):
                out.mux(p)
        for s, t in zip(streams, tracks):
            y = soxr.resample(t, SAMPLE_RATE, rate).astype(np.float32) if rate != SAMPLE_RATE \
                else t.astype(np.float32)
            planar = np.repeat(y[None, :], av.AudioLayout(layout).nb_channels, axis=0)
            rs = av.AudioResampler(format=s.codec_context.format.name, layout=layout, rate=rate)
            pts = 0
            for i in range(0, len(y), 4096):
                chunk = np.ascontiguousarray(planar[:, i:i + 4096])
                frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=layout)
                frame.sample_rate, frame.pts = rate, pts
                pts += chunk.shape[1]
                for f in rs.resample(frame):
                    for p in s.encode(f):
                        out.mux(p)
            for f in rs.resample(None):
                for p in s.encode(f):
                    out.mux(p)
            for p in s.encode(None):
                out.mux(p)
    finally:
        out.close()
    return dest


@pytest.fixture(scope="session")
def clip() -> tuple[Path, np.ndarray]:
    path = LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0870.wav"
    if not path.is_file():
        pytest.skip("pocketsphinx-testdata is not installed")
    x, rate = sf.read(str(path), dtype="float32")
    assert rate == SAMPLE_RATE
    return path, x


@pytest.fixture(scope="session")
def other_clip() -> np.ndarray:
    return sf.read(str(LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0880.wav"),
                   dtype="float32")[0]


@pytest.fixture(scope="session")
def dub(clip, other_clip, tmp_path_factory) -> Path:
    """A video with two audio tracks (the clip, then another one), made once per session."""
    return encode(tmp_path_factory.mktemp("dub") / "dub.mkv", [clip[1], other_clip],
                  codec="libopus", video="mpeg4")


@pytest.fixture(scope="session")
def containers(clip, tmp_path_factory) -> dict[str, Path]:
    """The clip in every container format (made once per session)."""
    _, x = clip
    d = tmp_path_factory.mktemp("containers")
    out = {}
    for ext, how in FORMATS.items():
        dest = d / f"clip-{ext}.{ext}"
        if how is None:
            sf.write(str(dest), x, SAMPLE_RATE, format="OGG", subtype="VORBIS")
        else:
            encode(dest, [x], **how)
        out[ext] = dest
    return out


def _aligned_corr(x: np.ndarray, y: np.ndarray) -> float:
    """Correlation after the best shift (codecs add a priming delay), found by FFT."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n = 1 << int(np.ceil(np.log2(len(x) + len(y))))
    xc = np.fft.irfft(np.fft.rfft(x, n) * np.conj(np.fft.rfft(y, n)), n)
    lag = int(np.argmax(xc))
    lag = lag - n if lag > n // 2 else lag  # x[i + lag] ~ y[i]
    a, b = (x[lag:], y) if lag >= 0 else (x, y[-lag:])
    m = min(len(a), len(b))
    return float(np.corrcoef(a[:m], b[:m])[0, 1])


def _one_line(exc, *fragments: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for f in fragments:
        assert f.lower() in msg.lower(), f"{f!r} not in {msg!r}"
    return msg


# -- every container decodes to the clip ------------------------------------------------------
@pytest.mark.parametrize("ext", list(FORMATS))
def test_every_container_decodes_to_the_same_speech(containers, clip, ext):
    _, x = clip
    a = load_audio(containers[ext])
    assert a.reader == ("ffmpeg" if ext in FFMPEG_ONLY else a.reader)
    assert a.samples.dtype == np.float32 and np.isfinite(a.samples).all()
    assert abs(a.duration - len(x) / SAMPLE_RATE) < 0.1, "duration changed"
    assert _aligned_corr(x, np.asarray(a.samples)) > 0.97


def test_a_wav_read_by_ffmpeg_through_a_pipe_equals_libsndfile_reading_the_file(clip):
    path, x = clip
    r, w = os.pipe()
    data = path.read_bytes()
    threading.Thread(target=lambda: (os.write(w, data), os.close(w)), daemon=True).start()
    try:
        a = load_audio(f"/dev/fd/{r}")
    finally:
        os.close(r)
    assert a.reader == "ffmpeg"
    np.testing.assert_array_equal(a.samples, x)


@pytest.mark.parametrize("ext", ["mp3", "m4a", "flac", "webm"])
def test_compressed_audio_through_a_pipe_never_trusts_a_frame_count(containers, ext):
    """``<(cat x.mp3)``: the stream cannot seek and has no length; all of it is decoded
    (an m4a, whose index is written at its end, from a temporary copy of the stream)."""
    whole = load_audio(containers[ext])
    r, w = os.pipe()
    data = containers[ext].read_bytes()

    def writer():
        for i in range(0, len(data), 4096):  # a slow writer, in small pieces
            os.write(w, data[i:i + 4096])
        os.close(w)

    threading.Thread(target=writer, daemon=True).start()
    try:
        piped = load_audio(f"/proc/self/fd/{r}")
    finally:
        os.close(r)
    assert not piped.truncated
    assert abs(len(piped.samples) - len(whole.samples)) < 0.05 * SAMPLE_RATE
    assert _aligned_corr(np.asarray(whole.samples), piped.samples) > 0.97


def test_a_binary_file_object_is_accepted(containers, clip):
    with open(containers["m4a"], "rb") as f:
        a = load_audio(f)
    assert a.reader == "ffmpeg" and abs(a.duration - len(clip[1]) / SAMPLE_RATE) < 0.1


# -- videos: which audio stream, and none -----------------------------------------------------
def test_a_video_with_two_audio_streams_gives_the_first_and_says_so(dub, clip, other_clip):
    _, x = clip
    a = load_audio(dub)
    assert a.streams == 2 and a.stream is not None and a.stream.startswith("stream 1 of 2")
    n = min(len(x), len(other_clip))
    assert _aligned_corr(x[:n], np.asarray(a.samples)[:n]) > 0.97
    assert _aligned_corr(other_clip[:n], np.asarray(a.samples)[:n]) < 0.5


def test_a_video_with_no_audio_stream_is_one_clear_error(tmp_path):
    p = encode(tmp_path / "silent-film.mp4", [], video="libx264")
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "silent-film.mp4", "no audio stream", "only video")


def test_a_file_neither_reader_knows_is_one_clear_error(tmp_path):
    p = tmp_path / "notes.m4a"
    # the same bytes every run (random ones could, once in a while, hold an MP3 frame)
    p.write_bytes(np.random.default_rng(0).bytes(3000))
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "notes.m4a", "not a supported audio file")


# -- pipes, names -----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_named_pipe_with_no_writer_is_an_error_after_the_wait_not_a_hang(tmp_path):
    fifo = tmp_path / "feed"
    os.mkfifo(fifo)
    notes = []
    t0 = time.monotonic()
    with pytest.raises(AudioError) as exc:
        load_audio(fifo, fifo_timeout=0.5, on_wait=notes.append)
    waited = time.monotonic() - t0
    _one_line(exc, "feed", "no writer", "0.5 s")
    assert 0.45 < waited < 10
    assert notes and "waiting" in notes[0]


def test_a_named_pipe_with_a_writer_is_read(tmp_path, containers, clip):
    fifo = tmp_path / "feed"
    os.mkfifo(fifo)
    data = containers["opus"].read_bytes()

    waiting = threading.Event()  # set when the reader says it waits for a writer

    def writer():
        if waiting.wait(30):  # a writer that comes while the reader waits (a state, no delay)
            with open(fifo, "wb") as f:
                f.write(data)

    threading.Thread(target=writer, daemon=True).start()
    a = load_audio(fifo, fifo_timeout=20, on_wait=lambda note: waiting.set())
    assert waiting.is_set()
    assert a.reader == "ffmpeg" and abs(a.duration - len(clip[1]) / SAMPLE_RATE) < 0.1


@pytest.mark.parametrize("ext", ["wav", "m4a"])
def test_a_filename_that_is_not_utf8_is_read_and_printable(tmp_path, clip, containers, ext):
    src = clip[0] if ext == "wav" else containers["m4a"]
    raw = os.fsencode(tmp_path) + b"/caf\xe9." + ext.encode()
    with open(raw, "wb") as f:
        f.write(src.read_bytes())
    a = load_audio(raw)  # bytes, as a shell hands it over
    b = load_audio(os.fsdecode(raw))  # str with surrogates, as sys.argv holds it
    assert len(a) == len(b) > SAMPLE_RATE
    assert a.source.endswith("caf\\xe9." + ext)
    a.source.encode("utf-8")  # printable
    with pytest.raises(AudioError) as exc:
        load_audio(os.fsencode(tmp_path) + b"/missing-\xff.wav")
    _one_line(exc, "missing-\\xff.wav", "no such file").encode("utf-8")


# -- hostile headers, temp space, length ------------------------------------------------------
def test_a_wav_declaring_1_hz_is_refused_before_expanding(tmp_path, clip):
    data = bytearray(clip[0].read_bytes()[:20000])
    assert data[:4] == b"RIFF" and data[12:16] == b"fmt "
    data[24:28] = (1).to_bytes(4, "little")  # sample rate
    data[28:32] = (2).to_bytes(4, "little")  # byte rate, consistent with it
    p = tmp_path / "one-hertz.wav"
    p.write_bytes(bytes(data))
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "one-hertz.wav", "implausible sample rate 1 Hz")


def test_audio_longer_than_the_limit_is_refused(monkeypatch, clip):
    monkeypatch.setattr(audio_mod, "MAX_HOURS", 2 / 3600)
    with pytest.raises(AudioError) as exc:
        load_audio(clip[0])
    _one_line(exc, "more than", "AS2D_MAX_AUDIO_HOURS")


@pytest.fixture
def small_tmpdir(tmp_path, monkeypatch):
    """TMPDIR on a 128-KB file system of its own."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    monkeypatch.setattr("tempfile.tempdir", str(mnt))
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_tmpdir_is_a_clear_error_not_a_bus_error(small_tmpdir, monkeypatch, containers):
    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", SAMPLE_RATE)  # 1 s: use the memmap
    for ext in ("flac", "m4a"):  # the length is known: reserved up front
        with pytest.raises(AudioError) as exc:
            load_audio(containers[ext])
        _one_line(exc, "no space left", str(small_tmpdir), "TMPDIR")
    r, w = os.pipe()  # a stream: reserved as it grows
    data = containers["mp3"].read_bytes()
    threading.Thread(target=lambda: (os.write(w, data), os.close(w)), daemon=True).start()
    try:
        with pytest.raises(AudioError) as exc:
            load_audio(f"/dev/fd/{r}")
    finally:
        os.close(r)
    _one_line(exc, "no space left", str(small_tmpdir), "TMPDIR")
    assert not os.listdir(small_tmpdir), "nothing is left in TMPDIR"


def test_the_temporary_file_has_no_name_to_leave_behind(tmp_path, monkeypatch, containers):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", SAMPLE_RATE)
    a = load_audio(containers["mkv"])
    assert isinstance(a.samples, np.memmap) and not a.samples.flags.writeable
    assert not list(tmp_path.iterdir()), "even while in use, TMPDIR holds no file of ours"
    a.close()


# -- numerically hostile samples --------------------------------------------------------------
@pytest.mark.parametrize("subtype,value", [("FLOAT", 3.4e38), ("DOUBLE", 1e300),
                                           ("FLOAT", -3.0)])
def test_samples_beyond_full_scale_are_clipped_without_overflow(tmp_path, clip, subtype, value):
    from as2d.runtime.whisper.features import LogMel

    _, x = clip
    y = np.stack([x, x], axis=1).astype(np.float64)
    y[SAMPLE_RATE, :] = value  # both channels: their sum would overflow float32
    p = write_wav(tmp_path / "hot.wav", y, subtype=subtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning fails the test
        a = load_audio(p)
        mel = LogMel(a, 80).window(0)
    assert a.clipped == 2
    assert np.isfinite(a.samples).all() and np.abs(a.samples).max() <= 1.0
    assert np.isfinite(mel).all()


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_infinite_or_nan_samples_are_refused_from_a_file_or_a_pipe(tmp_path, clip, bad):
    _, x = clip
    y = x.copy()
    y[100] = bad
    p = write_wav(tmp_path / "bad.wav", y, subtype="FLOAT")
    with pytest.raises(AudioError) as exc:
        load_audio(p)
    _one_line(exc, "bad.wav", "NaN or infinite")
    with open(p, "rb") as f, pytest.raises(AudioError):
        load_audio(io.BufferedReader(_NoSeek(f)))  # the FFmpeg path checks too


class _NoSeek(io.RawIOBase):
    def __init__(self, f):
        self.f = f

    def readable(self):
        return True

    def readinto(self, buf):
        data = self.f.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def test_arrays_are_sanitised_like_files():
    from as2d.runtime.audio import Audio

    x = np.zeros(SAMPLE_RATE, np.float32)
    x[5] = 3e38
    a = Audio.from_array(np.stack([x, x], axis=1))
    assert a.clipped == 2 and np.isfinite(a.samples).all()
    with pytest.raises(AudioError):
        Audio.from_array(np.full(100, np.nan, np.float32))


# -- memory stays flat on a long video --------------------------------------------------------
@pytest.mark.slow
def test_a_long_video_decodes_in_flat_memory(tmp_path, clip, monkeypatch):
    import tracemalloc

    monkeypatch.setattr(audio_mod, "_IN_MEMORY_LIMIT", SAMPLE_RATE * 30)
    peaks = {}
    for minutes in (1, 3):
        p = encode(tmp_path / f"{minutes}.mkv",
                   [np.resize(clip[1], minutes * 60 * SAMPLE_RATE)], codec="libopus")
        tracemalloc.start()
        a = load_audio(p)
        peaks[minutes] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert isinstance(a.samples, np.memmap)
        assert abs(a.duration - minutes * 60) < 0.1
        a.close()
    # 2 minutes more are 7.7 MB more of samples (3.8 MB even as 16-bit PCM): a peak growing
    # by < 2 MB holds none of them.
    assert peaks[3] < peaks[1] + 2e6, peaks


# -- whisper's spellings ----------------------------------------------------------------------
def _translate(*argv: str) -> list[str]:
    import typer

    from as2d.cli.app import app
    from as2d.cli.whisper_compat import translate

    command = typer.main.get_command(app).commands["transcribe"]
    return translate(command, list(argv))


def test_whisper_spellings_become_as2d_options():
    got = _translate("a.mp3", "--output_format", "srt", "--output_dir=out", "--model_dir", "m",
                     "--initial_prompt", "Hello.", "--condition_on_previous_text", "False",
                     "--compression_ratio_threshold", "None", "--language", "None",
                     "--fp16", "False", "--device", "cpu", "--verbose", "True",
                     "--no_speech_threshold", "0.5", "--temperature", "0",
                     "--temperature_increment_on_fallback", "0.2")
    assert got == ["a.mp3", "--output-format=srt", "--output-dir=out", "--models-dir=m",
                   "--initial-prompt=Hello.", "--no-condition-on-previous-text",
                   "--compression-ratio-threshold=inf", "--no-speech-threshold=0.5",
                   "--temperature", "0", "--temperature-increment-on-fallback=0.2"]
    assert _translate("a", "--condition_on_previous_text", "True") == \
        ["a", "--condition-on-previous-text"]
    assert _translate("a", "-f", "json", "--no-timestamps") == ["a", "-f", "json",
                                                                 "--no-timestamps"]


def _usage_error(*argv: str) -> str:
    """The installed ``as2d`` (its entry point prints parse errors as one line)."""
    r = subprocess.run([shutil.which("as2d") or "as2d", "transcribe", *argv],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("as2d: error: "), r.stderr
    return lines[0]


def test_whisper_bool_values_are_whispers_and_unsupported_options_are_named():
    line = _usage_error("a.wav", "--condition_on_previous_text", "no")
    assert "--condition_on_previous_text" in line and "True or False" in line
    line = _usage_error("a.wav", "--clip_timestamps", "10,20")
    assert "--clip_timestamps" in line and "not supported" in line
    assert _translate("a", "--clip_timestamps", "0", "--suppress_tokens", "-1") == ["a"]


def test_whisper_aliases_do_not_appear_in_help():
    r = cli("transcribe", "--help")
    assert r.exit_code == 0
    assert not [o for o in re.findall(r"--[\w-]+", r.stdout) if "_" in o], r.stdout


# -- transcripts (real models) ----------------------------------------------------------------
# What reaches the decoder is in question here, not the decoder: the tests of inputs decode
# with tiny.en (a real model, a quarter of base's cost per clip); those of the plan and of the
# default command (test_transcribe_of_one_file_plans_by_its_declared_length, the README's quick
# start) with base, as the user runs it.
MODEL = ("--model", "tiny.en")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


@pytest.fixture(scope="module")
def target_only(models_root, bundle):
    import as2d

    bundle("tiny.en", "int8")
    with as2d.Transcriber("tiny.en", decoder="target", models_dir=models_root,
                          threads=2) as t:
        yield t


@pytest.fixture(scope="module")
def target_segments(target_only):
    """source → its target-only segments, each file decoded once in the module."""
    done: dict = {}

    def segments(source) -> list:
        if source not in done:
            segs, _ = target_only.transcribe(source, language="en")
            done[source] = list(segs)
        return done[source]

    return segments


# FFmpeg's containers: AAC audio alone (decoded for the stdin test below anyway). That every
# container decodes to the clip's samples: test_every_container_decodes_to_the_same_speech;
# the words of videos through the command line (mp4/AAC, and mkv/Opus beside a second track):
# test_the_cli_on_hostile_inputs_prints_one_line_each_and_goes_on and
# test_a_whisper_script_runs_unchanged; libsndfile's (flac, ogg, mp3):
# tests/test_cli.py::test_compressed_formats_give_the_right_words.
WORDS_FROM = ("m4a",)


def test_every_container_gives_the_words_of_the_original_wav(target_segments, containers, clip):
    from helpers import edit_distance

    def text(source) -> str:
        return "".join(s.text for s in target_segments(source))

    ref = _words(text(clip[0]))
    assert len(ref) > 10
    for ext in WORDS_FROM:
        got = _words(text(containers[ext]))
        assert edit_distance(got, ref) <= max(1, len(ref) // 20), (ext, got, ref)


def test_declared_seconds_of_every_container(clip, containers):
    """A run is planned by the length a file declares: libsndfile's header, or an FFmpeg
    container's duration (its audio stream's, else the whole container's) where libsndfile
    cannot read the file; ADTS AAC declares none and is estimated by FFmpeg from its bit
    rate, so it gets a looser bound (only speed hangs on it: every decoder gives the same
    text)."""
    from as2d.runtime.audio import declared_seconds

    _, x = clip
    seconds = len(x) / SAMPLE_RATE
    for ext, path in containers.items():
        got = declared_seconds(path)
        assert got is not None, ext
        # codecs pad a frame or two at each end (priming); mkv and webm declare only the
        # container's duration, which the 5-fps video may outlast by a frame (0.2 s); ADTS's
        # estimate depends on FFmpeg's version
        assert abs(got - seconds) < (2.0 if ext == "aac" else 0.3), (ext, got, seconds)


def test_transcribe_of_one_file_plans_by_its_declared_length(models_root, bundle, containers):
    """`as2d transcribe FILE` of one window decodes with the target alone (no drafter loaded:
    one stderr line says so, the JSON says `decoder: target`), an m4a as a WAV; the same audio
    from standard input, whose length is not known before it is read, or with a drafter
    named, drafts. The text is the same."""
    bundle("base", "int8")
    bundle("tiny.en", "int8")
    m4a = containers["m4a"]
    json_out = ("-l", "en", "-f", "json", "--no-live")
    runs = {"file": _as2d(m4a, *json_out, models_root=models_root),
            "stdin": _as2d("-", *json_out, input=m4a.read_bytes(), models_root=models_root),
            "named": _as2d(m4a, "--drafter", "tiny.en", *json_out, models_root=models_root)}
    docs = {}
    for k, p in runs.items():
        assert p.returncode == 0, (k, p.stderr.decode())
        docs[k] = json.loads(p.stdout)
    alone = runs["file"].stderr.decode()
    assert docs["file"]["decoder"] == "target" and "one window of audio" in alone, alone
    for k in ("stdin", "named"):
        assert docs[k]["decoder"] == "as2d", k
        assert "one window of audio" not in runs[k].stderr.decode(), k
    want = [s["tokens"] for s in docs["file"]["segments"]]
    assert want and all([s["tokens"] for s in d["segments"]] == want for d in docs.values())


def _as2d(*args, stdin=None, input=None, models_root, shell=False, timeout=300, env=None):
    env = {**(os.environ if env is None else env), "AS2D_MODELS_DIR": str(models_root),
           "AS2D_FIFO_TIMEOUT": "1"}
    exe = [shutil.which("as2d")] if shutil.which("as2d") else [sys.executable, "-m", "as2d"]
    cmd = args if shell else [*exe, "transcribe", *map(str, args)]
    return subprocess.run(cmd[0] if shell else cmd, stdin=stdin, input=input,
                          capture_output=True, env=env, timeout=timeout, shell=shell,
                          executable="/bin/bash" if shell else None)


def test_stdin_dev_stdin_and_process_substitution(models_root, bundle, containers,
                                                  target_segments):
    bundle("tiny.en", "int8")
    want = _words("".join(s.text for s in target_segments(containers["m4a"])))
    m4a, mp3 = containers["m4a"], containers["mp3"]
    # "-" as a pipe: test_transcribe_of_one_file_plans_by_its_declared_length pipes this m4a
    # into `as2d transcribe -` and holds it to the file's tokens, exactly. The two pipes go to
    # one run: the clip's words twice, one file after the other.
    runs = {
        "- (a file)": (_as2d("-", *MODEL, "-l", "en", "--decoder", "target",
                             stdin=open(m4a, "rb"), models_root=models_root), 1),
        "/dev/stdin, <(cat x.mp3)": (_as2d(
            f"cat {m4a} | as2d transcribe /dev/stdin <(cat {mp3}) {' '.join(MODEL)} -l en "
            "--decoder target", shell=True, models_root=models_root), 2),
    }
    for how, (r, files) in runs.items():
        err = r.stderr.decode()
        assert r.returncode == 0 and "Traceback" not in err, (how, err)
        got = _words(r.stdout.decode())
        from helpers import edit_distance

        assert edit_distance(got, want * files) <= files, (how, got, want)


def test_the_cli_on_hostile_inputs_prints_one_line_each_and_goes_on(
        tmp_path, models_root, bundle, clip, containers, dub):
    """One run over the inputs that go wrong or surprise (no audio stream, a pipe nobody
    writes, a name that is not UTF-8, samples beyond full scale, a second audio track): one
    error line for each that cannot be read, the others transcribed, exit 1. The dubbed video
    is transcribed from its first track, and says so."""
    bundle("tiny.en", "int8")
    _, x = clip
    silent_film = encode(tmp_path / "silent-film.mp4", [], video="libx264")
    fifo = tmp_path / "nobody.pipe"
    os.mkfifo(fifo)
    hot = np.stack([x, x], axis=1)
    hot[SAMPLE_RATE] = 3.4e38
    hot_wav = write_wav(tmp_path / "hot.wav", hot, subtype="FLOAT")
    odd = os.fsencode(tmp_path) + b"/caf\xe9.mp4"
    with open(odd, "wb") as f:
        f.write(containers["mp4"].read_bytes())
    out = tmp_path / "out"
    r = _as2d(silent_film, fifo, os.fsdecode(odd), hot_wav, dub, *MODEL, "-l", "en", "-o", out,
              "-f", "json", models_root=models_root)
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err, err
    assert "RuntimeWarning" not in err and not re.search(r"\bnan\b", err, re.I), err
    errors = [line for line in err.splitlines() if line.startswith("as2d: error:")]
    assert len(errors) == 2, err
    assert "no audio stream" in errors[0] and "no writer" in errors[1]
    assert "waiting up to 1 s" in err
    assert "samples beyond full scale clipped" in err
    assert "2 audio streams; transcribing stream 1 of 2" in err
    assert "dashwood" in _words(json.loads((out / "dub.json").read_text())["text"])

    for name in (b"caf\xe9.json", b"hot.json"):
        doc = json.loads(Path(os.fsdecode(os.fsencode(out) + b"/" + name)).read_text())
        assert len(_words(doc["text"])) > 10, doc["text"]
    assert _words(json.loads((out / "hot.json").read_text())["text"])[:5] == \
        _words(json.loads(Path(os.fsdecode(os.fsencode(out) + b"/caf\xe9.json"))
                          .read_text())["text"])[:5]


def test_a_whisper_script_runs_unchanged(tmp_path, models_root, bundle, containers):
    bundle("tiny.en", "int8")
    out = tmp_path / "subs"
    r = _as2d(containers["mp4"], "--model", "tiny.en", "--model_dir", models_root,
              "--output_format", "srt", "--output_dir", out, "--language", "en",
              "--condition_on_previous_text", "False", "--fp16", "False",
              "--initial_prompt", "Sense and Sensibility.", "--verbose", "False",
              "--temperature", "0", "--temperature_increment_on_fallback", "0.2",
              "--threads", "2", models_root=models_root)
    assert r.returncode == 0, r.stderr.decode()
    srt = (out / "clip-mp4.srt").read_text()
    assert srt.startswith("1\n00:00:00,000 --> ") and "Dashwood" in srt


def test_the_readme_quick_start_shows_what_the_command_prints(models_root, bundle):
    """The README's sample output is what the command prints, word for word up to a small
    tolerance: not character for character, because near-tie punctuation and so the segment
    and line breaks come from the CPU's kernels ("young man." / "Unless" on one machine,
    "young man, unless" on another; the README says so)."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    bundle("base", "int8")
    bundle("tiny.en", "int8")
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ")[0]
    shown = next(body for lang, body in re.findall(r"```(\w*)\n(.*?)```", section, re.S)
                 if not lang)  # the block after the ```sh one
    assert "punctuation" in re.sub(r"```.*?```", "", section, flags=re.S)  # it says so
    # As the user runs it: the encoder back end this machine picks by default (`auto`).
    env = {k: v for k, v in os.environ.items() if k != "AS2D_ENCODER"}
    r = _as2d(root / "samples" / "sense_and_sensibility.wav", models_root=models_root, env=env)
    assert r.returncode == 0, r.stderr.decode()
    printed = r.stdout.decode()
    assert printed.strip() and all(line.strip() for line in printed.splitlines())
    norm = EnglishTextNormalizer()
    wer = jiwer.wer(norm(shown), norm(printed))
    assert wer <= 0.05, (wer, printed)  # 3 words in 70
