"""``--encoder auto``: the encoder back end is chosen by timing the candidates, once per machine
and model (not per thread count), and remembered in the models folder, outside the bundle.

Speed cannot be asserted in a test, so the timings are scripted: every candidate is a real
encoder (onnxruntime, OpenVINO f32, bf16 and int8 on the real tiny.en bundle) that really runs on a
short window, but the seconds it reports come from the test, which may make any candidate
the fastest. What is checked is the mechanism: the memo is written with its key and reused
without timing anything, the thread count does not change it, a re-install keeps it, a
changed library measures again with the earlier choice as the incumbent, a near-tie keeps the
incumbent, a back end whose output depends on the thread count is left out, candidates are
built and freed one at a time, the overrides win, a back end that fails is skipped, ``as2d models
measure-encoder`` measures again, and the choice is reported (the model's ``encoder_name``,
``--stats``, ``as2d models list``, ``as2d bench``).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from as2d.runtime.sessions import cpu_model_name
from as2d.runtime.whisper import encoder_choice, encoders
from as2d.runtime.whisper.encoder_choice import EncoderCandidate, EncoderChoice, measure
from tests.helpers import linked_bundle, young_heap

needs_openvino = pytest.mark.skipif(not encoders.openvino_available(),
                                    reason="openvino is not installed")


@pytest.fixture(scope="module", autouse=True)
def _young_heap():
    """Every candidate measured is freed with a full ``gc.collect()`` (``measure`` and
    ``thread_invariant``), about 80 times in this module
    (test_candidates_are_built_timed_and_freed_one_at_a_time, which does nothing else, took
    2.9-4.6 s for its six): see helpers.young_heap. That the candidates are freed is still
    checked there."""
    yield from young_heap()


@pytest.fixture(autouse=True)
def _auto(monkeypatch, tmp_path):
    """`auto` as a user has it (the suite's conftest asks for onnxruntime), a user cache of the
    test's own (where a read-only models folder's memo goes), and no choice kept in this
    process from another test."""
    monkeypatch.delenv(encoders.ENV_ENCODER, raising=False)
    monkeypatch.delenv(encoders.ENV_OV_PRECISION, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    encoder_choice.forget_in_process()
    yield
    encoder_choice.forget_in_process()


@pytest.fixture(scope="module")
def _private_tiny(bundle, tmp_path_factory):
    """(source, copy): a private tiny.en int8 bundle (its graphs linked) in a models folder of
    its own, made once for the module. OpenVINO keeps its compiled blobs in the bundle, keyed by
    the graph's path, so one folder for every test compiles each graph once, as a user's later
    runs load it (the seconds are scripted here: a compile only costs the test time)."""
    from as2d.models.install import ensure_openvino_graph

    src = bundle("tiny.en", "int8")
    # What OpenVINO compiles (made once in the test models folder; the fp16-weight copy is
    # made by OpenVINO itself, where it is installed).
    kinds = ("fp32", "int8w") + (("f16w",) if encoders.openvino_available() else ())
    for kind in kinds:
        ensure_openvino_graph(src, kind)
    dest = tmp_path_factory.mktemp("encoder-choice") / "models" / src.name
    return src, linked_bundle(src, dest, skip=(".", "manifest.json"))


@pytest.fixture
def tiny(_private_tiny):
    """The private tiny.en bundle with its manifest copied afresh (a test may edit it) and no
    memo in its models folder, so that each test's choice starts empty."""
    src, dest = _private_tiny
    shutil.copy(src / "manifest.json", dest / "manifest.json")
    (dest.parent / encoder_choice.MEMO_FILE).unlink(missing_ok=True)
    return dest


class Clock:
    """Scripted seconds per candidate (by ``encoder.detail``); the run itself is real."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = dict(seconds)
        self.calls: list[str] = []

    def __call__(self, encoder, mel) -> tuple[float, dict]:
        out = encoder.run(mel)
        self.calls.append(encoder.detail)
        t = self.seconds[encoder.detail]
        if isinstance(t, BaseException):
            raise t
        return t, out


@pytest.fixture
def clock(monkeypatch):
    def install(**seconds):
        c = Clock({k.replace("_", " ", 1): v for k, v in seconds.items()})
        monkeypatch.setattr(encoder_choice, "time_run", c)
        monkeypatch.setattr(encoder_choice, "RUNS", 1)  # one timed round after the warm-ups
        # 2 s: the runs are real (their outputs are compared across thread counts), and only
        # their outputs count; whole windows at 1 and 2 threads are tests/test_encoders.py's.
        monkeypatch.setattr(encoder_choice, "WINDOW_FRAMES", 200)
        return c

    return install


def _load(path, threads=1, **kw):
    from as2d.runtime.whisper.model import WhisperModel

    notes: list[str] = []
    model = WhisperModel(path, threads=threads, progress=notes.append, **kw)
    return model, notes


def _memo(path) -> dict:
    """The memo's entries: one file for every model of the models folder, beside the bundle."""
    memo = encoder_choice.memo_path(path)
    assert memo == path.parent / ".encoder-choice.json"
    return json.loads(memo.read_text())["entries"]


# -- the measurement itself (real encoders, scripted seconds) ---------------------------------
def test_measure_times_each_candidate_after_a_warm_up_and_drops_hopeless_ones(tiny, clock):
    from as2d.runtime.whisper.encoders import OrtEncoder

    c = clock(onnxruntime_int8=0.30)
    c.seconds["onnxruntime fp32"] = 0.90  # 3× the best warm-up: not timed
    cands = [EncoderCandidate("onnxruntime", "int8"), EncoderCandidate("onnxruntime", "fp32")]
    files = {"onnxruntime int8": "encoder.onnx", "onnxruntime fp32": "encoder_fp32.onnx"}
    threads: list[int] = []

    def build(cand, n):
        threads.append(n)
        return OrtEncoder(tiny / files[cand.name], n, precision=cand.precision)

    mel = encoder_choice.window(80)
    seconds, skipped = measure(cands, build, mel, 3, runs=3, budget_s=1e6)
    assert seconds == {"onnxruntime int8": 0.30, "onnxruntime fp32": 0.90} and not skipped
    assert threads == [3, 3]  # timed with the thread count it is given, whoever asks
    assert c.calls == ["onnxruntime int8"] * 4 + ["onnxruntime fp32"]  # fp32: warm-up only
    c.calls.clear()
    c.seconds["onnxruntime fp32"] = 0.50  # kept after its warm-up, done after one timed run
    measure(cands, build, mel, 1, runs=3, budget_s=1e6)
    assert c.calls == ["onnxruntime int8"] * 4 + ["onnxruntime fp32"] * 2
    c.calls.clear()  # no time left: one timed run each still (a warm-up is biased)
    c.seconds["onnxruntime fp32"] = 0.31
    seconds, _ = measure(cands, build, mel, 1, runs=3, budget_s=0)
    assert c.calls == ["onnxruntime int8"] * 2 + ["onnxruntime fp32"] * 2
    assert encoder_choice.pick(seconds, cands, "onnxruntime int8") == "onnxruntime int8"


class _Held:
    """A fake encoder that counts how many of its kind are alive."""

    alive = 0
    most = 0

    def __init__(self, name: str) -> None:
        self.detail = name
        _Held.alive += 1
        _Held.most = max(_Held.most, _Held.alive)

    def run(self, mel):
        return {"cross_k_0": mel[:, :2, :4].copy()}

    def __del__(self) -> None:
        _Held.alive -= 1


def test_candidates_are_built_timed_and_freed_one_at_a_time(monkeypatch):
    """The first use of a large model must not hold several compiled encoders at once."""
    monkeypatch.setattr(encoder_choice, "time_run", lambda enc, mel: ({
        "onnxruntime int8": 0.30, "openvino f32": 0.31, "openvino bf16": 0.29,
        "openvino int8": 0.32}[enc.detail], enc.run(mel)))
    cands = [EncoderCandidate("onnxruntime", "int8")] + [
        EncoderCandidate("openvino", p) for p in ("f32", "bf16", "int8")]
    _Held.alive = _Held.most = 0
    seconds, skipped = measure(cands, lambda c, n: _Held(c.name), encoder_choice.window(80),
                               2, runs=3, budget_s=1e6)
    assert len(seconds) == 4 and not skipped
    assert _Held.most == 1 and _Held.alive == 0
    assert encoder_choice.thread_invariant(cands[2], lambda c, n: _Held(c.name),
                                           encoder_choice.window(80), [1, 2]) is None
    assert _Held.most == 1 and _Held.alive == 0


def test_the_memo_is_in_the_models_folder_else_the_user_cache(tmp_path, monkeypatch):
    """Beside the bundle, not in it (a re-install replaces the bundle folder); a read-only
    models folder keeps its choices in the user cache."""
    from pathlib import Path

    bundle_dir = tmp_path / "models" / "base-int8"
    bundle_dir.mkdir(parents=True)
    assert encoder_choice.memo_path(bundle_dir) == tmp_path / "models" / ".encoder-choice.json"
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != bundle_dir.parent
                        and real(p, mode, **kw))
    assert encoder_choice.memo_path(bundle_dir) == (tmp_path / "user-cache" / "as2d"
                                                    / "encoder-choice.json")


def test_a_near_tie_keeps_the_incumbent():
    cands = [EncoderCandidate("onnxruntime", "int8"), EncoderCandidate("openvino", "bf16"),
             EncoderCandidate("openvino", "int8")]
    pick = encoder_choice.pick
    assert encoder_choice.MARGIN == 0.10
    # The default (the bundle's own graph) is the first incumbent: 5 % faster is not enough.
    assert pick({"onnxruntime int8": 0.300, "openvino bf16": 0.285, "openvino int8": 0.29},
                cands, "onnxruntime int8") == "onnxruntime int8"
    assert pick({"onnxruntime int8": 0.300, "openvino bf16": 0.26, "openvino int8": 0.28},
                cands, "onnxruntime int8") == "openvino bf16"  # 13 % faster: it wins
    # An incumbent from an earlier measurement keeps its place against a near-tie either way.
    times = {"onnxruntime int8": 0.300, "openvino bf16": 0.200, "openvino int8": 0.205}
    assert pick(times, cands, "openvino int8") == "openvino int8"
    assert pick(times, cands, "onnxruntime int8") == "openvino bf16"
    # ... and gives way to one faster by more than the margin (a measurement made again, after
    # a library changed: test_a_new_library_and_models_measure_encoder_measure_again).
    assert pick({"onnxruntime int8": 0.50, "openvino bf16": 0.40, "openvino int8": 0.30},
                cands, "openvino bf16") == "openvino int8"
    # An incumbent that could not be timed (skipped) gives way to the fastest.
    assert pick({"openvino bf16": 0.2, "openvino int8": 0.19}, cands,
                "onnxruntime int8") == "openvino int8"
    assert pick({}, cands, "onnxruntime int8") is None


# -- auto on a real bundle ---------------------------------------------------------------------
@needs_openvino
def test_auto_measures_once_remembers_and_reuses_the_choice(tiny, clock):
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.25, openvino_int8=0.22)
    model, notes = _load(tiny)
    assert model.encoder.detail == "openvino f32"  # the measurement decides, not a CPU flag
    assert model.encoder_choice.how == "measured"
    assert model.encoder_name.startswith("openvino f32 (measured: 0.200 s per 30-s window")
    said = [n for n in notes if n.startswith("choosing the encoder back end")]
    assert said == [said[0]] and "for tiny.en on this CPU (once, for every thread count)" in said[0]
    assert "onnxruntime int8, openvino f32, openvino bf16, openvino int8" in said[0]
    (entry,) = _memo(tiny).values()
    assert entry["choice"] == "openvino f32"
    assert entry["threads"] == encoder_choice.measuring_threads()
    assert entry["seconds"] == {"onnxruntime int8": 0.3, "openvino f32": 0.2,
                                "openvino bf16": 0.25, "openvino int8": 0.22}
    key = entry["key"]
    assert "threads" not in key and key["machine"] == encoder_choice.machine()
    assert key["machine"]["cpu"] == cpu_model_name()
    manifest = json.loads((tiny / "manifest.json").read_text())
    assert key["model"] == {"encoder": manifest["sha256"]["encoder.onnx"],
                            "converter": manifest["converter_version"], "precision": "int8"}
    assert key["candidates"] == ["onnxruntime int8", "openvino f32", "openvino bf16",
                                 "openvino int8"]
    # int8's speed depends on its group size, bf16's on the graph it compiles: a change of
    # either measures again.
    assert key["settings"] == {"openvino int8 group": encoders.OV_INT8_GROUP,
                               "openvino bf16/f16 weights": "fp16"}
    assert not (tiny / encoder_choice.MEMO_FILE).exists()  # nothing in the bundle

    # Another process (nothing kept in memory) with other timings: the memo is taken as it is,
    # nothing is timed and nothing is said, so every load decodes on the same encoder.
    encoder_choice.forget_in_process()
    c.seconds.update({"onnxruntime int8": 0.01})
    c.calls.clear()
    again, notes = _load(tiny)
    assert again.encoder.detail == "openvino f32" and again.encoder_choice.how == "remembered"
    assert again.encoder_name.startswith("openvino f32 (remembered: 0.200 s")
    assert c.calls == [] and not notes
    # And in this process, a second load (AS²D after target-only) takes the same one.
    third, _ = _load(tiny, role="drafter")
    assert third.encoder.detail == "openvino f32" and c.calls == []


@needs_openvino
def test_the_choice_does_not_depend_on_the_thread_count(tiny, clock, monkeypatch):
    """-t 1, -t 2 and batch's one-thread workers run the same back end: it is timed with the
    machine's thread count whoever asks, remembered once, and the winner is checked to give
    bit-identical outputs at 1 thread and at several."""
    made: list[tuple[str, int]] = []
    real_build = encoders._build
    monkeypatch.setattr(encoders, "_build", lambda c, *a: made.append((c.name, a[2]))
                        or real_build(c, *a))
    monkeypatch.setattr(encoder_choice, "measuring_threads", lambda: 3)
    c = clock(onnxruntime_int8=0.50, openvino_f32=0.60, openvino_bf16=0.40, openvino_int8=0.45)
    one, _ = _load(tiny, threads=1)
    assert one.encoder.detail == "openvino bf16"
    timing = made[:4]
    assert [n for _, n in timing] == [3, 3, 3, 3]  # timed with 3 threads, for a 1-thread load
    # The thread check (at 1 thread, against its warm-up at 3), then the caller's encoder.
    assert made[4:] == [("openvino bf16", 1), ("openvino bf16", 1)]
    for threads in (2, 1, 4):  # other processes, other counts, other timings: the same one
        encoder_choice.forget_in_process()
        c.seconds.update({"onnxruntime int8": 0.05})
        c.calls.clear()
        model, notes = _load(tiny, threads=threads)
        assert model.encoder.detail == "openvino bf16"
        assert model.encoder_choice.how == "remembered" and not c.calls and not notes
    assert len(_memo(tiny)) == 1


@needs_openvino
def test_a_back_end_whose_output_depends_on_the_thread_count_is_left_out(tiny, clock,
                                                                        monkeypatch):
    class Drifting:  # OpenVINO bf16 whose last bits move with its thread count
        def __init__(self, enc, threads):
            self.enc, self.threads, self.detail = enc, threads, enc.detail

        def run(self, mel, run_options=None):
            out = self.enc.run(mel)
            k = sorted(out)[0]
            out[k] = out[k] + np.float32(1e-6 * self.threads)
            return out

    real_build = encoders._build
    monkeypatch.setattr(encoders, "_build", lambda c, *a: Drifting(real_build(c, *a), a[2])
                        if c.name == "openvino bf16" else real_build(c, *a))
    clock(onnxruntime_int8=0.50, openvino_f32=0.60, openvino_bf16=0.20, openvino_int8=0.40)
    model, notes = _load(tiny)
    assert model.encoder.detail == "openvino int8"  # the next fastest (beats 0.50 by 20 %)
    (entry,) = _memo(tiny).values()
    assert entry["choice"] == "openvino int8" and "openvino bf16" not in entry["seconds"]
    assert entry["skipped"]["openvino bf16"].startswith(
        "its output depends on the thread count (1 and ")
    assert any("left out" in n and "thread count" in n for n in notes)


@needs_openvino
def test_a_new_library_and_models_measure_encoder_measure_again(tiny, clock, monkeypatch):
    """The two ways a choice is measured again, from one first measurement (openvino bf16).

    A new onnxruntime or OpenVINO (or CPU) measures again; the earlier winner is then the
    incumbent, which a challenger must beat by the margin (a challenger that does beat it wins:
    test_a_near_tie_keeps_the_incumbent, on the same pick). `as2d models measure-encoder` is the
    one way to ask for a new measurement (a busy machine misled the first one): every choice
    remembered for the model, on any machine, is forgotten, so the default is the incumbent
    again."""
    from helpers import cli

    c = clock(onnxruntime_int8=0.50, openvino_f32=0.60, openvino_bf16=0.40, openvino_int8=0.45)
    assert _load(tiny)[0].encoder.detail == "openvino bf16"
    real = encoder_choice.machine
    monkeypatch.setattr(encoder_choice, "machine", lambda: {**real(), "onnxruntime": "99.0.0"})
    encoder_choice.forget_in_process()
    c.seconds.update({"openvino int8": 0.38})  # 5 % faster: a near-tie, no flip
    c.calls.clear()
    again, notes = _load(tiny)
    assert again.encoder_choice.how == "measured" and c.calls
    assert again.encoder.detail == "openvino bf16"
    assert "timing openvino bf16, onnxruntime int8," in " ".join(notes)  # the incumbent first
    assert len(_memo(tiny)) == 2

    c.seconds.update({"onnxruntime int8": 0.30})
    c.calls.clear()
    r = cli("models", "measure-encoder", tiny, models_dir=tiny.parent)
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert "choosing the encoder back end for tiny.en" in said and c.calls
    assert "timing onnxruntime int8, openvino f32," in said  # the default is the incumbent
    assert "tiny.en-int8: encoder onnxruntime int8 (measured: 0.300 s" in said
    (entry,) = _memo(tiny).values()  # both machines' choices forgotten, the new one kept
    assert entry["choice"] == "onnxruntime int8"
    encoder_choice.forget_in_process()
    c.calls.clear()
    model, _ = _load(tiny, threads=2)
    assert model.encoder.detail == "onnxruntime int8" and not c.calls
    # A catalog model that is not installed is not converted to be measured.
    r = cli("models", "measure-encoder", "base", models_dir=tiny.parent / "none")
    assert r.exit_code != 0 and "base-int8 is not installed" in r.stderr


@pytest.mark.slow
@needs_openvino
def test_the_choice_survives_a_reinstall(_private_tiny, clock, tmp_path):
    """`as2d models install NAME --force` (or deleting the bundle) keeps the choice: it is
    remembered outside the bundle folder, keyed by the model's content. The bundle there first
    is the suite's tiny.en, its files linked (what `install` gives when this converter made
    it); the re-install converts it for real, so the key must come out the same."""
    from as2d.models.install import CONVERTER_VERSION, ensure_openvino_graph, install

    src, _ = _private_tiny
    root = tmp_path / "models"
    if json.loads((src / "manifest.json").read_text())["converter_version"] == CONVERTER_VERSION:
        linked_bundle(src, root / src.name, copied=("manifest.json",))
    path = install("tiny.en", "int8", root).path
    c = clock(onnxruntime_int8=0.50, openvino_f32=0.60, openvino_bf16=0.30, openvino_int8=0.45)
    graphs = {"ov_graph": lambda kind: ensure_openvino_graph(path, kind)}
    assert _load(path, **graphs)[0].encoder.detail == "openvino bf16"
    (entry,) = _memo(path).values()
    assert install("tiny.en", "int8", root, force=True).path == path  # converted again
    assert not (path / ".openvino_cache").exists()  # a new folder
    encoder_choice.forget_in_process()
    c.seconds.update({"onnxruntime int8": 0.05})
    c.calls.clear()
    model, notes = _load(path, **graphs)
    assert model.encoder.detail == "openvino bf16" and model.encoder_choice.how == "remembered"
    assert not c.calls and not any("choosing" in n for n in notes)
    assert list(_memo(path).values()) == [entry]


def test_overrides_win_and_measure_nothing(tiny, clock, monkeypatch):
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.10, openvino_int8=0.15)
    model, notes = _load(tiny, encoder="onnxruntime")
    assert model.encoder.detail == "onnxruntime int8" and model.encoder_choice.how == "asked"
    assert model.encoder_name == "onnxruntime int8"
    monkeypatch.setenv(encoders.ENV_ENCODER, "onnxruntime")
    assert _load(tiny)[0].encoder.detail == "onnxruntime int8"
    assert c.calls == [] and not notes and encoder_choice.memo_path(tiny) is not None
    assert not encoder_choice.memo_path(tiny).exists()
    if not encoders.openvino_available():
        return
    monkeypatch.setenv(encoders.ENV_OV_PRECISION, "f32")
    model, _ = _load(tiny, encoder="openvino")  # back end and precision both given
    assert model.encoder.detail == "openvino f32" and model.encoder_choice.how == "asked"
    assert c.calls == []
    # auto with a precision: OpenVINO is timed in that precision only.
    monkeypatch.delenv(encoders.ENV_ENCODER)
    monkeypatch.setenv(encoders.ENV_OV_PRECISION, "bf16")
    model, notes = _load(tiny)
    assert model.encoder.detail == "openvino bf16"
    assert "timing onnxruntime int8, openvino bf16 on" in " ".join(notes)
    # openvino without a precision: its precisions are timed (int8 too, for an int8 bundle),
    # onnxruntime is not.
    monkeypatch.delenv(encoders.ENV_OV_PRECISION)
    c.calls.clear()
    model, notes = _load(tiny, encoder="openvino")
    assert model.encoder.detail == "openvino bf16"
    assert set(c.calls) == {"openvino f32", "openvino bf16", "openvino int8"}
    # int8 asked for: OpenVINO runs the int8-weight graph.
    monkeypatch.setenv(encoders.ENV_OV_PRECISION, "int8")
    model, _ = _load(tiny, encoder="openvino")
    assert model.encoder.detail == "openvino int8" and model.encoder_choice.how == "asked"
    assert model.encoder.path.name == "encoder_int8w.onnx"


@needs_openvino
def test_a_back_end_that_fails_is_skipped_and_remembered_as_skipped(tiny, clock):
    # An int8 bundle without its OpenVINO graphs, and no way to make them: OpenVINO cannot
    # serve.
    mf = json.loads((tiny / "manifest.json").read_text())
    for key in ("encoder_fp32", "encoder_f16w", "encoder_int8w"):
        mf["files"].pop(key)
    (tiny / "manifest.json").write_text(json.dumps(mf))
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.01, openvino_bf16=0.01, openvino_int8=0.01)
    model, notes = _load(tiny)
    assert model.encoder.detail == "onnxruntime int8" and model.encoder_choice.how == "measured"
    assert c.calls == ["onnxruntime int8"] * 2  # its warm-up and one timed run (RUNS = 1)
    (entry,) = _memo(tiny).values()
    assert set(entry["skipped"]) == {"openvino f32", "openvino bf16", "openvino int8"}
    assert "no fp32 encoder" in entry["skipped"]["openvino bf16"]  # the copy's source
    assert "no int8-weight encoder" in entry["skipped"]["openvino int8"]
    assert any("left out" in n and "openvino bf16" in n for n in notes)


@needs_openvino
def test_a_candidate_whose_run_fails_is_skipped(tiny, clock):
    clock(onnxruntime_int8=0.30, openvino_f32=0.50, openvino_bf16=RuntimeError("boom"),
          openvino_int8=0.60)
    model, _ = _load(tiny)
    assert model.encoder.detail == "onnxruntime int8"
    (entry,) = _memo(tiny).values()
    assert entry["skipped"] == {"openvino bf16": "boom"}


def test_an_unwritable_folder_still_gives_one_choice_per_process(tiny, clock, monkeypatch,
                                                               tmp_path):
    monkeypatch.setattr(encoder_choice, "memo_path", lambda bundle_dir: None)
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.25, openvino_int8=0.4)
    first, _ = _load(tiny)
    c.seconds.update({"onnxruntime int8": 0.01, "openvino f32": 0.9, "openvino bf16": 0.9,
                      "openvino int8": 0.9})
    second, _ = _load(tiny)
    assert second.encoder.detail == first.encoder.detail


# -- reported ----------------------------------------------------------------------------------
@needs_openvino
def test_stats_and_models_list_report_the_measured_choice(tiny, librivox, clock, monkeypatch):
    """`--stats` says once that it measures, and what the choice beat; `as2d models list` then
    shows the remembered choice, one for every thread count. One measurement serves both:
    the list reads what the transcription remembered."""
    from helpers import cli

    monkeypatch.setenv("COLUMNS", "250")  # the table on one line per row
    clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.25, openvino_int8=0.27)
    clip = min(librivox, key=lambda c: os.path.getsize(c.path)).path
    r = cli("transcribe", clip, "--model", tiny, "--decoder", "target", "--stats")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("choosing the encoder back end for tiny.en on this CPU (once, for "
                          "every thread count)") == 1
    assert "encoder=openvino f32 (measured: 0.200 s per 30-s window; openvino bf16 0.250, " \
           "openvino int8 0.270, onnxruntime int8 0.300)" in " ".join(r.stderr.split())
    encoder_choice.forget_in_process()
    assert _load(tiny, threads=1)[0].encoder_choice.how == "remembered"  # another count
    r = cli("models", "list", models_dir=tiny.parent)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if line.startswith("│ tiny.en "))
    assert "int8: openvino f32 " in " ".join(row.split()) + " "  # one, for every count
    base_row = next(line for line in r.stdout.splitlines() if line.startswith("│ base "))
    assert "openvino" not in base_row


def test_bench_reports_each_models_encoder(librivox, bundle, monkeypatch):
    from helpers import cli

    monkeypatch.setenv(encoders.ENV_ENCODER, "onnxruntime")
    clip = min(librivox, key=lambda c: os.path.getsize(c.path)).path
    bundle("tiny.en", "fp32")
    r = cli("bench", clip, "--targets", "tiny.en-int8", "--drafters", "tiny.en-fp32",
            "--budgets", "2", "-r", "1", "--warmup", "0", "-q",
            models_dir=bundle("tiny.en").parent)
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert "encoder of tiny.en-int8 (target, " in out
    assert "encoder of tiny.en-fp32 (drafter, 1 thread): onnxruntime fp32" in out


def test_a_choice_describes_what_it_beat():
    c = EncoderChoice("openvino bf16", "measured",
                      {"openvino bf16": 0.1234, "onnxruntime int8": 0.5, "openvino f32": 0.4})
    assert c.describe() == ("openvino bf16 (measured: 0.123 s per 30-s window; openvino f32 "
                            "0.400, onnxruntime int8 0.500)")
    assert EncoderChoice("onnxruntime int8", "asked").describe() == "onnxruntime int8"
    assert c.candidate == EncoderCandidate("openvino", "bf16")


# -- the words ---------------------------------------------------------------------------------
def test_transcribe_writes_the_same_words_with_1_and_2_threads_under_auto(tiny, librivox,
                                                                         tmp_path):
    """The report of issue #45: `-t 1` and `-t 2` chose two back ends, whose near-ties flipped
    words. With `--encoder auto` measured for real (nothing scripted), both runs take the one
    choice of this machine and model, and write the same text. Two back ends are timed
    (onnxruntime against OpenVINO bf16: a precision given), half the seconds of all four: a
    choice between two is what the report was about (all four are chosen among, with scripted
    seconds, above; timed for real by the README's quick start, tests/test_inputs.py, where
    the models folder holds no choice yet: a fresh clone, as CI runs it)."""
    import subprocess
    import sys

    clip = min(librivox, key=lambda c: os.path.getsize(c.path)).path  # a 3-s sentence
    env = {**os.environ, encoders.ENV_ENCODER: "auto",  # conftest asks for onnxruntime
           encoders.ENV_OV_PRECISION: "bf16",
           "XDG_CACHE_HOME": str(tmp_path / "user-cache"), "AS2D_MODELS_DIR": str(tiny.parent)}
    runs = {}
    for threads in ("1", "2"):
        p = subprocess.run([sys.executable, "-m", "as2d", "transcribe", str(clip), "--model",
                            str(tiny), "--decoder", "target", "-t", threads, "--stats"],
                           capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        runs[threads] = p
    one, two = runs["1"], runs["2"]
    assert one.stdout.strip() and one.stdout == two.stdout
    said = [r.stderr.count("choosing the encoder back end for tiny.en") for r in (one, two)]
    assert said == [1, 0]  # measured by the first run, remembered by the second

    def encoder(r):
        line = " ".join(r.stderr.split())
        return line[line.index("encoder=") + 8:].split(" (")[0]

    assert encoder(one) == encoder(two)
