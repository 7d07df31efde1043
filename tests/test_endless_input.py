"""Endless input: ``/dev/zero``, ``/dev/urandom`` and a stream that does not end.

A stream FFmpeg does not recognise used to be copied, whole, into an unnamed file in TMPDIR
before a second try (the retry that piped MP4s need): for ``/dev/zero`` that copy grew at
~170 MB/s until the process was killed. Now only an MP4-like stream is copied for the retry,
so those devices end in one line at once. A stream that decodes and does not end (a live
pipe) is legitimate: it is read on, and said to be one, once, on stderr.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "sense_and_sensibility.wav"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_of_no_format_is_one_error_line_and_leaves_tmpdir_empty(device, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    p = subprocess.run([sys.executable, "-m", "as2d", "transcribe", device, "--model",
                        "tiny.en", "--decoder", "target"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("as2d: error:")]
    assert errors == [f"as2d: error: {device}: not a supported audio file (Invalid data found "
                      "when processing input); as2d reads what FFmpeg or libsndfile reads"]
    assert list(tmp.iterdir()) == []


def _streaming_wav_header(rate: int = 16000) -> bytes:
    """A WAV header as a recorder writing to a pipe makes it: sizes unknown (0xFFFFFFFF)."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", 0xFFFFFFFF))


@pytest.mark.slow
def test_a_stream_that_goes_on_is_read_on_and_said_to_be_one_once(monkeypatch):
    """A pipe fed slowly past the note's delay (shortened here): exactly one note, and every
    sample that was written is decoded when the writer ends."""
    from as2d.runtime import audio

    monkeypatch.setattr(audio, "STREAM_NOTE_SECONDS", 0.2)
    speech = np.asarray(audio.load_audio(SAMPLE).samples[: 8 * 16000])
    pcm = (np.clip(speech, -1, 1) * 32767).astype("<i2").tobytes()
    r, w = os.pipe()

    def writer():
        with os.fdopen(w, "wb") as f:
            f.write(_streaming_wav_header())
            for i in range(0, len(pcm), 16000):  # half a second of audio at a time
                f.write(pcm[i:i + 16000])
                f.flush()
                time.sleep(0.1)

    t = threading.Thread(target=writer)
    t.start()
    notes: list[str] = []
    try:
        got = audio.load_audio(f"/proc/self/fd/{r}", on_wait=notes.append)
    finally:
        t.join()
        os.close(r)
    assert len(notes) == 1, notes
    assert "reading an endless stream?" in notes[0] and "Ctrl-C stops" in notes[0]
    assert "\n" not in notes[0]
    assert len(got.samples) == len(speech)
    back = np.asarray(got.samples)
    assert np.max(np.abs(back - speech)) < 1e-3  # 16-bit PCM round trip
