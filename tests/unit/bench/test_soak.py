"""The long soak's arithmetic: RSS growth over the run's second half as a least-squares
line, per hour and per million requests, with the slope while warming beside it."""

from __future__ import annotations

import pytest

from bench.soak import growth, long_lines


def test_growth_is_the_second_halfs_slope_per_hour_and_per_million_requests() -> None:
    t = [float(s) for s in range(0, 3601, 60)]
    # Filling: from 50,000 to 100,000 KiB in 30 minutes (past the 5-minute warm-up),
    # then 1 % of that an hour.
    rss = [50_000 + s * 50_000 / 1800 if s < 1800 else 100_000 + (s - 1800) / 3.6 for s in t]
    series = {7: {"label": "pool-io worker", "t": t, "rss": rss, "fds": [9] * len(t)}}
    blocks = {"io": {"t": t, "blocks": [1e6] * len(t)}}
    got = growth(series, blocks, warmup_s=300, requests=360_000, total_s=3600)
    (proc,) = got["processes"]
    assert proc["label"] == "pool-io worker"
    assert proc["rss_kib"]["from_s"] == 1800
    assert proc["rss_kib"]["per_hour"] == pytest.approx(0.01, rel=1e-3)
    # While filling it grew far faster: the levelling off is in the figures.
    assert proc["warming"]["per_hour"] > 50 * proc["rss_kib"]["per_hour"]
    # 100 requests a second: 1000 KiB an hour is 1000 / 0.36 KiB per million requests.
    assert proc["rss_kib"]["per_million_requests"] == pytest.approx(1000 / 0.36, rel=1e-3)
    (pool,) = got["pools"]
    assert pool["allocated_blocks"]["per_hour"] == 0.0


def test_a_process_with_too_few_samples_after_the_warm_up_is_left_out() -> None:
    series = {7: {"label": "envoy", "t": [0.0, 10.0, 20.0], "rss": [1, 2, 3], "fds": [1, 1, 1]}}
    assert growth(series, {}, warmup_s=15, requests=10, total_s=20) == {
        "from_s": 15,
        "processes": [],
        "pools": [],
    }


def test_the_target_is_judged_on_the_service_not_on_its_test_upstream() -> None:
    t = [float(s) for s in range(0, 3601, 60)]
    flat = {"t": t, "rss": [100_000.0] * len(t), "fds": [9] * len(t)}
    growing = {**flat, "rss": [100_000 + s for s in t]}  # +3.6 %/h
    series = {1: {**flat, "label": "envoy"}, 2: {**growing, "label": "simulator"}}
    got = growth(series, {}, warmup_s=300, requests=360_000, total_s=3600)
    assert long_lines(got)[0].split("(target")[1].startswith(" < 1 %/h: met)")
    series[1] = {**growing, "label": "envoy"}
    got = growth(series, {}, warmup_s=300, requests=360_000, total_s=3600)
    assert "NOT met" in long_lines(got)[0]
