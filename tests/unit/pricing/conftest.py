"""gateway -> app -> client fixtures: each pool's app with a fake upstream gateway
(no network)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pricing import create_app
from routing.model import RouteConfig
from tests.unit.support.gateway import FakeGateway


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


@pytest.fixture
def app_for(routes: RouteConfig, gateway: FakeGateway) -> Callable[[str], Flask]:
    """The app of one pool ("io", "cpu" or "shared"), its upstreams the fake gateway."""

    def make(pool: str) -> Flask:
        app = create_app(pool, config=routes, gateway=gateway)
        app.config["TESTING"] = True
        return app

    return make


@pytest.fixture
def io_client(app_for: Callable[[str], Flask]) -> FlaskClient:
    return app_for("io").test_client()


@pytest.fixture
def cpu_client(app_for: Callable[[str], Flask]) -> FlaskClient:
    return app_for("cpu").test_client()


@pytest.fixture
def shared_client(app_for: Callable[[str], Flask]) -> FlaskClient:
    return app_for("shared").test_client()
