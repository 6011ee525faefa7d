"""The stack through a real Envoy: routing by pool, 421, deadlines, both layouts."""

from __future__ import annotations

import pytest

from routing.model import RouteConfig
from stack.launch import Stack
from tests.integration.support.http import Client, call_endpoint, http, set_upstream
from tests.samples import OFFER_QUERY, RIDE

pytestmark = pytest.mark.integration


def test_each_endpoint_is_served_by_its_pool(split_stack: Stack, routes: RouteConfig) -> None:
    for route in routes.routes:
        status, pool = call_endpoint(split_stack.url, route)
        assert (route.endpoint, status, pool) == (route.endpoint, 200, route.pool)


def test_shared_layout_serves_everything_from_one_pool(
    shared_stack: Stack, routes: RouteConfig
) -> None:
    for route in routes.routes:
        status, pool = call_endpoint(shared_stack.url, route)
        assert (route.endpoint, status, pool) == (route.endpoint, 200, "shared")


def test_request_straight_to_the_wrong_pool_is_421(split_stack: Stack) -> None:
    reply = http("POST", f"{split_stack.pool_url('io')}/v1/offers/rideshare", RIDE)
    assert reply.status == 421
    assert reply.headers["content-type"] == "application/problem+json"
    reply = http("GET", f"{split_stack.pool_url('cpu')}/v1/offers/bike?{OFFER_QUERY}")
    assert reply.status == 421


def test_unknown_path_is_a_problem_from_envoy(client: Client) -> None:
    reply = client.get("/v1/nothing")
    assert reply.status == 404
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json()["status"] == 404


def test_offer_deadline_holds_when_a_required_upstream_is_slow(
    fresh_upstreams: Stack, client: Client
) -> None:
    set_upstream(fresh_upstreams, "vehicles", latency={"dist": "fixed", "ms": 3000})
    reply = client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    # Answered by the app before Envoy's 500 ms route timeout, as a problem.
    assert reply.status == 504
    assert reply.headers["x-pricing-pool"] == "io"
    assert reply.json()["type"].endswith("upstream-timeout")
    assert reply.elapsed_s < 1.0  # an order of magnitude below the upstream's 3 s


def test_offer_degrades_when_promotions_is_slow(fresh_upstreams: Stack, client: Client) -> None:
    set_upstream(fresh_upstreams, "promotions", latency={"dist": "fixed", "ms": 3000})
    reply = client.get(f"/v1/offers/scooter?{OFFER_QUERY}")
    assert reply.status == 200
    assert reply.json()["degraded"] == ["promotions"]
    assert reply.elapsed_s < 1.0


def test_required_upstream_error_is_503_problem(fresh_upstreams: Stack, client: Client) -> None:
    set_upstream(fresh_upstreams, "routing", error_rate=1.0)
    reply = client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert reply.status == 503
    assert reply.headers["content-type"] == "application/problem+json"
    # A stable type; which upstream failed is in the pool's log, not the body.
    assert reply.json()["type"] == "urn:pricingservice:problem:upstream-unavailable"
