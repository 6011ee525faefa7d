"""Bike/scooter offers: combination of upstream answers, degradation, errors."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from pricing.web.schemas import MicromobilityOffer
from tests.samples import OFFER_QUERY
from tests.unit.support.gateway import FakeGateway
from tests.unit.support.problems import problem


def test_offer_combines_the_three_upstreams(io_client: FlaskClient, gateway: FakeGateway) -> None:
    response = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 200, response.data
    assert response.headers["x-pricing-pool"] == "io"
    offer = MicromobilityOffer.model_validate(response.get_json())
    # 100 unlock + 30/min x ceil(520/60)=9 min = 370; 10% off = 37.
    assert offer.price.amount_minor == 333
    assert offer.price.discount_minor == 37
    assert offer.price.currency == "USD"
    assert offer.vehicle.id == "bike-near"
    assert offer.eta_s == 100  # 130 m at 1.3 m/s
    assert offer.trip.distance_m == 1840
    assert offer.degraded == []
    assert sorted(c.upstream for c in gateway.calls) == ["promotions", "routing", "vehicles"]


def test_scooter_uses_scooter_rates(io_client: FlaskClient) -> None:
    body = io_client.get(f"/v1/offers/scooter?{OFFER_QUERY}").get_json()
    assert body["mode"] == "scooter"
    assert body["price"]["amount_minor"] + body["price"]["discount_minor"] == 100 + 42 * 9


def test_promotions_failure_degrades_the_offer(
    io_client: FlaskClient, gateway: FakeGateway
) -> None:
    gateway.fail("promotions", "timeout")
    response = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 200
    body = response.get_json()
    assert body["degraded"] == ["promotions"]
    assert body["promotion"] is None
    assert body["price"] == {"amount_minor": 370, "currency": "USD", "discount_minor": 0}


def test_discount_is_capped(io_client: FlaskClient, gateway: FakeGateway) -> None:
    gateway.answers["promotions"] = {
        "promotions": [{"code": "HALF", "percent_off": 50, "max_discount_minor": 100}]
    }
    body = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}").get_json()
    assert body["price"]["discount_minor"] == 100
    assert body["promotion"] == {"code": "HALF", "percent_off": 50}


def test_required_upstream_failure_is_503(
    io_client: FlaskClient, gateway: FakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gateway.fail("vehicles", "error")
    with caplog.at_level("WARNING", logger="pricing.web.problems"):
        response = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    body = problem(response)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    # A stable type and a generic detail for the client; which upstream, in the log.
    assert body["type"] == "urn:pricingservice:problem:upstream-unavailable"
    assert "vehicles" not in response.get_data(as_text=True)
    assert any("'vehicles'" in r.getMessage() for r in caplog.records)


def test_required_upstream_timeout_is_504(io_client: FlaskClient, gateway: FakeGateway) -> None:
    gateway.fail("routing", "timeout")
    gateway.fail("vehicles", "error")
    response = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 504
    assert problem(response)["type"].endswith("upstream-timeout")


def test_malformed_upstream_answer_is_503_not_500(
    io_client: FlaskClient, gateway: FakeGateway
) -> None:
    gateway.answers["vehicles"] = {"vehicles": [{"id": "x"}]}
    response = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 503
    problem(response)


def test_no_vehicle_nearby_is_404(io_client: FlaskClient, gateway: FakeGateway) -> None:
    gateway.answers["vehicles"] = {"vehicles": []}
    response = io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 404
    assert problem(response)["type"].endswith("no-vehicle-nearby")


def test_budget_follows_envoys_timeout_header(io_client: FlaskClient, gateway: FakeGateway) -> None:
    io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-envoy-expected-rq-timeout-ms": "200"}
    )
    io_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    io_client.get(
        f"/v1/offers/bike?{OFFER_QUERY}", headers={"x-envoy-expected-rq-timeout-ms": "junk"}
    )
    assert [d.budget_ms for d in gateway.deadlines] == [175, 475, 475]
