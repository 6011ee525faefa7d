"""The long soak's arithmetic: RSS growth after the warm-up as a least-squares line, per
hour and per million requests."""

from __future__ import annotations

import pytest

from bench.soak import growth


def test_growth_is_the_slope_after_the_warm_up_per_hour_and_per_million_requests() -> None:
    t = [float(s) for s in range(0, 3601, 60)]
    # Warm-up: from 50,000 to 100,000 KiB in 5 minutes, then 1 % of that an hour.
    rss = [50_000 + s * 50_000 / 300 if s < 300 else 100_000 + (s - 300) / 3600 * 1000 for s in t]
    series = {7: {"label": "pool-io worker", "t": t, "rss": rss, "fds": [9] * len(t)}}
    blocks = {"io": {"t": t, "blocks": [1e6] * len(t)}}
    got = growth(series, blocks, warmup_s=300, requests=360_000, total_s=3600)
    (proc,) = got["processes"]
    assert proc["label"] == "pool-io worker"
    assert proc["rss_kib"]["per_hour"] == pytest.approx(0.01, rel=1e-3)
    # 100 requests a second: 1000 KiB an hour is 1000 / 0.36 KiB per million requests.
    assert proc["rss_kib"]["per_million_requests"] == pytest.approx(1000 / 0.36, rel=1e-3)
    (pool,) = got["pools"]
    assert pool["allocated_blocks"]["per_hour"] == 0.0


def test_a_process_with_too_few_samples_after_the_warm_up_is_left_out() -> None:
    series = {7: {"label": "envoy", "t": [0.0, 10.0, 20.0], "rss": [1, 2, 3], "fds": [1, 1, 1]}}
    assert growth(series, {}, warmup_s=15, requests=10, total_s=20) == {
        "processes": [],
        "pools": [],
    }
