"""The pipeline across files and at start-up: the drafter runs ahead into the next file, the next
file's audio and log-mel are ready before the target gets there, the models load side by side —
and none of it changes a token.

Real models, real clips: the reference is always target-only greedy decoding of each file on its
own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from as2d.runtime.audio import AudioError, load_audio
from as2d.runtime.events import Drafted, RunStarted
from as2d.runtime.sessions import Background
from as2d.runtime.transcribe.ahead import AudioReader
from as2d.runtime.transcribe.as2d import AS2D
from as2d.runtime.transcribe.longform import LongFormTranscriber, TranscriptionInfo
from as2d.runtime.transcribe.strategy import TargetOnly
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from tests.helpers import cli

OPTS = TranscribeOptions(language="en")


@pytest.fixture(scope="module")
def files(clips):
    """Five real recordings of different lengths (LibriVox, moonshine-voice), 3 s to 44 s."""
    picked = [c.path for c in clips if "librivox" in str(c.path)][:3]
    picked += [c.path for c in clips if c.name in ("beckett.wav", "two_cities.wav")]
    return picked


class _Reference:
    """``reference[i]``: file ``i`` decoded by the target alone, on its own (English, greedy:
    OPTS; the session's decode, which tests/test_as2d.py compares with too), on first use: a
    process decodes only the files its tests compare (the serial phase's, two)."""

    def __init__(self, base_target_only, files) -> None:
        self.get, self.files = base_target_only, files

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.get(path) for path in self.files[i]]
        return self.get(self.files[i])


@pytest.fixture(scope="module")
def reference(base_target_only, files):
    assert OPTS == TranscribeOptions(language="en")
    return _Reference(base_target_only, files)


def wait_until(condition, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_the_drafter_drafts_the_next_file_before_the_target_reaches_it(whisper, files,
                                                                       reference):
    """A prefetch before the first run is held until it begins, then the drafter drafts the
    next file while the target is still on this one, and the next run verifies that draft;
    a prefetch between two runs (after one) is held for the next run too. Every run gives the
    target's tokens alone."""
    target, drafter = whisper("base"), whisper("tiny.en", threads=1, role="drafter")
    runs: list[list] = []  # events per run, as a statistics collector sees them

    def listener(event):
        if isinstance(event, RunStarted):
            runs.append([])
        if runs:
            runs[-1].append(event)

    decoder = AS2D(target, drafter, listener)
    t = LongFormTranscriber(target, decoder, listener)
    try:
        first, second = load_audio(files[0]), load_audio(files[1])
        t.prefetch(second, OPTS)  # between runs: held until the first run has begun
        assert decoder._ahead == []
        got_first = [s.tokens for s in t.transcribe(first, OPTS)]
        # The target is done with the first file and has not started the second: the drafter
        # drafts it anyway, into the stream made for it.
        assert len(decoder._ahead) == 1
        ahead = decoder._ahead[0]
        assert wait_until(lambda: len(ahead.stream) > 0), "the drafter never drafted ahead"
        events_between = len(runs)
        got_second = [s.tokens for s in t.transcribe(second, OPTS)]
        assert decoder.stream is ahead.stream  # the second run verified the ahead draft
        third = load_audio(files[1])
        t.prefetch(third, OPTS)  # between runs: no run, so the decoder would not know which
        assert decoder._ahead == []  # file this one comes after
        got_third = [s.tokens for s in t.transcribe(third, OPTS)]
    finally:
        decoder.close()
    assert got_first == reference[0]
    assert got_second == got_third == reference[1]
    # The ahead draft's events were held back for its own run: the first run shows none of
    # the second file's words, the second run shows them (the stream may still have grown
    # after the last event was handed over).
    assert events_between == 1
    drafted_second = [e for e in runs[1] if isinstance(e, Drafted) and e.tokens]
    assert 0 < sum(len(e.tokens) for e in drafted_second) <= len(ahead.stream)


def test_only_models_that_run_alone_spin_their_thread_pools(bundle, whisper):
    """Target-only decoding has the cores to itself: its pools spin between operators (and
    stop after each run); AS²D's target and drafter share the cores and never spin."""
    from as2d.engine import plan_threads
    from as2d.runtime.whisper.model import WhisperModel

    def spins(session) -> str:
        return session.get_session_options().get_session_config_entry(
            "session.intra_op.allow_spinning")

    assert plan_threads(2, "target").spin and not plan_threads(2, "as2d").spin
    assert not plan_threads(2, "target", shares_cores=True).spin  # mic, batch, serve
    alone = WhisperModel(bundle("base", "int8"), threads=2, spin=True)
    assert spins(alone.decoder) == spins(alone.encoder.session) == spins(
        alone.beam_session()) == "1"
    shared = whisper("base")
    assert spins(shared.decoder) == spins(shared.encoder.session) == "0"


def test_the_draft_of_a_prefetched_file_that_is_skipped_is_dropped(whisper, files, reference):
    target, drafter = whisper("base"), whisper("tiny.en", threads=1, role="drafter")
    decoder = AS2D(target, drafter)
    t = LongFormTranscriber(target, decoder)
    try:
        long, skipped, c = load_audio(files[4]), load_audio(files[0]), load_audio(files[2])
        run = t.transcribe(long, OPTS)
        first = next(run)  # the first of two windows: the run goes on
        t.prefetch(skipped, OPTS)
        t.prefetch(c, OPTS)
        assert [a.mel.samples is x.samples for a, x in zip(decoder._ahead, (skipped, c))] \
            == [True, True]
        skipped_worker = decoder._ahead[0].worker
        long_tokens = [s.tokens for s in [first, *run]]  # drafted beside two prefetches
        got = [s.tokens for s in t.transcribe(c, OPTS)]
        assert decoder._ahead == []
        assert not skipped_worker.running
    finally:
        decoder.close()
    assert long_tokens == reference[4]
    assert got == reference[2]


def test_close_ends_the_drafts_of_files_never_transcribed(whisper, files):
    """A run stopped (like Ctrl-C) while the next file is being drafted: closing the decoder
    ends that draft, and the transcriber's close the next file's encoding started ahead. The
    run is a 3-s file, the next one 44 s: handed to the drafter as the run begins, so it is
    still drafting when the run is stopped, whenever that is."""
    target, drafter = whisper("base"), whisper("tiny.en", threads=1, role="drafter")
    decoder = AS2D(target, drafter)
    t = LongFormTranscriber(target, decoder)
    t.prefetch(load_audio(files[4]), OPTS)
    run = t.transcribe(load_audio(files[1]), OPTS)
    next(run)
    workers = [a.worker for a in decoder._ahead]
    run.close()  # stopped, like Ctrl-C: what comes next is never transcribed
    decoder.close()
    t.close()
    assert workers and not any(w.running for w in workers)
    assert not [th for th in threading.enumerate() if th.name == "as2d-drafter"]
    assert not encoder_threads()


def test_the_audio_reader_decodes_one_file_ahead_and_reports_errors_in_order(tmp_path, files):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    loaded: list[str] = []

    def load(path):
        loaded.append(str(path))
        return load_audio(path)

    ready: list = []
    reader = AudioReader([files[0], bad, files[1]], load, ready=ready.append)
    try:
        first = reader.take(0)
        assert first.duration > 0
        # Taking file 0 started file 1; nothing further: file 2 starts only once file 1 is
        # taken (the marker shows the order, whatever the threads' timing).
        assert wait_until(lambda: len(loaded) == 2)
        loaded.append("take 1")
        with pytest.raises(AudioError):
            reader.take(1)
        second = reader.take(2)
        assert loaded == [str(files[0]), str(bad), "take 1", str(files[1])]
        assert [a.source for a in ready] == [second.source]  # file 0 is not "ahead"
    finally:
        reader.close()


def test_background_returns_the_value_or_raises_the_error_in_the_caller():
    assert Background(lambda x: x * 2, 21).result() == 42
    with pytest.raises(ZeroDivisionError):
        Background(lambda: 1 / 0).result()


def test_the_command_line_batch_is_token_identical_with_and_without_a_drafter(
        tmp_path, models_root, files, reference):
    """The command line's AS²D batch (its AudioReader hands every next file to the engine's
    prefetch: the drafter runs ahead into it) writes the tokens of the target alone on each
    file: the module's reference, decoded in this process with the command line's options
    (the Ctrl-C test below holds a command-line file to it too), rather than a second
    command-line run with --decoder target. Three one-window files (two handed ahead), run in
    this process: the command as a process of its own, with files drafted ahead, is the
    Ctrl-C test's. A prefetch during a two-window run is
    test_the_draft_of_a_prefetched_file_that_is_skipped_is_dropped's, AS²D over two windows
    tests/test_as2d.py's."""
    batch = files[:3]
    folder = tmp_path / "as2d"
    r = cli("transcribe", *batch, "-l", "en", "--decoder", "as2d", "-f", "json", "-o", folder,
            "--models-dir", models_root, "-q", "--no-live")
    assert r.exit_code == 0, r.stderr
    out = {f.name: [s["tokens"] for s in json.loads(f.read_text())["segments"]]
           for f in folder.glob("*.json")}
    assert out == {f"{path.stem}.json": tokens for path, tokens in zip(batch, reference[:3])}


@pytest.mark.serial
def test_ctrl_c_in_a_batch_keeps_what_was_done_while_the_drafter_runs_ahead(
        tmp_path, models_root, files, reference):
    import signal

    order = [files[3], files[4], files[0]]  # 10 s, 44 s (two windows), 7 s
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "as2d", "transcribe", *map(str, order), "-l",
                          "en", "-f", "json", "-o", str(out), "--models-dir", str(models_root),
                          "--no-live"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    first = out / (order[0].stem + ".json")
    try:
        assert wait_until(first.exists, 300), "the first file was never written"
        p.send_signal(signal.SIGINT)  # the second file is being decoded, the third drafted
        stdout, stderr = p.communicate(timeout=120)
    finally:  # a failed wait must not leave a transcription running under later tests
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr
    done = json.loads(first.read_text())
    assert [s["tokens"] for s in done["segments"]] == reference[3]
    second = out / (order[1].stem + ".json")
    if second.exists():  # what was committed of the interrupted file: a prefix of its text
        kept = [s["tokens"] for s in json.loads(second.read_text())["segments"]]
        flat, ref = sum(kept, []), sum(reference[4], [])
        assert flat == ref[: len(flat)]
    assert not (out / (order[2].stem + ".json")).exists()


# -- encoder runs started ahead ----------------------------------------------------------------
def encoder_threads() -> list[threading.Thread]:
    return [th for th in threading.enumerate() if th.name == "as2d-encode" and th.is_alive()]


def test_the_next_files_first_window_is_encoded_during_this_ones_last(whisper, files,
                                                                       reference):
    target = whisper("base")
    t = LongFormTranscriber(target, TargetOnly(target))
    a, b = load_audio(files[0]), load_audio(files[1])
    t.prefetch(b, OPTS)  # known to come next before a's only window is decoded
    got_a = [s.tokens for s in t.transcribe(a, OPTS)]
    item = t.ahead._upcoming[0]
    assert item.audio is b and item.encoding is not None  # started in a's last window
    got_b = [s.tokens for s in t.transcribe(b, OPTS)]
    t.close()
    assert [got_a, got_b] == reference[:2]
    assert not encoder_threads()


def test_a_stop_abandons_the_next_files_encoding_and_the_next_run_encodes_again(
        whisper, files, reference):
    target = whisper("base")
    t = LongFormTranscriber(target, TargetOnly(target))
    long, b = load_audio(files[4]), load_audio(files[1])
    run = t.transcribe(long, OPTS)
    next(run)
    t.prefetch(b, OPTS)
    t.stop()
    list(run)  # the rest of the stopped run
    assert not encoder_threads()  # nothing left encoding after a stop
    got = [s.tokens for s in t.transcribe(b, OPTS)]
    t.close()
    assert got == reference[1]


def test_a_run_that_fails_before_its_first_window_leaves_no_encoder_running(whisper, files):
    target = whisper("tiny.en")
    t = LongFormTranscriber(target, TargetOnly(target))
    with pytest.raises(ValueError, match="English-only"):  # refused by the run's plan
        list(t.transcribe(load_audio(files[0]), TranscribeOptions(language="de")))
    assert not encoder_threads()
    # An encoder run abandoned ahead and then adopted is done again: the result is the same.
    t.prefetch(load_audio(files[0]), OPTS)
    t.close()
    assert not encoder_threads()


def test_a_stop_during_language_detection_interrupts_the_run_without_an_error(whisper, files):
    # Live dictation stops growing-utterance decodes at any moment, detection included.
    target = whisper("base")
    t = LongFormTranscriber(target, TargetOnly(target))
    t.stop()  # asked before the call: it applies to it
    info = TranscriptionInfo(None, 0.0, 0.0)
    segments = list(t.transcribe(load_audio(files[0]), TranscribeOptions(), info))
    assert segments == [] and info.interrupted
    assert not encoder_threads()


@pytest.mark.serial
def test_a_stop_reaches_the_first_windows_encoder_while_the_run_waits_for_it(whisper, files):
    """The first window is encoded ahead on a thread of its own; the run waits for it. A stop
    that comes during that wait must abandon the encoder run, not let it finish its whole
    window (a live session's next decode used to wait up to 0.3 s for it)."""
    from as2d.runtime.transcribe.runner import AheadEncoding, WindowRunner
    from as2d.runtime.transcribe.strategy import Window
    from as2d.runtime.whisper.features import N_FRAMES, LogMel

    target = whisper("base")
    mel = LogMel(load_audio(files[0]), target.dims.n_mels)
    first = Window(0, 0, min(N_FRAMES, mel.n_frames))
    gate = threading.Event()  # the encoder thread waits here before its run

    class Gated:
        def __enter__(self):
            gate.wait(30)

        def __exit__(self, *exc):
            return False

    encoding = AheadEncoding(target, mel, first, lambda mel, window: Gated())
    runner = WindowRunner(target)
    runner.adopt(encoding)
    taken = []
    taker = threading.Thread(target=lambda: taken.append(runner._take_pending(first)))
    try:
        taker.start()
        deadline = time.monotonic() + 10
        while not _waiting_in(taker, "result") and time.monotonic() < deadline:
            time.sleep(0.005)
        assert _waiting_in(taker, "result"), "the run never waited for the encoding"
        runner.stop()
    finally:
        gate.set()  # (a failed assertion must not leave the encoder thread waiting)
        taker.join(30)
        encoding.wait()
    assert encoding.run_options.terminate, "the stop did not reach the encoder being waited for"
    assert taken == [(None, 0.0)]  # abandoned: the caller encodes again (or stops)
    assert runner._pending is None
    assert not encoder_threads()


def _waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside ``function`` (anywhere on its stack)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False
