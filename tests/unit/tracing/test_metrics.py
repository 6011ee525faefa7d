"""The pool's metrics: the request path counts in process, ``flush`` folds the counts
into prometheus_client, which is what a scrape reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.prometheus import samples, value
from tracing.metrics import PoolMetrics

ROUTE = "GET /v1/offers/bike"


def scraped(registry: CollectorRegistry) -> dict:
    return samples(generate_latest(registry).decode())


def test_observations_reach_prometheus_on_flush_and_only_once() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    metrics.observe_request(ROUTE, 200, 0.2)
    metrics.observe_request(ROUTE, 503, 0.004)
    metrics.observe_upstream("promotions", 0.05, "5xx")
    assert value(scraped(registry), "pricing_requests_total", route=ROUTE, **{"class": "2xx"}) == 0

    metrics.flush()
    metrics.flush()  # nothing new: adds nothing
    first = scraped(registry)
    assert value(first, "pricing_requests_total", route=ROUTE, **{"class": "2xx"}) == 1
    assert value(first, "pricing_requests_total", route=ROUTE, **{"class": "5xx"}) == 1
    assert value(first, "pricing_request_duration_seconds_count", route=ROUTE) == 2
    assert value(first, "pricing_request_duration_seconds_sum", route=ROUTE) == pytest.approx(0.204)
    duration = "pricing_request_duration_seconds_bucket"
    assert value(first, duration, route=ROUTE, le="0.005") == 1
    assert value(first, duration, route=ROUTE, le="0.25") == 2
    failures = "pricing_upstream_failures_total"
    assert value(first, failures, upstream="promotions", reason="5xx") == 1

    metrics.observe_request(ROUTE, 200, 0.3)
    metrics.flush()
    second = scraped(registry)
    assert value(second, "pricing_requests_total", route=ROUTE, **{"class": "2xx"}) == 2
    assert value(second, "pricing_request_duration_seconds_count", route=ROUTE) == 3
    assert value(second, duration, route=ROUTE, le="0.25") == 2
    assert value(second, failures, upstream="promotions", reason="5xx") == 1


def test_counts_kept_elsewhere_come_in_before_each_flush_and_a_failing_hook_does_not_stop_it() -> (
    None
):
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    exported = {"total": 0}
    seen: dict = {}

    def broken() -> None:
        raise RuntimeError("boom")

    def sync() -> None:
        metrics.sync(metrics.spans_exported, (), exported["total"], seen)

    metrics.before_flush += [broken, sync]
    exported["total"] = 5
    metrics.observe_loop_lag(0.001)
    metrics.flush()
    got = scraped(registry)
    assert value(got, "pricing_spans_exported_total") == 5
    assert value(got, "pricing_loop_lag_seconds_count") == 1


def test_in_multiprocess_mode_only_flushed_counts_are_in_the_pool_totals(tmp_path: Path) -> None:
    """Two worker processes: one flushes (as every second and at worker exit), one is
    killed before it does; the pool's totals hold the first one's counts only."""
    script = """
import os, sys
from tracing.metrics import PoolMetrics
metrics = PoolMetrics(None)
for _ in range(int(sys.argv[1])):
    metrics.observe_request("GET /v1/offers/bike", 200, 0.1)
if sys.argv[2] == "flush":
    metrics.flush()
os._exit(0)
"""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    root = Path(__file__).resolve().parents[3]
    for count, how in (("3", "flush"), ("4", "flush"), ("5", "lost")):
        done = subprocess.run(
            [sys.executable, "-c", script, count, how], env=env, cwd=root, capture_output=True
        )
        assert done.returncode == 0, done.stderr
    read = """
import json
import pytest
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(json.dumps(generate_latest(registry).decode()))
"""
    done = subprocess.run(
        [sys.executable, "-c", read], env=env, cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    totals = samples(json.loads(done.stdout))
    assert value(totals, "pricing_requests_total", route=ROUTE, **{"class": "2xx"}) == 7
    assert value(totals, "pricing_request_duration_seconds_count", route=ROUTE) == 7
