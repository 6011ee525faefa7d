"""Admission at the handler: the budget counts from Envoy's start time, and a request
with less left than its route needs is shed at once, without an upstream call."""

from __future__ import annotations

import time
import types

import pytest
from flask.testing import FlaskClient

from pricing.domain.deadline import RESPONSE_RESERVE_MS, Deadline
from routing.edge import parse_attempt, parse_envoy_start_ns, parse_timeout_ms
from tests.samples import OFFER_QUERY, RIDE
from tests.unit.support.gateway import FakeGateway
from tests.unit.support.problems import problem


def envoy_start(ago_ms: float) -> str:
    """x-pricing-envoy-start as Envoy writes it, `ago_ms` before now."""
    return f"{time.time() - ago_ms / 1000:.6f}"


def test_the_budget_counts_from_when_envoy_received_the_request() -> None:
    now = 1_700_000_000_000_000_000
    deadline = Deadline.for_request(500, 500, now - 120_000_000, now_ns=now)
    assert deadline.waited_ms == 120
    assert deadline.budget_ms == 500 - 120 - RESPONSE_RESERVE_MS
    # Envoy's timeout, when smaller, wins; a start in the future is no wait.
    assert Deadline.for_request(500, 200, now + 5_000_000, now_ns=now).budget_ms == 175
    # Without Envoy's headers: the route's timeout from the handler's start.
    assert Deadline.for_request(500).budget_ms == 475


def test_a_retried_or_hedged_attempt_has_what_envoy_had_left_when_it_sent_it() -> None:
    """Envoy tells a hedge sent 270 ms into a 500 ms route that 230 ms are left: that
    is counted from the hedge, not from the start (which would leave nothing, and shed
    every hedge a frozen replica caused)."""
    now = 1_700_000_000_000_000_000
    started = now - 272_000_000
    hedge = Deadline.for_request(500, 230, started, 2, now_ns=now)
    assert hedge.budget_ms == 228 - RESPONSE_RESERVE_MS
    # The route's own timeout still bounds it, from the start.
    assert Deadline.for_request(500, 400, started, 3, now_ns=now).budget_ms == 228 - 25
    # Envoy's smaller figure wins when the hedge reached the pool at once.
    assert Deadline.for_request(500, 150, started, 2, now_ns=now).budget_ms == 150 - 25
    # The first attempt counts Envoy's figure from the start, as before.
    assert Deadline.for_request(500, 230, started, 1, now_ns=now).budget_ms == 230 - 272 - 25


@pytest.mark.parametrize(("raw", "expected"), [("1", 1), ("3", 3), ("0", 1), ("x", 1), (None, 1)])
def test_attempt_header(raw: str | None, expected: int) -> None:
    assert parse_attempt(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1700000000.123456", 1_700_000_000_123_456_000),
        ("1700000000", 1_700_000_000_000_000_000),
        ("", None),
        (None, None),
        ("-1.5", None),
        ("17e8", None),
        ("1700000000.12x", None),
    ],
)
def test_envoy_start_parses_only_a_time(raw: str | None, expected: int | None) -> None:
    assert parse_envoy_start_ns(raw) == expected


def test_envoy_timeout_parses_only_a_positive_number() -> None:
    assert parse_timeout_ms("250") == 250
    assert [parse_timeout_ms(v) for v in ("0", "-3", "junk", "", None)] == [None] * 5


def test_an_offer_that_waited_its_budget_away_is_shed_without_an_upstream_call(
    io_client: FlaskClient, gateway: FakeGateway
) -> None:
    # offers.bike: 500 ms timeout, min_budget_ms 150 in routes.toml.
    response = io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-pricing-envoy-start": envoy_start(400)}
    )
    assert response.status_code == 503
    body = problem(response)
    assert body["type"] == "urn:pricingservice:problem:overloaded"
    assert response.headers["Retry-After"] == "1"
    assert response.headers["x-pricing-shed"] == "budget"  # Envoy may retry it elsewhere
    assert "needs 150 ms" in body["detail"]
    assert gateway.calls == []


def test_an_offer_with_enough_left_gets_only_what_is_left(
    io_client: FlaskClient, gateway: FakeGateway
) -> None:
    response = io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-pricing-envoy-start": envoy_start(100)}
    )
    assert response.status_code == 200, response.data
    (deadline,) = gateway.deadlines
    assert deadline.waited_ms >= 100
    assert deadline.budget_ms <= 500 - 100 - RESPONSE_RESERVE_MS


def test_a_rideshare_quote_past_its_time_is_shed_too(cpu_client: FlaskClient) -> None:
    # offers.rideshare: 3 s timeout, default minimum 20 % of it.
    late = cpu_client.post(
        "/v1/offers/rideshare", json=RIDE, headers={"x-pricing-envoy-start": envoy_start(2500)}
    )
    assert late.status_code == 503
    assert problem(late)["type"].endswith(":overloaded")
    early = cpu_client.post(
        "/v1/offers/rideshare", json=RIDE, headers={"x-pricing-envoy-start": envoy_start(2000)}
    )
    assert early.status_code == 200, early.data


def test_shed_requests_are_counted_with_their_reason(
    io_client: FlaskClient, gateway: FakeGateway
) -> None:
    from tracing.metrics import pool_metrics

    counter = pool_metrics().shed("GET /v1/offers/bike", "budget")
    before = counter.value
    io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-pricing-envoy-start": envoy_start(490)}
    )
    assert counter.value == before + 1


def test_what_a_route_needs_follows_its_recent_service_time() -> None:
    from pricing.web.admission import ServiceTime

    service = ServiceTime(floor_ms=150)
    assert service.need_ms() == 150
    for _ in range(200):  # the worker got slow: its requests take 400 ms
        service.finished(400)
    assert 390 < service.need_ms() <= 400
    # Every request shed: the need decays back toward the floor, so a worker that
    # sheds everything starts some work again and learns it is fast.
    for _ in range(300):
        service.shed()
    assert service.need_ms() < 160
    for _ in range(200):  # fast again: the floor rules
        service.finished(20)
    assert service.need_ms() == 150


def upstreams_taking(seconds: float, gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every offer's upstream calls take `seconds` on admission's clock (a fake one)."""
    import pricing.web.admission

    clock = [0.0]
    monkeypatch.setattr(
        pricing.web.admission, "time", types.SimpleNamespace(monotonic=lambda: clock[0])
    )
    original = gateway.fetch_all

    def slow(calls, deadline):  # type: ignore[no-untyped-def]
        clock[0] += seconds
        return original(calls, deadline)

    monkeypatch.setattr(gateway, "fetch_all", slow)


def test_a_route_that_got_slow_sheds_what_its_floor_alone_would_start(
    io_client: FlaskClient, gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstreams_taking(0.4, gateway, monkeypatch)  # 400 ms in this worker
    waited_300 = {"x-pricing-envoy-start": envoy_start(300)}  # leaves 175 ms
    assert io_client.get(f"/v1/offers/bike?{OFFER_QUERY}", headers=waited_300).status_code == 200
    for _ in range(30):
        assert io_client.get(f"/v1/offers/bike?{OFFER_QUERY}").status_code == 200
    late = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}", headers=waited_300)
    assert late.status_code == 503
    assert "needs 3" in problem(late)["detail"]  # ~300+ ms, not the 150 ms floor


def test_a_request_that_hardly_waited_is_started_however_slow_the_route_has_been(
    io_client: FlaskClient, gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold worker's first requests are slow; shedding fresh ones would not help."""
    upstreams_taking(5.0, gateway, monkeypatch)
    for _ in range(60):  # the recent service time far past the whole timeout
        assert io_client.get(f"/v1/offers/bike?{OFFER_QUERY}").status_code == 200
    fresh = io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-pricing-envoy-start": envoy_start(50)}
    )
    assert fresh.status_code == 200
    waited = io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-pricing-envoy-start": envoy_start(150)}
    )
    assert waited.status_code == 503  # 150 ms of 475 waited: over the 20 % always started
