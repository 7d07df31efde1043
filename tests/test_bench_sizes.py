"""The arithmetic of scripts/bench_sizes.py's projection, on numbers worked out by hand.

The script's table is a projection from measured costs; a wrong formula would put a wrong
speed-up in the README without anyone noticing, so the formula is checked here (no timing).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_sizes", ROOT / "scripts" /
                                                  "bench_sizes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ONE = {1: 0.15, 2: 0.16, 4: 0.18, 8: 0.22, 16: 0.30}  # pass seconds by rows, 1 thread
TWO = {1: 0.10, 2: 0.11, 4: 0.12, 8: 0.15, 16: 0.20}  # and on 2 threads


def test_interpolation_between_and_past_the_measured_rows(bench):
    assert bench.interpolate(TWO, 6) == pytest.approx(0.135)
    assert bench.interpolate(TWO, 4) == pytest.approx(0.12)
    assert bench.interpolate(TWO, 0.5) == pytest.approx(0.10)
    assert bench.interpolate(TWO, 20) == pytest.approx(0.225)  # the last segment's slope


def test_projection_per_window(bench):
    p = bench.project(enc_target=1.0, step_target_only=0.1, pass_1t=ONE, pass_2t=TWO,
                      enc_drafter=0.2, step_drafter=0.003, tokens=120, tokens_per_pass=3,
                      candidates_per_pass=5, alone_share=0.25, enc_fw=2.0, step_fw=0.12)
    # 40 passes: 10 alone (2 threads, 1 row), 30 verifying 6 rows; the drafter holds one core
    # for 0.2 + 120 × 0.003 = 0.56 s, during which passes run at 1-thread speed.
    decode = 30 * 0.135 + 10 * 0.10 + 0.56 * (1 - 0.135 / 0.20)
    assert p["passes"] == pytest.approx(40)
    assert p["rows_per_verify_pass"] == pytest.approx(6)
    assert p["drafter_busy_s"] == pytest.approx(0.56)
    assert p["as2d_decode_s"] == pytest.approx(decode)
    assert p["as2d_s"] == pytest.approx(1.0 + decode)
    assert p["target_only_s"] == pytest.approx(1.0 + 12.0)
    assert p["speedup"] == pytest.approx(13.0 / (1.0 + decode))
    assert p["decode_speedup"] == pytest.approx(12.0 / decode)
    assert p["faster_whisper_s"] == pytest.approx(2.0 + 14.4)
    assert p["vs_faster_whisper"] == pytest.approx(16.4 / (1.0 + decode))
    assert not p["drafter_bound"]


def test_a_target_faster_than_its_drafter_waits_for_the_draft(bench):
    p = bench.project(enc_target=1.0, step_target_only=0.1, pass_1t=ONE, pass_2t=TWO,
                      enc_drafter=0.2, step_drafter=0.003, tokens=120, tokens_per_pass=120,
                      candidates_per_pass=5, alone_share=0.0)
    assert p["drafter_bound"]
    assert p["as2d_decode_s"] == pytest.approx(0.56)  # one pass, but the draft takes 0.56 s
    assert "faster_whisper_s" not in p
