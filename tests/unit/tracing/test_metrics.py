"""The pool's metrics: the request path counts in process, ``flush`` folds the counts
into prometheus_client, which is what a scrape reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import gevent
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.prometheus import samples, value
from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tracing.metrics import PoolMetrics
from tracing.timing.call_state import CallTiming
from tracing.timing.server_timing import RequestTiming


def scraped(registry: CollectorRegistry) -> dict:
    return samples(generate_latest(registry).decode())


DURATION = "http_server_request_duration_seconds"
REQUESTS = "pricing_route_request_duration_seconds"
BIKE_200 = {
    "http_request_method": "GET",
    "http_route": "/v1/offers/bike",
    "http_response_status_code": "200",
    "pool": "io",
}
BIKE_503 = {**BIKE_200, "http_response_status_code": "503"}


def test_observations_reach_prometheus_on_flush_and_only_once() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io")
    metrics.observe_request("GET", "/v1/offers/bike", 200, 0.2)
    metrics.observe_request("GET", "/v1/offers/bike", 503, 0.004)
    metrics.observe_upstream("promotions", 0.05, "5xx")
    assert value(scraped(registry), DURATION + "_count", **BIKE_200) == 0

    metrics.flush()
    metrics.flush()  # nothing new: adds nothing
    first = scraped(registry)
    assert value(first, DURATION + "_count", **BIKE_200) == 1
    assert value(first, DURATION + "_count", **BIKE_503) == 1
    assert value(first, DURATION + "_sum", **BIKE_200) == pytest.approx(0.2)
    assert value(first, DURATION + "_bucket", **BIKE_503, le="0.005") == 1
    assert value(first, DURATION + "_bucket", **BIKE_200, le="0.1") == 0
    assert value(first, DURATION + "_bucket", **BIKE_200, le="0.2") == 1  # the io p99 target
    failures = "pricing_upstream_failures_total"
    assert value(first, failures, upstream="promotions", reason="5xx") == 1

    metrics.observe_request("GET", "/v1/offers/bike", 200, 0.3)
    metrics.flush()
    second = scraped(registry)
    assert value(second, DURATION + "_count", **BIKE_200) == 2
    assert value(second, DURATION + "_bucket", **BIKE_200, le="0.25") == 1
    assert value(second, failures, upstream="promotions", reason="5xx") == 1


def test_unknown_methods_share_one_series_and_unmatched_paths_have_no_route() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io")
    for method in ("BREW", "PROPFIND", "QUERY"):
        metrics.observe_request(method, "", 405, 0.001)
    metrics.flush()
    labels = {**BIKE_200, "http_request_method": "_OTHER", "http_route": ""}
    labels["http_response_status_code"] = "405"
    assert value(scraped(registry), DURATION + "_count", **labels) == 3


def test_the_buckets_reach_the_longest_route_timeout_and_bracket_the_hpa_target() -> None:
    from routing.load import load_routes
    from tracing.metric_families import DURATION_BUCKETS_S, LOOP_LAG_BUCKETS_S

    longest_s = max(route.timeout_ms for route in load_routes().routes) / 1000
    assert DURATION_BUCKETS_S[-1] >= longest_s
    assert 0.2 in DURATION_BUCKETS_S
    assert 0.02 in LOOP_LAG_BUCKETS_S  # the io pool's HPA target: pricing_loop_lag_p99_seconds


def test_the_red_histogram_has_a_bucket_at_every_route_timeout_as_the_rules_read_it() -> None:
    """A route timeout off the fixed bounds (450 ms) is a bucket of the worker's RED
    histogram, written as the alert rules select it (``le`` of ``timeout_bound``)."""
    from dataclasses import replace

    from routing.alerts import timeout_bound
    from routing.load import load_routes

    shipped = load_routes()
    routes = tuple(
        replace(r, timeout_ms=450) if r.endpoint == "offers.bike" else r for r in shipped.routes
    )
    config = replace(shipped, routes=routes)
    bike = config.route_for_endpoint("offers.bike")
    assert bike is not None
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io", config=config)
    metrics.observe_request("GET", "/v1/offers/bike", 200, 0.44)
    metrics.observe_request("GET", "/v1/offers/bike", 200, 0.46)
    metrics.flush()
    got = scraped(registry)
    le = timeout_bound(bike, config)
    assert le == "0.45"
    assert value(got, DURATION + "_bucket", **BIKE_200, le=le) == 1
    assert value(got, DURATION + "_bucket", **BIKE_200, le="0.5") == 2
    # The fixed bounds stay, and every pool gets every route's timeout (3 s: rideshare's).
    assert value(got, DURATION + "_bucket", **BIKE_200, le="3.0") == 2
    assert value(got, DURATION + "_bucket", **BIKE_200, le="0.25") == 0


def test_build_info_and_the_workers_process_metrics_are_exposed() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io")
    metrics.flush()
    got = scraped(registry)
    (build,) = [labels for (name, labels) in got if name == "pricing_build_info"]
    assert dict(build)["version"] and dict(build)["python_version"].count(".") == 2
    assert value(got, "process_cpu_seconds_total") > 0
    assert value(got, "process_resident_memory_bytes") > 1e6
    assert value(got, "process_open_fds") >= 3
    assert value(got, "pricing_python_allocated_blocks") > 1000


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


class _Ticker:
    """A ticker whose ticks the test gives."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.observers: list[Callable[[float], None]] = []

    def tick(self) -> None:
        for observe in self.observers:
            observe(0.0)


def _flushes(metrics: PoolMetrics, ticker: _Ticker | None) -> list[int]:
    """Starts the periodic flush; the list grows by one at each flush."""
    flushed: list[int] = []
    metrics.flush = lambda: flushed.append(1)  # type: ignore[method-assign]
    metrics.ticker = ticker
    return flushed


def test_the_periodic_flush_rides_on_the_tickers_ticks() -> None:
    """With the loop-lag gauge ticking, the flush wakes the worker no more often: it
    runs on every tick that completes its interval, in that tick's loop iteration."""
    metrics = PoolMetrics(CollectorRegistry())
    ticker = _Ticker(interval_s=5.0)
    flushed = _flushes(metrics, ticker)
    flusher = metrics.start_flushing(interval_s=10.0)
    try:
        gevent.sleep(0)
        assert flushed == [] and len(ticker.observers) == 1
        ticker.tick()
        gevent.sleep(0)
        assert flushed == []  # half the interval
        ticker.tick()
        gevent.sleep(0)
        assert len(flushed) == 1  # no time passed: the tick did it
        ticker.tick()
        ticker.tick()
        gevent.sleep(0)
        assert len(flushed) == 2
        assert metrics.start_flushing(interval_s=10.0) is None  # once per process
    finally:
        gevent.kill(flusher)


def test_the_flush_keeps_its_own_time_when_the_ticker_is_slower_or_stops() -> None:
    for ticker in (_Ticker(interval_s=1.0), _Ticker(interval_s=0.02)):
        metrics = PoolMetrics(CollectorRegistry())
        flushed = _flushes(metrics, ticker)
        flusher = metrics.start_flushing(interval_s=0.05)
        try:
            gevent.sleep(0.25)  # no tick comes: a slow ticker is not used, a stopped one
            assert flushed, ticker.interval_s  # is waited for two intervals at most
        finally:
            gevent.kill(flusher)


def test_in_multiprocess_mode_only_flushed_counts_are_in_the_pool_totals(tmp_path: Path) -> None:
    """Two worker processes: one flushes (as every second and at worker exit), one is
    killed before it does; the pool's totals hold the first one's counts only."""
    script = """
import os, sys
from tracing.metrics import PoolMetrics
metrics = PoolMetrics(None, pool="io")
for _ in range(int(sys.argv[1])):
    metrics.observe_request("GET", "/v1/offers/bike", 200, 0.1)
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
import gevent
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
    assert value(totals, DURATION + "_count", **BIKE_200) == 7
    assert value(totals, REQUESTS + "_count", **BIKE_200) == 7
    assert value(totals, REQUESTS + "_sum", **BIKE_200) == pytest.approx(0.7)


# --- what routes suggest reads ---------------------------------------------------------


def offer_delayed_by_quotes() -> RequestTiming:
    call = CallTiming(
        duration_s=0.140,
        network_s=0.100,
        scheduling_delay_s=0.030,
        blocked_s=0.0,
        culprits=MappingProxyType({RIDE_ROUTE: 0.025, "<hub>": 0.005}),
    )
    return RequestTiming(
        arrival_unix_ns=1,
        start_unix_ns=2,
        end_unix_ns=3,
        inbound_delay_s=0.020,
        inbound_cpu_wait_s=0.0,
        inbound_culprits=MappingProxyType({RIDE_ROUTE: 0.020}),
        duration_s=0.150,
        running_s=0.002,
        waiting_s=0.148,
        critical=call,
        critical_upstream="vehicles",
        presend_delay_s=0.001,
        wake_delay_s=0.002,
    )


def test_an_offer_delayed_by_quotes_says_who_and_how_long() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    timing = offer_delayed_by_quotes()
    metrics.observe_timing(BIKE_ROUTE, timing)
    metrics.flush()
    seen = scraped(registry)
    assert value(seen, "pricing_route_hub_wait_seconds_count", route=BIKE_ROUTE) == 1
    # inbound 20 + presend 1 + the critical call's 30 + wake 2 ms
    wait = value(seen, "pricing_route_hub_wait_seconds_sum", route=BIKE_ROUTE)
    assert wait == pytest.approx(0.053) and timing.hub_wait_s == pytest.approx(0.053)
    assert value(seen, "pricing_route_network_seconds_total", route=BIKE_ROUTE) == pytest.approx(
        0.1
    )
    culprit = "pricing_route_culprit_seconds_total"
    assert value(seen, culprit, route=RIDE_ROUTE, victim=BIKE_ROUTE) == pytest.approx(0.045)
    assert value(seen, culprit, route="<hub>", victim=BIKE_ROUTE) == pytest.approx(0.005)


CULPRIT = "pricing_route_culprit_seconds_total"
FOLDED = "pricing_metric_series_folded_total"


def culprit_series(seen: dict, victim: str) -> dict[str, float]:
    return {
        dict(labels)["route"]: v
        for (name, labels), v in seen.items()
        if name == CULPRIT and dict(labels)["victim"] == victim
    }


def test_culprits_per_victim_are_the_top_k_by_name_and_the_rest_one_other_series() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, culprit_top_k=2)
    # Ten culprits of one victim: the two with the most seconds keep their names.
    metrics._blame(BIKE_ROUTE, {f"GET /r{i}": 0.001 * (i + 1) for i in range(10)})
    metrics.flush()
    seen = scraped(registry)
    series = culprit_series(seen, BIKE_ROUTE)
    assert set(series) == {"GET /r9", "GET /r8", "<other>"}
    assert sum(series.values()) == pytest.approx(0.055)  # nothing lost in the fold
    folded = value(
        seen, "pricing_metric_series_folded_total", family="pricing_route_culprit_seconds"
    )
    assert folded == 8

    # A named culprit keeps its series; a newcomer, however large, is folded (a counter
    # never moves), and a pair already folded is not counted twice.
    metrics._blame(BIKE_ROUTE, {"GET /r0": 1.0, "GET /new": 2.0, "GET /r9": 0.5})
    metrics.flush()
    seen = scraped(registry)
    series = culprit_series(seen, BIKE_ROUTE)
    assert set(series) == {"GET /r9", "GET /r8", "<other>"}
    assert series["GET /r9"] == pytest.approx(0.510)
    assert sum(series.values()) == pytest.approx(3.555)
    folded = value(
        seen, "pricing_metric_series_folded_total", family="pricing_route_culprit_seconds"
    )
    assert folded == 9


def test_at_300_routes_the_culprit_family_grows_with_routes_not_routes_squared() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    routes = [f"GET /v1/synth/r{i:03d}" for i in range(300)]
    for victim in routes:
        metrics._blame(victim, {culprit: 0.002 for culprit in routes if culprit != victim})
    metrics.flush()
    seen = scraped(registry)
    culprits = [labels for (name, labels) in seen if name == CULPRIT]
    assert len(culprits) == 300 * 6  # top 5 and <other> per victim, not 300 x 299
    # suggest still sees every victim's whole delay: the folded seconds are not lost.
    assert sum(v for (n, _), v in seen.items() if n == CULPRIT) == pytest.approx(300 * 299 * 0.002)


HANDLER_COUNT = "pricing_handler_duration_seconds_count"


def handler_counts(seen: dict) -> dict[str, float]:
    return {dict(labels)["route"]: v for (name, labels), v in seen.items() if name == HANDLER_COUNT}


def test_timing_histograms_name_the_busiest_routes_and_fold_the_rest_into_other() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, route_timing_top_k=2)
    # Route i is asked i + 1 times: r4 and r3 are the busiest.
    for i in range(5):
        for _ in range(i + 1):
            metrics.observe_timing(f"GET /r{i}", offer_delayed_by_quotes())
            metrics.observe_request("GET", f"/r{i}", 200, 0.15)
    metrics.flush()
    seen = scraped(registry)
    assert handler_counts(seen) == {"GET /r4": 5, "GET /r3": 4, "<other>": 6}
    hub_wait = {
        dict(labels)["route"]
        for (name, labels) in seen
        if name == "pricing_route_hub_wait_seconds_count"
    }
    assert hub_wait == {"GET /r4", "GET /r3", "<other>"}
    for family in (
        "pricing_handler_duration_seconds",
        "pricing_inbound_delay_seconds",
        "pricing_inbound_cpu_wait_seconds",
        "pricing_route_hub_wait_seconds",
    ):
        assert value(seen, FOLDED, family=family) == 3, family
    # The RED summary and the route's CPU and network counters stay per route: suggest
    # counts by them.
    assert value(seen, REQUESTS + "_count", **{**BIKE_200, "http_route": "/r0", "pool": ""}) == 1
    network = {
        dict(labels)["route"] for (n, labels) in seen if n == "pricing_route_network_seconds_total"
    }
    assert len(network) == 5

    # A named route keeps its series; a newcomer, however busy, is folded, counted once.
    for _ in range(20):
        metrics.observe_timing("GET /new", offer_delayed_by_quotes())
    metrics.observe_timing("GET /r4", offer_delayed_by_quotes())
    metrics.flush()
    seen = scraped(registry)
    assert handler_counts(seen) == {"GET /r4": 6, "GET /r3": 4, "<other>": 26}
    assert value(seen, FOLDED, family="pricing_handler_duration_seconds") == 4


def test_per_route_timing_buckets_bracket_what_suggest_and_the_hpa_read() -> None:
    from routing.suggest import Thresholds
    from tracing.metric_families import LOOP_LAG_BUCKETS_S, ROUTE_TIMING_BUCKETS_S

    assert len(ROUTE_TIMING_BUCKETS_S) <= 8
    assert Thresholds().cpu_heavy_ms / 1000 in ROUTE_TIMING_BUCKETS_S
    assert 0.02 in ROUTE_TIMING_BUCKETS_S and 0.02 in LOOP_LAG_BUCKETS_S
    assert 0.2 in ROUTE_TIMING_BUCKETS_S  # the io pool's p99 target
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    metrics.observe_timing(BIKE_ROUTE, offer_delayed_by_quotes())
    metrics.flush()
    text = generate_latest(registry).decode()
    bounds = {
        line.split('le="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("pricing_handler_duration_seconds_bucket")
    }
    assert len(bounds) == len(ROUTE_TIMING_BUCKETS_S) + 1


def test_at_300_routes_a_worker_exposes_each_timing_histogram_for_the_top_k_only() -> None:
    from tracing.metric_families import ROUTE_TIMING_BUCKETS_S, ROUTE_TIMING_TOP_K

    registry = CollectorRegistry()
    metrics = PoolMetrics(registry)
    for i in range(300):
        metrics.observe_timing(f"GET /v1/synth/r{i:03d}", offer_delayed_by_quotes())
    metrics.flush()
    seen = scraped(registry)
    buckets = [n for (n, _) in seen if n == "pricing_handler_duration_seconds_bucket"]
    assert len(buckets) == (ROUTE_TIMING_TOP_K + 1) * (len(ROUTE_TIMING_BUCKETS_S) + 1)
    assert sum(handler_counts(seen).values()) == 300  # nothing lost in the fold


# --- the RED family at hundreds of routes ----------------------------------------------


def red_series(seen: dict, name: str) -> dict[tuple[str, str], float]:
    """(http_route, status) -> value of every series of *name*."""
    out = {}
    for (n, labels), v in seen.items():
        if n == name:
            label = dict(labels)
            out[(label["http_route"], label["http_response_status_code"])] = v
    return out


def test_the_red_histogram_names_the_busiest_routes_and_the_summary_keeps_every_route() -> None:
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io", red_top_k=2)
    # Route i is asked i + 1 times, and /r0 and /r4 also fail once each.
    for i in range(5):
        for _ in range(i + 1):
            metrics.observe_request("GET", f"/r{i}", 200, 0.15)
    metrics.observe_request("GET", "/r0", 503, 0.001)
    metrics.observe_request("GET", "/r4", 503, 0.001)
    metrics.flush()
    seen = scraped(registry)
    # The histogram: r4 (every status of it) and r3 by name, the rest in <other> by status.
    assert red_series(seen, DURATION + "_count") == {
        ("/r4", "200"): 5,
        ("/r4", "503"): 1,
        ("/r3", "200"): 4,
        ("<other>", "200"): 6,
        ("<other>", "503"): 1,
    }
    other_503 = {**BIKE_503, "http_route": "<other>"}
    assert value(seen, DURATION + "_bucket", **other_503, le="0.005") == 1
    assert value(seen, FOLDED, family=DURATION) == 3
    # The summary: every route and status, exact, with its time.
    assert red_series(seen, REQUESTS + "_count") == {
        **{(f"/r{i}", "200"): i + 1 for i in range(5)},
        ("/r0", "503"): 1,
        ("/r4", "503"): 1,
    }
    r2 = {**BIKE_200, "http_route": "/r2"}
    assert value(seen, REQUESTS + "_sum", **r2) == pytest.approx(0.45)

    # A named route keeps its series; a newcomer, however busy, is folded, counted once;
    # the summary counts it all the same.
    for _ in range(20):
        metrics.observe_request("GET", "/new", 200, 0.01)
    metrics.observe_request("GET", "/r1", 200, 0.01)
    metrics.flush()
    seen = scraped(registry)
    counts = red_series(seen, DURATION + "_count")
    assert set(counts) == {
        ("/r4", "200"),
        ("/r4", "503"),
        ("/r3", "200"),
        ("<other>", "200"),
        ("<other>", "503"),
    }
    assert counts[("<other>", "200")] == 6 + 20 + 1
    assert value(seen, FOLDED, family=DURATION) == 4
    summary = red_series(seen, REQUESTS + "_count")
    assert summary[("/new", "200")] == 20 and summary[("/r1", "200")] == 3


def red_exposition(routes: int) -> tuple[dict, str]:
    """One worker that served *routes* routes, each answering 200 and 503 (the io pool
    at 300 routes on a busy machine sheds on budget)."""
    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io")
    for i in range(routes):
        route = f"/v1/synth/route-{i:04d}/offers"
        for _ in range(1 + i % 7):
            metrics.observe_request("GET", route, 200, 0.12)
        metrics.observe_request("GET", route, 503, 0.002)
    metrics.flush()
    text = generate_latest(registry).decode()
    return samples(text), text


@pytest.mark.parametrize("routes", [300, 1000])
def test_at_hundreds_of_routes_the_red_histogram_stays_top_k_and_the_rest_is_two_lines_a_series(
    routes: int,
) -> None:
    """The rule that keeps a pool's /metrics under 1 MB at 300 routes: a test fails if
    the RED family grows with routes x buckets again."""
    from tracing.metric_families import DURATION_BUCKETS_S, RED_TOP_K

    seen, text = red_exposition(routes)
    buckets = [labels for (n, labels) in seen if n == DURATION + "_bucket"]
    # The busiest RED_TOP_K routes with both statuses, and <other> with both.
    assert len(buckets) == (RED_TOP_K + 1) * 2 * (len(DURATION_BUCKETS_S) + 1)
    # Every route and status in the summary, exact, nothing lost in the histogram's fold.
    summary = red_series(seen, REQUESTS + "_count")
    assert len(summary) == routes * 2
    assert sum(summary.values()) == sum(red_series(seen, DURATION + "_count").values())
    assert sum(summary.values()) == sum(1 + i % 7 + 1 for i in range(routes))
    # Lines: what a route and status add past the top k is the summary's two (count,
    # sum), not a histogram's 18 (16 buckets, count, sum; multiprocess mode writes no
    # _created lines).
    lines = [
        line
        for line in text.splitlines()
        if line.startswith((DURATION, REQUESTS)) and "_created" not in line
    ]
    assert len(lines) == routes * 2 * 2 + (RED_TOP_K + 1) * 2 * (len(DURATION_BUCKETS_S) + 3)


def test_the_exposition_with_folded_series_is_valid_prometheus_text() -> None:
    """prometheus_client's parser (text format) and its OpenMetrics parser both read it;
    every RED histogram series has its +Inf bucket equal to its count."""
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    registry = CollectorRegistry()
    metrics = PoolMetrics(registry, pool="io", red_top_k=3)
    for i in range(40):
        metrics.observe_request("GET", f"/v1/synth/r{i}", 200 if i % 5 else 504, 0.01 * i)
    metrics.flush()
    seen = scraped(registry)
    counts = red_series(seen, DURATION + "_count")
    infs = {
        (dict(labels)["http_route"], dict(labels)["http_response_status_code"]): v
        for (n, labels), v in seen.items()
        if n == DURATION + "_bucket" and dict(labels)["le"] == "+Inf"
    }
    assert infs == counts and ("<other>", "504") in counts
    families = {f.name: f.type for f in om_parse(om_latest(registry).decode())}
    assert families[DURATION] == "histogram" and families[REQUESTS] == "summary"
