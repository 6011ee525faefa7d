"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import pytest

from routing.load import load_routes
from routing.model import RouteConfig


@pytest.fixture(scope="session")
def routes() -> RouteConfig:
    return load_routes()


@pytest.fixture(scope="session")
def all_traced_routes(routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory) -> RouteConfig:
    """The committed route config with Envoy sampling every request, written to a file
    the pools read (tests that look at spans of ordinary requests need them all)."""
    from dataclasses import replace

    from routing.write import write_routes

    config = replace(routes, tracing=replace(routes.tracing, sample_percent=100.0))
    return write_routes(config, tmp_path_factory.mktemp("all-traced") / "routes.toml")
