"""One "METHOD path" label for a route: the greenlet label, the span name, the slow
threshold's key and Envoy's decorator all spell it alike."""

from __future__ import annotations

from routing.load import load_routes
from routing.model import Route, route_label


def test_a_label_is_the_method_and_the_path() -> None:
    assert route_label("GET", "/v1/offers/bike") == "GET /v1/offers/bike"


def test_a_route_labels_each_method() -> None:
    route = Route("bike", "/v1/offers/bike", ("GET",), "io", 500)
    assert route.labels() == ("GET /v1/offers/bike",)
    assert route.labels(route.answered_methods) == (
        "GET /v1/offers/bike",
        "HEAD /v1/offers/bike",
        "OPTIONS /v1/offers/bike",
    )


def test_envoy_names_its_span_as_the_pools_label() -> None:
    from routing.envoy import envoy_config

    config = load_routes()
    hcm = envoy_config(config)["static_resources"]["listeners"][0]["filter_chains"][0]
    routes = hcm["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    operations = {r["decorator"]["operation"] for r in routes if "decorator" in r}
    assert operations == {label for r in config.routes for label in r.labels()}
