"""The benchmark's arithmetic: pooled throughput, slower-window share and the hindsight oracle,
on small timing tables worked out by hand."""

from __future__ import annotations

import pytest

from as2d.runtime.bench.metrics import (
    Config,
    ConfigResult,
    median_of_repeats,
    oracle,
    slower_share,
    summary,
)
from as2d.runtime.events import WindowStats

TARGET = Config("t/target", "t", "target")
SD2 = Config("t/sd:d:k2", "t", "sd", "d", 2)
SD8 = Config("t/sd:d:k8", "t", "sd", "d", 8)
AS2D = Config("t/as2d:d", "t", "as2d", "d", None)


def result(cfg, seconds, tokens=(10, 20, 30), wall=10.0):
    windows = [WindowStats(i, tokens=n, decode_seconds=s, source="a.wav")
               for i, (n, s) in enumerate(zip(tokens, seconds))]
    return ConfigResult(cfg, windows, audio_seconds=60.0, wall_seconds=wall)


def test_pooled_throughput_is_total_tokens_over_total_time():
    r = result(TARGET, [1.0, 2.0, 3.0])
    assert r.throughput == pytest.approx(60 / 6.0)  # not the mean of per-window rates


def test_slower_share_compares_window_by_window():
    base = result(TARGET, [1.0, 2.0, 3.0])
    assert slower_share(result(SD2, [1.1, 1.0, 3.5]), base) == pytest.approx(2 / 3)
    assert slower_share(result(AS2D, [0.5, 1.0, 3.0]), base) == 0.0  # a tie is not slower


def test_oracle_takes_each_windows_fastest_catalog_configuration():
    rs = [result(TARGET, [1.0, 2.0, 3.0]), result(SD2, [0.5, 2.5, 2.0]),
          result(SD8, [0.8, 1.0, 2.5]), result(AS2D, [0.1, 0.1, 0.1])]  # AS²D is no catalog
    orc = oracle(rs)
    assert orc.choices == {("a.wav", 0): "t/sd:d:k2", ("a.wav", 1): "t/sd:d:k8",
                           ("a.wav", 2): "t/sd:d:k2"}
    assert orc.throughput == pytest.approx(60 / (0.5 + 1.0 + 2.0))
    assert orc.wins() == {"t/sd:d:k2": 2, "t/sd:d:k8": 1}


def test_summary_reports_speedups_and_share_of_oracle():
    rs = [result(TARGET, [1.0, 2.0, 3.0], wall=12.0), result(SD2, [0.5, 2.5, 2.0], wall=11.0),
          result(AS2D, [0.5, 1.0, 1.5], wall=8.0)]
    rows = {r["config"]: r for r in summary(rs)["targets"]["t"]["configs"]}
    assert rows["t/as2d:d"]["speedup"] == pytest.approx(2.0)
    assert rows["t/as2d:d"]["rtf_ratio"] == pytest.approx(12.0 / 8.0)
    # oracle per window: min(1.0, 0.5), min(2.0, 2.5), min(3.0, 2.0) = 4.5 s in all
    assert rows["t/as2d:d"]["of_oracle"] == pytest.approx((60 / 3.0) / (60 / 4.5), rel=1e-3)
    assert rows["t/sd:d:k2"]["slower_share"] == pytest.approx(1 / 3, abs=1e-4)  # rounded


def test_repeats_are_combined_by_per_window_median():
    runs = [[WindowStats(0, tokens=10, decode_seconds=s, source="a")] for s in (3.0, 1.0, 2.0)]
    assert median_of_repeats(runs)[0].decode_seconds == 2.0
