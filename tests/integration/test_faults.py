"""Upstream faults, each upstream in turn, through the real Envoy.

Timeouts, hangs, connection refused, reset mid-body, 5xx, malformed JSON, a
trickling body and an early close: every offer still answers within its
deadline plus a margin, degraded when the failing upstream is optional
(promotions) and a 503/504 problem naming it when it is required (vehicles,
routing). Nothing hangs, and the io workers' connections to the upstreams
return to their baseline afterwards (no leaked socket, no stuck call).

A slow upstream at a high request rate holds only its own bulkhead: offers still
answer (degraded), the CPU endpoint is unaffected, and calls beyond the
bulkhead's limit fail at once instead of queueing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from pricing.upstream.gateway import UPSTREAMS
from routing.model import Layout, RouteConfig
from stack.launch import Stack
from stack.procfs import children, connections_to
from stack.procs import free_port
from tests.integration.support.http import http, reset_upstreams, ride, set_upstream
from tests.integration.support.load import (
    Background,
    Outcome,
    Tally,
    offer_request,
    open_loop,
    shed,
)
from tests.integration.support.stack import derived_config
from tests.samples import OFFER_QUERY
from toolkit.contract import SHED_HEADER
from toolkit.fetch import Reply
from toolkit.wait import wait_until

pytestmark = pytest.mark.integration

DEADLINE_S = 0.5  # the offers' route timeout in routes.toml
# What "within its deadline" may add on a busy shared machine. A hung or trickled
# upstream would take 3 s, 5 s or forever: well beyond.
MARGIN_S = 1.0
REQUESTS_PER_FAULT = 4

# fault name -> simulator settings
FAULTS: dict[str, dict[str, Any]] = {
    "timeout": {"latency": {"dist": "fixed", "ms": 3000}},
    "hang": {"fault": "hang", "fault_rate": 1.0},
    "reset": {"fault": "reset", "fault_rate": 1.0},
    "http-503": {"error_rate": 1.0, "error_status": 503},
    "http-500": {"error_rate": 1.0, "error_status": 500},
    "malformed": {"fault": "malformed", "fault_rate": 1.0},
    "trickle": {"fault": "trickle", "fault_rate": 1.0, "trickle_ms": 50},
    "close": {"fault": "close", "fault_rate": 1.0},
}
TIMEOUT_FAULTS = {"timeout", "hang", "trickle"}


def offer(url: str, i: int) -> Reply:
    mode = ("bike", "scooter")[i % 2]
    return http("GET", f"{url}/v1/offers/{mode}?{OFFER_QUERY}", timeout_s=10)


def cut_off_by_envoy(reply: Reply) -> bool:
    """Envoy's own 504: its route timeout passed before the app's answer arrived."""
    return reply.status == 504 and "x-pricing-pool" not in reply.headers


def assert_offer_despite(reply: Reply, upstream: str, fault: str) -> str:
    """What a client must see when `upstream` fails with `fault`; returns "app" when
    the app answered as designed, "late" when Envoy's route timeout cut it off."""
    where = f"{upstream}/{fault}: {reply.status} {reply.body[:200]!r}"
    assert reply.elapsed_s < DEADLINE_S + MARGIN_S, f"{where} took {reply.elapsed_s:.2f} s"
    if fault in TIMEOUT_FAULTS and cut_off_by_envoy(reply):
        # The app answers ~20 ms before Envoy gives up; on a busy machine it can miss.
        # Still a 504 problem, in time; counted by the caller (see the xfail below).
        assert reply.headers["content-type"] == "application/problem+json", where
        return "late"
    assert reply.headers.get("x-pricing-pool") == "io", where  # the app answered, not Envoy
    if not UPSTREAMS[upstream].required:
        assert reply.status == 200, where
        assert reply.json()["degraded"] == [upstream], where
        return "app"
    expected = 504 if fault in TIMEOUT_FAULTS else 503
    assert reply.status == expected, where
    assert reply.headers["content-type"] == "application/problem+json", where
    problem = reply.json()
    assert problem["status"] == expected
    assert upstream not in problem["detail"], where  # internals go to the log only
    if expected == 503:
        assert reply.headers.get("retry-after") == "1", where
    return "app"


class Sockets:
    """The io workers' TCP connections to the upstream simulator."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.port = stack.simulator_port

    def workers(self) -> list[int]:
        return children(self.stack.procs["pool-io"].pid)

    def count(self) -> dict[str, int]:
        return dict(connections_to(self.workers(), self.port))

    def simulator_count(self) -> int:
        stats: dict[str, Any] = http("GET", f"{self.stack.simulator_url}/_control/stats").json()
        return int(stats["connections"])

    def ceiling(self) -> int:
        """Idle keep-alive connections a quiet pool may hold: one per upstream per
        worker after sequential traffic (the bulkhead caps them under load)."""
        return len(self.workers()) * len(UPSTREAMS)

    def settle(self, timeout_s: float = 10.0, ceiling: int | None = None) -> dict[str, int]:
        """Wait until nothing is half-closed or in flight, then return the states."""
        ceiling = self.ceiling() if ceiling is None else ceiling

        def quiet() -> bool:
            states = self.count()
            established = states.get("ESTABLISHED", 0)
            others = sum(n for s, n in states.items() if s not in ("ESTABLISHED", "TIME_WAIT"))
            return others == 0 and established <= ceiling

        wait_until(quiet, timeout_s, 0.2)
        return self.count()


@pytest.fixture(scope="module")
def stack(split_stack: Stack) -> Iterator[Stack]:
    reset_upstreams(split_stack)
    yield split_stack
    reset_upstreams(split_stack)


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
def test_each_fault_of_each_upstream_is_answered_within_the_deadline(
    stack: Stack, upstream: str
) -> None:
    sockets = Sockets(stack)
    for i in range(6):  # warm: every worker holds its keep-alive connections
        assert offer(stack.url, i).status == 200
    baseline = sockets.settle()
    baseline_sim = sockets.simulator_count()
    seen: dict[str, list[int]] = {}
    late = 0
    try:
        for fault, settings in FAULTS.items():
            reset_upstreams(stack)
            set_upstream(stack, upstream, **settings)
            replies = [offer(stack.url, i) for i in range(REQUESTS_PER_FAULT)]
            how = [assert_offer_despite(reply, upstream, fault) for reply in replies]
            # Mostly as designed: the app's own answer (degraded offer or problem).
            assert how.count("app") > REQUESTS_PER_FAULT // 2, (fault, how)
            late += how.count("late")
            seen[fault] = [round(r.elapsed_s * 1000) for r in replies]
    finally:
        reset_upstreams(stack)
    for i in range(6):
        assert offer(stack.url, i).status == 200
    after = sockets.settle()
    after_sim = sockets.simulator_count()
    print(
        f"\n{upstream}: latency ms per fault {seen}; cut off by Envoy {late};"
        f" io->simulator sockets {baseline} -> "
        f"{after}; simulator connections {baseline_sim} -> {after_sim}"
    )
    # No leak: nothing half-closed, no more open connections than a quiet pool keeps.
    assert set(after) <= {"ESTABLISHED", "TIME_WAIT"}, after
    assert after.get("ESTABLISHED", 0) <= sockets.ceiling()
    assert after_sim <= sockets.ceiling() + 1  # + the stats request itself


# --- connection refused: the app pointed at a port nobody listens on -----------------


@pytest.fixture(scope="module", params=list(UPSTREAMS))
def refusing_stack(
    request: pytest.FixtureRequest, routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Stack]]:
    upstream: str = request.param
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {f"PRICING_UPSTREAM_{upstream.upper()}_URL": closed}
    run_dir = tmp_path_factory.mktemp(f"refused-{upstream}")
    with Stack.on_free_ports(routes, Layout.SPLIT, run_dir, extra_env=env) as stack:
        yield upstream, stack


def test_connection_refused_by_an_upstream(refusing_stack: tuple[str, Stack]) -> None:
    upstream, stack = refusing_stack
    replies = [offer(stack.url, i) for i in range(REQUESTS_PER_FAULT)]
    for reply in replies:
        assert_offer_despite(reply, upstream, "refused")
    print(f"\nrefused {upstream}: {[(r.status, round(r.elapsed_s * 1000)) for r in replies]} ms")
    # Refused is immediate: no reason to wait for the deadline.
    assert min(r.elapsed_s for r in replies) < DEADLINE_S


# --- bulkheads -----------------------------------------------------------------------

# Bike offers get a long deadline here, so each hung promotions call holds its
# bulkhead slot for seconds and a modest request rate fills the bulkhead (at the
# shipped 500 ms it would take ~550 offers/s, more than this machine can send). The io
# pool's latency target goes with it: Envoy lets the pool have workers x worker_rps x
# latency_ms offers in flight (220 at the shipped 200 ms), and that limit must not trip
# before the bulkheads (2 x 128) fill; what is under test is the bulkheads. (At 200 ms
# it did, once beside a benchmark: Envoy spread the offers so evenly that neither
# worker's bulkhead filled, and every offer past 220 in flight was refused with a 503.)
BULKHEAD_DEADLINE_S = 4.0
BULKHEAD_RATE = 100.0
BULKHEAD_COUNT = 500


@pytest.fixture(scope="module")
def bulkhead_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("bulkhead")
    config = derived_config(
        tmp,
        {
            'path = "/v1/offers/bike"\nmethods = ["GET"]\npool = "io"\ntimeout_ms = 500': (
                'path = "/v1/offers/bike"\nmethods = ["GET"]\npool = "io"\n'
                f"timeout_ms = {int(BULKHEAD_DEADLINE_S * 1000)}"
            ),
            "latency_ms = 200 ": f"latency_ms = {int(BULKHEAD_DEADLINE_S * 1000)} ",
        },
    )
    # Let hung promotions calls wait for the whole (long) deadline, so they pile
    # up to the bulkhead's limit: what is under test is that limit.
    env = {"PRICING_UPSTREAM_PROMOTIONS_MAX_WAIT_MS": "0"}
    with Stack.on_free_ports(config, Layout.SPLIT, tmp, extra_env=env) as stack:
        yield stack


def refused_at_once(outcome: Outcome | Reply) -> bool:
    """A 503 well inside the deadline from Envoy's circuit breaker (no pool's name: the
    io pool's requests in flight reached its limit) or from the pool's own shedding
    (its shed header): four seconds of hung calls at 100 offers/s come close to those
    limits, and on a machine busy with something else a few offers pass them. A
    refusal, never a wait."""
    shed_by_pool = outcome.status == 503 and SHED_HEADER in outcome.headers
    return (shed(outcome) or shed_by_pool) and outcome.elapsed_s < 1.0


def too_late(outcome: Outcome) -> bool:
    """Envoy's route timeout cut the app's answer off: Envoy's own 504, or a
    response reset after its headers (the client reads a truncated reply)."""
    envoy_504 = outcome.status == 504 and "x-pricing-pool" not in outcome.headers
    return envoy_504 or (outcome.status == 0 and "IncompleteRead" in outcome.error)


@pytest.mark.slow
def test_a_hung_optional_upstream_holds_only_its_own_bulkhead(bulkhead_stack: Stack) -> None:
    stack = bulkhead_stack
    sockets = Sockets(stack)
    workers = len(sockets.workers())
    limit = UPSTREAMS["promotions"].max_concurrency * workers
    rides_before = [ride(stack) for _ in range(5)]
    assert all(r.status == 200 for r in rides_before)
    ride_before_s = sorted(r.elapsed_s for r in rides_before)[2]
    promotions_before = http("GET", f"{stack.simulator_url}/_control/stats").json()["requests"]

    set_upstream(stack, "promotions", fault="hang", fault_rate=1.0)
    rides: list[Reply] = []
    scooters: list[Reply] = []
    try:
        with Background(
            stack.url,
            offer_request,
            rate_per_s=BULKHEAD_RATE,
            count=BULKHEAD_COUNT,
            timeout_s=BULKHEAD_DEADLINE_S + 10,
        ) as load:
            time.sleep(1.5)  # let the bulkhead fill
            peak = 0
            for _ in range(8):  # the CPU endpoint and the other offer, meanwhile
                rides.append(ride(stack))
                scooters.append(offer(stack.url, 1))
                peak = max(peak, sockets.count().get("ESTABLISHED", 0))
                time.sleep(0.3)
    finally:
        reset_upstreams(stack)
    tally = Tally(load.outcomes)
    promotions_called = (
        http("GET", f"{stack.simulator_url}/_control/stats").json()["requests"]["promotions"]
        - promotions_before["promotions"]
    )
    fast = [o for o in load.outcomes if o.status == 200 and o.elapsed_s < 1.0]
    slow = [o for o in load.outcomes if o.status == 200 and o.elapsed_s >= 1.0]
    ride_during_s = sorted(r.elapsed_s for r in rides)[len(rides) // 2]
    print(
        f"\n{tally.summary('bike offers, promotions hung')}"
        f"\n  cut off by Envoy's route timeout (the app answered too late): "
        f"{sum(1 for o in load.outcomes if o.status != 200 and too_late(o))}; refused at once"
        f" (circuit breaker, shedding): {sum(1 for o in load.outcomes if refused_at_once(o))}"
        f"\n  answered fast (<1 s, bulkhead saturated): {len(fast)}; waited for the deadline:"
        f" {len(slow)}; promotions calls reaching the upstream: {promotions_called}"
        f" (bulkhead limit {limit})"
        f"\n  rideshare p50 {ride_before_s * 1000:.0f} ms before, {ride_during_s * 1000:.0f} ms"
        f" during; scooter offers {[(r.status, round(r.elapsed_s * 1000)) for r in scooters]}"
    )
    # Every offer answered within its deadline plus a margin: a degraded offer, or
    # (known, counted, see test_a_hung_optional_upstream_never_costs_an_offer) cut
    # off by Envoy's route timeout when the app's answer came a hair too late, or
    # refused at once by Envoy's circuit breaker or the pool's shedding (never a wait).
    assert all(o.status == 200 or too_late(o) or refused_at_once(o) for o in load.outcomes), (
        tally.summary("bike")
    )
    assert all(o.elapsed_s < BULKHEAD_DEADLINE_S + MARGIN_S for o in load.outcomes)
    # Calls beyond the bulkhead failed at once instead of queueing behind the hung ones:
    assert promotions_called <= limit + BULKHEAD_RATE * 2  # a second window may refill
    assert len(fast) >= 50, tally.summary("bike")
    # The other endpoints: the scooter offer degrades within its own deadline; the
    # CPU endpoint keeps its latency (an order of magnitude, on a busy machine).
    for reply in scooters:
        assert reply.elapsed_s < DEADLINE_S + MARGIN_S
        if not cut_off_by_envoy(reply) and not refused_at_once(reply):
            assert reply.status == 200 and reply.json()["degraded"] == ["promotions"]
    assert any(r.status == 200 for r in scooters)
    assert all(r.status == 200 for r in rides)
    assert ride_during_s < 10 * ride_before_s + 0.25
    # And the hung calls' connections were all closed when their deadline passed.
    after = sockets.settle(timeout_s=BULKHEAD_DEADLINE_S + 10, ceiling=limit // 2)
    print(f"  io->simulator connections: {peak} at the peak, {after} after")
    assert set(after) <= {"ESTABLISHED", "TIME_WAIT"}, after
    assert after.get("ESTABLISHED", 0) < min(peak, limit // 2)


@pytest.mark.slow
def test_a_hung_optional_upstream_never_costs_an_offer(stack: Stack) -> None:

    set_upstream(stack, "promotions", fault="hang", fault_rate=1.0)
    try:
        outcomes = open_loop(stack.url, offer_request, rate_per_s=150, count=450, timeout_s=10)
    finally:
        reset_upstreams(stack)
    tally = Tally(outcomes)
    print(f"\n{tally.summary('bike offers at 150/s, promotions hung, shipped 500 ms')}")
    assert tally.statuses == {200: len(outcomes)}, tally.summary("bike")
