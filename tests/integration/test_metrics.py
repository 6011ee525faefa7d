"""/metrics on a real gunicorn pool (two workers) behind Envoy, read with
prometheus_client's own parser: every scrape, whichever worker answers it, gives the
pool's totals once the workers have flushed (tracing.metric_flush.FLUSH_INTERVAL_S); a
SIGKILLed worker's flushed counts stay, its live gauge goes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from pricing.web.schemas import MAX_BATCH_QUOTES
from routing.model import Layout, RouteConfig
from stack.launch import Stack
from stack.procfs import children
from tests.integration.support.http import http, reset_upstreams, set_upstream
from tests.prometheus import Samples, samples, total, value
from tests.samples import BIKE_ROUTE, OFFER_PATH
from toolkit.wait import wait_until
from tracing.metric_flush import FLUSH_INTERVAL_S

pytestmark = pytest.mark.integration
HTTP_COUNT = "http_server_request_duration_seconds_count"
#: The RED summary: every route's requests, what `routes suggest` counts.
ROUTE_REQUESTS_COUNT = "pricing_route_request_duration_seconds_count"
BIKE_200 = {
    "http_request_method": "GET",
    "http_route": "/v1/offers/bike",
    "http_response_status_code": "200",
    "pool": "io",
}

BATCH = "POST /v1/quotes/batch"
HUB_BLOCKS = "pricing_hub_blocks_total"
SENT = 12
FAILED = 4
# Each worker folds its counts into the pool's files every FLUSH_INTERVAL_S: a scrape
# sees them all within a few intervals. A deadline, not a measure: a machine running a
# benchmark beside the suite slows every step three-fold, so it is generous.
FLUSHED_WITHIN_S = 30 * FLUSH_INTERVAL_S


@pytest.fixture(scope="module")
def stack(routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    run_dir = tmp_path_factory.mktemp("metrics")
    with Stack.on_free_ports(routes, Layout.SPLIT, run_dir) as stack:
        yield stack


def scrape(stack: Stack, pool: str = "io") -> Samples:
    reply = http("GET", f"{stack.pool_url(pool)}{stack.config.meta.metrics}")
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"].startswith("text/plain")
    return samples(reply.body.decode())


def test_every_scrape_gives_the_pool_totals_and_a_dead_worker_keeps_its_counts(
    stack: Stack,
) -> None:
    workers = children(stack.procs["pool-io"].pid)
    assert len(workers) == stack.config.pool("io").workers == 2
    for _ in range(SENT):
        assert http("GET", f"{stack.url}{OFFER_PATH}").status == 200
    set_upstream(stack, "promotions", error_rate=1.0, error_status=503)
    try:
        for _ in range(FAILED):  # promotions is optional: a degraded 200
            assert http("GET", f"{stack.url}{OFFER_PATH}").status == 200
    finally:
        reset_upstreams(stack)
    offers = SENT + FAILED

    def pool_totals(scraped: Samples) -> dict[str, float]:
        return {
            "requests": value(scraped, HTTP_COUNT, **BIKE_200),
            "route requests": value(scraped, ROUTE_REQUESTS_COUNT, **BIKE_200),
            "vehicles": value(scraped, "pricing_upstream_calls_total", upstream="vehicles"),
            "promotions 5xx": value(
                scraped, "pricing_upstream_failures_total", upstream="promotions", reason="5xx"
            ),
            "failures": total(scraped, "pricing_upstream_failures_total"),
            "handler": value(scraped, "pricing_handler_duration_seconds_count", route=BIKE_ROUTE),
            "network": value(scraped, "pricing_upstream_network_seconds_count", upstream="routing"),
        }

    expected = {
        "requests": offers,
        "route requests": offers,
        "vehicles": offers,
        "promotions 5xx": FAILED,
        "failures": FAILED,
        "handler": offers,
        "network": offers,
    }
    # The pool's totals arrive within a few flush intervals, and never overshoot.
    seen: list[dict[str, float]] = []

    def flushed() -> bool:
        seen.append(pool_totals(scrape(stack)))
        return seen[-1] == expected

    assert wait_until(flushed, FLUSHED_WITHIN_S, interval_s=0.2), seen[-1]
    # Several scrapes: each reaches some worker, every one must see the pool's totals.
    for _ in range(4):
        scraped = scrape(stack)
        assert pool_totals(scraped) == expected
        assert value(scraped, "pricing_workers") == 2
        assert not any("pid" in dict(labels) for _, labels in scraped)
        assert value(scraped, "pricing_loop_lag_seconds_count") > 0

    victim = workers[0]
    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        now = children(stack.procs["pool-io"].pid)
        return victim not in now and len(now) == 2

    assert wait_until(replaced, 30), "gunicorn did not replace the killed worker"
    (newcomer,) = set(children(stack.procs["pool-io"].pid)) - set(workers)
    # The new worker has built its app once it set its live gauge: its file is made a
    # moment before the value is written, so a scrape in between counts one worker.
    live_file = stack.run_dir / "metrics" / "io" / f"gauge_livesum_{newcomer}.db"
    assert wait_until(live_file.exists, 30), live_file
    assert wait_until(lambda: value(scrape(stack), "pricing_workers") == 2, 30)
    for _ in range(4):
        scraped = scrape(stack)
        # The dead worker's counts are kept; its live gauge went with it.
        assert pool_totals(scraped) == expected
        assert value(scraped, "pricing_workers") == 2


def test_a_batch_that_holds_the_hub_is_counted_against_its_route(stack: Stack) -> None:
    """A batch of quotes computes them one after the other without yielding (tens of ms
    of CPU each): its greenlet holds the cpu worker's hub for hundreds of ms, a hub block
    the switch tracer counts as it ends, whether or not the watcher looked meanwhile."""
    quotes = [
        {
            "origin": {"lat": 37.7349 + i * 0.001, "lng": -122.4894},
            "destination": {"lat": 37.8049, "lng": -122.3994 - i * 0.001},
            "user_id": f"u-{i}",
            "requested_at": "2026-11-20T17:30:00Z",
        }
        for i in range(MAX_BATCH_QUOTES)
    ]
    before = value(scrape(stack, "cpu"), HUB_BLOCKS, route=BATCH)
    reply = http("POST", f"{stack.url}/v1/quotes/batch", {"quotes": quotes}, timeout_s=30)
    assert reply.status == 200, reply.body

    def counted() -> bool:
        return value(scrape(stack, "cpu"), HUB_BLOCKS, route=BATCH) >= before + 1

    assert wait_until(counted, FLUSHED_WITHIN_S, interval_s=0.2), scrape(stack, "cpu")


def test_metrics_are_served_with_tracing_off(
    routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_dir = tmp_path_factory.mktemp("metrics-off")
    with Stack.on_free_ports(
        routes, Layout.SPLIT, run_dir, extra_env={"PRICING_TRACING": "off"}
    ) as off:
        for _ in range(3):
            assert http("GET", f"{off.url}{OFFER_PATH}").status == 200

        def counted() -> bool:
            requests = value(scrape(off), HTTP_COUNT, **BIKE_200)
            return requests >= 3

        assert wait_until(counted, FLUSHED_WITHIN_S, interval_s=0.2)
        scraped = scrape(off)
        assert value(scraped, HTTP_COUNT, **BIKE_200) == 3
        assert value(scraped, "pricing_upstream_calls_total", upstream="routing") == 3
        # No gevent timing without tracing: those families stay empty.
        assert value(scraped, "pricing_handler_duration_seconds_count", route=BIKE_ROUTE) == 0
