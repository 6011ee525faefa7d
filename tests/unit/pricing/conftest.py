"""app -> client fixtures with a fake upstream gateway (no network)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pricing import create_app
from pricing.domain.deadline import Deadline
from pricing.domain.errors import UpstreamFailure
from pricing.upstream.gateway import Answer, Call
from routing.model import RouteConfig

VEHICLES = {
    "vehicles": [
        {
            "id": "bike-far",
            "mode": "bike",
            "lat": 37.77,
            "lng": -122.41,
            "battery_pct": 90,
            "distance_m": 300,
        },
        {
            "id": "bike-near",
            "mode": "bike",
            "lat": 37.77,
            "lng": -122.41,
            "battery_pct": 55,
            "distance_m": 130,
        },
    ]
}
ROUTE = {"mode": "bike", "distance_m": 1840, "duration_s": 520}
PROMOS = {"promotions": [{"code": "BIKE10", "percent_off": 10, "max_discount_minor": 300}]}


class FakeGateway:
    """Answers each upstream from a table; records the calls and the deadline."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {
            "vehicles": VEHICLES,
            "routing": ROUTE,
            "promotions": PROMOS,
        }
        self.calls: list[Call] = []
        self.deadlines: list[Deadline] = []

    def fail(self, upstream: str, reason: str = "error") -> None:
        self.answers[upstream] = UpstreamFailure(upstream, reason, f"fake {reason}")

    def fetch_all(self, calls: Sequence[Call], deadline: Deadline) -> dict[str, Answer]:
        self.calls.extend(calls)
        self.deadlines.append(deadline)
        return {c.upstream: self.answers[c.upstream] for c in calls}


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


def _app(pool: str, routes: RouteConfig, gateway: FakeGateway) -> Flask:
    app = create_app(pool, config=routes, gateway=gateway)
    app.config["TESTING"] = True
    return app


@pytest.fixture
def io_client(routes: RouteConfig, gateway: FakeGateway) -> FlaskClient:
    return _app("io", routes, gateway).test_client()


@pytest.fixture
def cpu_client(routes: RouteConfig, gateway: FakeGateway) -> FlaskClient:
    return _app("cpu", routes, gateway).test_client()


@pytest.fixture
def shared_client(routes: RouteConfig, gateway: FakeGateway) -> FlaskClient:
    return _app("shared", routes, gateway).test_client()


def problem(response: Any) -> dict[str, Any]:
    assert response.mimetype == "application/problem+json", response.data
    body: dict[str, Any] = response.get_json()
    assert body["status"] == response.status_code
    return body
