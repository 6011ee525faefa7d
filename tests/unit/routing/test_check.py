"""`pricingctl routes check`: config and app endpoints must agree, one pool each."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from routing.check import check_endpoints
from routing.load import load_routes

APP = {"offers.bike", "offers.scooter", "offers.rideshare", "quotes.batch", "regions.list"}
META = {"meta.openapi", "meta.healthz", "meta.readyz", "meta.metrics"}


def test_shipped_config_matches_the_app() -> None:
    assert check_endpoints(load_routes(), APP, META) == []
    result = subprocess.run(
        [sys.executable, "-m", "pricingctl", "routes", "check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_endpoint_without_a_pool_is_named() -> None:
    problems = check_endpoints(load_routes(), APP | {"offers.moped"}, META)
    assert problems == ["endpoint 'offers.moped' has no pool: add a [[routes]] entry for it"]


def test_route_for_a_missing_endpoint_is_named() -> None:
    problems = check_endpoints(load_routes(), APP - {"quotes.batch"}, META)
    assert problems == [
        "route 'quotes.batch' (/v1/quotes/batch) names an endpoint the app does not have"
    ]


def test_endpoint_in_two_pools_is_named() -> None:
    config = load_routes()
    bike = config.route_for_endpoint("offers.bike")
    assert bike is not None
    twice = dataclasses.replace(
        config, routes=(*config.routes, dataclasses.replace(bike, pool="cpu", path="/v2/bike"))
    )
    assert check_endpoints(twice, APP, META) == [
        "endpoint 'offers.bike' is in 2 routes (pools: cpu, io)"
    ]


def test_meta_route_without_a_view_is_named() -> None:
    problems = check_endpoints(load_routes(), APP, META - {"meta.metrics"})
    assert problems == ["meta route 'meta.metrics' (/metrics) has no view in the app"]
