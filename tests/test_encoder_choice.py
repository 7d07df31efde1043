"""``--encoder auto``: the encoder back end is chosen by timing the candidates, once per machine,
model and thread count, and remembered beside the bundle.

Speed cannot be asserted in a test, so the timings are scripted: every candidate is a real
encoder (onnxruntime, OpenVINO f32, bf16 and int8 on the real tiny.en bundle) that really runs on a
real-sized window, but the seconds it reports come from the test, which may make any candidate
the fastest. What is checked is the mechanism: the memo is written with its key and reused
without timing anything, a changed key (threads, library version) measures again, the
overrides win, a back end that fails is skipped, and the choice is reported (the model's
``encoder_name``, ``--stats``, ``as2d models list``, ``as2d bench``).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from as2d.runtime.whisper import encoder_choice, encoders
from as2d.runtime.whisper.encoder_choice import EncoderCandidate, EncoderChoice, measure

needs_openvino = pytest.mark.skipif(not encoders.openvino_available(),
                                    reason="openvino is not installed")


@pytest.fixture(autouse=True)
def _auto(monkeypatch):
    """`auto` as a user has it (the suite's conftest asks for onnxruntime), and no choice kept
    in this process from another test."""
    monkeypatch.delenv(encoders.ENV_ENCODER, raising=False)
    monkeypatch.delenv(encoders.ENV_OV_PRECISION, raising=False)
    encoder_choice.forget_in_process()
    yield
    encoder_choice.forget_in_process()


@pytest.fixture
def tiny(bundle, tmp_path):
    """A private tiny.en int8 bundle (its graphs linked, its manifest copied) in a models
    folder of its own, so that its memo starts empty."""
    from as2d.models.install import ensure_openvino_graph

    src = bundle("tiny.en", "int8")
    for kind in ("fp32", "int8w"):  # what OpenVINO compiles (made once in the test models folder)
        ensure_openvino_graph(src, kind)
    dest = tmp_path / "models" / src.name
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("."):
            if f.name == "manifest.json":
                shutil.copy(f, dest / f.name)
            else:
                (dest / f.name).symlink_to(f)
    return dest


class Clock:
    """Scripted seconds per candidate (by ``encoder.detail``); the run itself is real."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = dict(seconds)
        self.calls: list[str] = []

    def __call__(self, encoder, mel) -> float:
        encoder.run(mel)
        self.calls.append(encoder.detail)
        t = self.seconds[encoder.detail]
        if isinstance(t, BaseException):
            raise t
        return t


@pytest.fixture
def clock(monkeypatch):
    def install(**seconds):
        c = Clock({k.replace("_", " ", 1): v for k, v in seconds.items()})
        monkeypatch.setattr(encoder_choice, "time_run", c)
        monkeypatch.setattr(encoder_choice, "RUNS", 1)  # one timed round after the warm-ups
        monkeypatch.setattr(encoder_choice, "WINDOW_FRAMES", 600)  # 6 s: the runs are real
        return c

    return install


def _load(path, threads=1, **kw):
    from as2d.runtime.whisper.model import WhisperModel

    notes: list[str] = []
    model = WhisperModel(path, threads=threads, progress=notes.append, **kw)
    return model, notes


def _memo(path) -> dict:
    return json.loads((path / encoder_choice.MEMO_FILE).read_text())["entries"]


# -- the measurement itself (real encoders, scripted seconds) ---------------------------------
def test_measure_times_each_candidate_after_a_warm_up_and_drops_hopeless_ones(tiny, clock):
    from as2d.runtime.whisper.encoders import OrtEncoder

    c = clock(onnxruntime_int8=0.30)
    enc = OrtEncoder(tiny / "encoder.onnx", 1, precision="int8")
    other = OrtEncoder(tiny / "encoder_fp32.onnx", 1, precision="fp32")
    c.seconds["onnxruntime fp32"] = 0.90  # 3× the best warm-up: not timed again
    cands = [EncoderCandidate("onnxruntime", "int8"), EncoderCandidate("onnxruntime", "fp32")]
    built = {"onnxruntime int8": enc, "onnxruntime fp32": other}
    seconds, skipped, got = measure(cands, lambda cand: built[cand.name],
                                    encoder_choice.window(80), runs=3,
                                    budget_s=1e6)
    assert seconds == {"onnxruntime int8": 0.30, "onnxruntime fp32": 0.90} and not skipped
    assert c.calls == ["onnxruntime int8", "onnxruntime fp32"]  # warm-ups only
    assert encoder_choice.fastest(seconds, cands) == "onnxruntime int8"
    c.calls.clear()
    c.seconds["onnxruntime fp32"] = 0.32  # close: both are timed in interleaved rounds
    measure(cands, lambda cand: built[cand.name], encoder_choice.window(80), runs=2,
            budget_s=1e6)
    assert c.calls == ["onnxruntime int8", "onnxruntime fp32"] * 3
    c.calls.clear()
    c.seconds["onnxruntime fp32"] = 0.50  # kept after its warm-up, dropped after one round
    measure(cands, lambda cand: built[cand.name], encoder_choice.window(80), runs=3,
            budget_s=1e6)
    assert c.calls == ["onnxruntime int8", "onnxruntime fp32"] * 2
    c.calls.clear()  # no time left after the warm-ups: one round still (warm-ups are biased)
    c.seconds["onnxruntime fp32"] = 0.31
    seconds, _, _ = measure(cands, lambda cand: built[cand.name], encoder_choice.window(80),
                            runs=3, budget_s=0)
    assert c.calls == ["onnxruntime int8", "onnxruntime fp32"] * 2
    assert encoder_choice.fastest(seconds, cands) == "onnxruntime int8"
    assert encoder_choice.fastest({"onnxruntime fp32": 0.3, "onnxruntime int8": 0.3},
                                  cands) == "onnxruntime int8"  # a tie: the earlier one


# -- auto on a real bundle ---------------------------------------------------------------------
@needs_openvino
def test_auto_measures_once_remembers_and_reuses_the_choice(tiny, clock):
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.25, openvino_int8=0.22)
    model, notes = _load(tiny)
    assert model.encoder.detail == "openvino f32"  # the measurement decides, not a CPU flag
    assert model.encoder_choice.how == "measured"
    assert model.encoder_name.startswith("openvino f32 (measured: 0.200 s per 30-s window")
    said = [n for n in notes if n.startswith("choosing the encoder back end")]
    assert said == [said[0]] and "for tiny.en on this CPU (once)" in said[0]
    assert "onnxruntime int8, openvino f32, openvino bf16, openvino int8" in said[0]
    (entry,) = _memo(tiny).values()
    assert entry["choice"] == "openvino f32" and entry["threads"] == 1
    assert entry["seconds"] == {"onnxruntime int8": 0.3, "openvino f32": 0.2,
                                "openvino bf16": 0.25, "openvino int8": 0.22}
    key = entry["key"]
    assert key["threads"] == 1 and key["machine"] == encoder_choice.machine()
    assert key["machine"]["cpu"] == encoder_choice.cpu_model_name()
    assert key["candidates"] == ["onnxruntime int8", "openvino f32", "openvino bf16",
                                 "openvino int8"]
    # int8's speed depends on its group size: a changed group measures again.
    assert key["settings"] == {"openvino int8 group": encoders.OV_INT8_GROUP}
    assert not [p for p in tiny.iterdir() if p.name.endswith(".tmp")]  # written atomically

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
def test_a_changed_key_measures_again(tiny, clock, monkeypatch):
    c = clock(onnxruntime_int8=0.50, openvino_f32=0.60, openvino_bf16=0.40, openvino_int8=0.45)
    assert _load(tiny, threads=1)[0].encoder.detail == "openvino bf16"
    c.seconds.update({"onnxruntime int8": 0.10})
    two, notes = _load(tiny, threads=2)  # another thread count
    assert two.encoder.detail == "onnxruntime int8" and two.encoder_choice.how == "measured"
    assert any("2 threads" in n for n in notes)
    assert sorted(e["threads"] for e in _memo(tiny).values()) == [1, 2]
    # A new onnxruntime (or CPU): the key differs, so the thread count measured before is
    # measured again.
    real = encoder_choice.machine
    monkeypatch.setattr(encoder_choice, "machine",
                        lambda: {**real(), "onnxruntime": "99.0.0"})
    encoder_choice.forget_in_process()
    c.calls.clear()
    again, _ = _load(tiny, threads=1)
    assert again.encoder_choice.how == "measured" and c.calls
    assert again.encoder.detail == "onnxruntime int8"
    assert len(_memo(tiny)) == 3


def test_overrides_win_and_measure_nothing(tiny, clock, monkeypatch):
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.10, openvino_int8=0.15)
    model, notes = _load(tiny, encoder="onnxruntime")
    assert model.encoder.detail == "onnxruntime int8" and model.encoder_choice.how == "asked"
    assert model.encoder_name == "onnxruntime int8"
    monkeypatch.setenv(encoders.ENV_ENCODER, "onnxruntime")
    assert _load(tiny)[0].encoder.detail == "onnxruntime int8"
    assert c.calls == [] and not notes and not (tiny / encoder_choice.MEMO_FILE).exists()
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
    mf["files"].pop("encoder_fp32")
    mf["files"].pop("encoder_int8w")
    (tiny / "manifest.json").write_text(json.dumps(mf))
    c = clock(onnxruntime_int8=0.30, openvino_f32=0.01, openvino_bf16=0.01, openvino_int8=0.01)
    model, notes = _load(tiny)
    assert model.encoder.detail == "onnxruntime int8" and model.encoder_choice.how == "measured"
    assert c.calls == ["onnxruntime int8"]
    (entry,) = _memo(tiny).values()
    assert set(entry["skipped"]) == {"openvino f32", "openvino bf16", "openvino int8"}
    assert "no fp32 encoder" in entry["skipped"]["openvino bf16"]
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
    assert not (tiny / encoder_choice.MEMO_FILE).exists()


# -- reported ----------------------------------------------------------------------------------
@needs_openvino
def test_models_list_shows_the_remembered_choice(tiny, clock, monkeypatch):
    from helpers import cli

    monkeypatch.setenv("COLUMNS", "250")  # the table on one line per row
    clock(onnxruntime_int8=0.30, openvino_f32=0.50, openvino_bf16=0.20, openvino_int8=0.40)
    _load(tiny, threads=1)
    _load(tiny, threads=2)
    r = cli("models", "list", models_dir=tiny.parent)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if line.startswith("│ tiny.en "))
    assert "int8: openvino bf16 (1, 2 threads)" in " ".join(row.split())
    base_row = next(line for line in r.stdout.splitlines() if line.startswith("│ base "))
    assert "openvino" not in base_row


@needs_openvino
def test_stats_reports_the_measured_choice(tiny, librivox, clock):
    from helpers import cli

    clock(onnxruntime_int8=0.30, openvino_f32=0.20, openvino_bf16=0.25, openvino_int8=0.27)
    clip = min(librivox, key=lambda c: os.path.getsize(c.path)).path
    r = cli("transcribe", clip, "--model", tiny, "--decoder", "target", "--stats")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("choosing the encoder back end for tiny.en on this CPU (once)") == 1
    assert "encoder=openvino f32 (measured: 0.200 s per 30-s window; openvino bf16 0.250, " \
           "openvino int8 0.270, onnxruntime int8 0.300)" in " ".join(r.stderr.split())


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
