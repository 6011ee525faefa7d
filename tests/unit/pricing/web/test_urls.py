"""Each pool's exact URL map (path, methods, endpoint), as Warehouse's route test does:
any change to what a pool serves shows up here, in review, as a changed line."""

from __future__ import annotations

import pytest
from flask import Flask

from pricing import create_app
from routing.model import RouteConfig
from tests.unit.support.gateway import FakeGateway

META = [
    ("/healthz", "GET", "meta.healthz"),
    ("/metrics", "GET", "meta.metrics"),
    ("/openapi.json", "GET", "meta.openapi"),
    ("/readyz", "GET", "meta.readyz"),
]

# Tracing is off in unit tests; /metrics (meta.metrics) is served whatever the mode.
URL_MAPS = {
    "io": [
        *META,
        ("/v1/offers/bike", "GET", "offers.bike"),
        ("/v1/offers/rideshare", "POST", "misdirected.offers.rideshare"),
        ("/v1/offers/scooter", "GET", "offers.scooter"),
        ("/v1/quotes/batch", "POST", "misdirected.quotes.batch"),
        ("/v1/regions", "GET", "regions.list"),
    ],
    "cpu": [
        *META,
        ("/v1/offers/bike", "GET", "misdirected.offers.bike"),
        ("/v1/offers/rideshare", "POST", "offers.rideshare"),
        ("/v1/offers/scooter", "GET", "misdirected.offers.scooter"),
        ("/v1/quotes/batch", "POST", "quotes.batch"),
        ("/v1/regions", "GET", "misdirected.regions.list"),
    ],
    "shared": [
        *META,
        ("/v1/offers/bike", "GET", "offers.bike"),
        ("/v1/offers/rideshare", "POST", "offers.rideshare"),
        ("/v1/offers/scooter", "GET", "offers.scooter"),
        ("/v1/quotes/batch", "POST", "quotes.batch"),
        ("/v1/regions", "GET", "regions.list"),
    ],
}


def url_map(app: Flask) -> list[tuple[str, str, str]]:
    """(path, methods, endpoint) per rule; HEAD and OPTIONS are Flask's own additions."""
    return sorted(
        (rule.rule, " ".join(sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})), rule.endpoint)
        for rule in app.url_map.iter_rules()
    )


@pytest.mark.parametrize("pool", sorted(URL_MAPS))
def test_each_pool_serves_exactly_its_url_map(
    pool: str, routes: RouteConfig, gateway: FakeGateway
) -> None:
    assert url_map(create_app(pool, config=routes, gateway=gateway)) == URL_MAPS[pool]
