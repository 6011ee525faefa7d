"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import pytest

from routing.load import load_routes
from routing.model import RouteConfig


@pytest.fixture(scope="session")
def routes() -> RouteConfig:
    return load_routes()
