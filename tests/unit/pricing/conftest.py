"""gateway -> app -> client fixtures: each pool's app with a fake upstream gateway
(no network)."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pricing import create_app
from routing.model import RouteConfig
from tests.unit.support.gateway import FakeGateway


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
