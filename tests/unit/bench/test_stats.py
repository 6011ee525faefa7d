"""Percentiles and group summaries: nearest-rank, failures stay in the distribution."""

from __future__ import annotations

import pytest

from bench.loadgen import TIMEOUT, Samples
from bench.stats import GroupStats, Rows, lag_summary_ms, mean_interval95
from tracing.readback.report import percentile


def test_nearest_rank_percentile() -> None:
    values = [float(x) for x in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 99.9) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([7.0], 99.9) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def samples() -> Samples:
    # kinds: 0 = "a", 1 = "b"; due times 0..9 s
    return Samples(
        kinds=("a", "b"),
        kind=[0, 1, 0, 1, 0, 1, 0, 1, 0, 1],
        scheduled_s=[float(i) for i in range(10)],
        lag_s=[0.001] * 10,
        latency_s=[0.1, 0.2, 0.3, 0.4, 0.6, 0.5, 0.1, 0.2, 5.0, 0.1],
        status=[200, 200, 200, 200, 200, 200, 504, 200, TIMEOUT, 200],
    )


def test_rows_select_kind_and_window() -> None:
    rows = Rows.select(samples(), ["a"], 2.0, 9.0)
    # a at 2, 4, 6, 8
    assert rows.latency_s == (0.3, 0.6, 0.1, 5.0)
    assert rows.window_s == 7.0


def test_group_stats_counts_failures_and_deadline() -> None:
    stats = GroupStats.of(Rows.select(samples(), ["a", "b"], 0.0, 10.0), deadline_s=0.5)
    assert stats.count == 10
    assert stats.ok == 8
    assert stats.failures == {"http_504": 1, "timeout": 1}
    # 200 and <= 0.5 s: 0.1 0.2 0.3 0.4 0.5 0.2 0.1 -> 7 of 10 (0.6 s is late)
    assert stats.within_deadline == pytest.approx(0.7)
    # the timeout stays in the latency distribution
    assert stats.max_ms == pytest.approx(5000.0)
    assert stats.p50_ms <= stats.p95_ms <= stats.p99_ms <= stats.p999_ms <= stats.max_ms
    assert stats.rps == pytest.approx(0.8)
    doc = stats.to_json()
    assert doc["within_deadline"] == pytest.approx(0.7)


def test_pooled_rows_add_up() -> None:
    a = Rows.select(samples(), ["a"], 0.0, 10.0)
    b = Rows.select(samples(), ["b"], 0.0, 10.0)
    pooled = Rows.pooled([a, b])
    assert len(pooled.status) == 10
    assert pooled.window_s == 20.0


def test_lag_summary() -> None:
    lag = lag_summary_ms(Rows.select(samples(), ["a"], 0.0, 10.0))
    assert lag == {"p50_ms": 1.0, "p99_ms": 1.0, "max_ms": 1.0}


def test_mean_interval95_is_students_t_over_the_repeats() -> None:
    mean, low, high = mean_interval95([1.0, 2.0, 3.0]) or (0.0, 0.0, 0.0)
    # sd 1 over 3 values: half-width t(0.975, 2) / sqrt(3) = 4.303 / 1.732
    assert mean == 2.0
    assert (low, high) == pytest.approx((2.0 - 2.4843, 2.0 + 2.4843), abs=1e-3)
    assert mean_interval95([5.0, 5.0]) == (5.0, 5.0, 5.0)
    assert mean_interval95([5.0]) is None
    # Many repeats: the normal's 1.96.
    wide = mean_interval95([0.0, 2.0] * 20)
    assert wide is not None
    assert wide[2] - wide[0] == pytest.approx(1.96 * (40 / 39) ** 0.5 / 40**0.5, rel=1e-6)
