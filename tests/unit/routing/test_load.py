"""routes.toml loading: the shipped config loads, and every mistake is named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from routing.errors import RouteConfigError
from routing.load import DEFAULT_ROUTES_PATH, load_routes, parse_routes
from routing.model import Layout

SHIPPED = DEFAULT_ROUTES_PATH.read_text()


def test_shipped_config_loads_with_split_and_shared_layouts() -> None:
    config = load_routes()
    assert [p.name for p in config.pools] == ["cpu", "io"]
    assert config.shared.workers == sum(p.workers for p in config.pools)
    assert {r.endpoint: r.pool for r in config.routes} == {
        "offers.bike": "io",
        "offers.scooter": "io",
        "offers.rideshare": "cpu",
        "quotes.batch": "cpu",
        "regions.list": "io",
        "meta.openapi": "io",
    }
    offers = config.route_for_endpoint("offers.bike")
    assert offers is not None and offers.timeout_ms == 500
    assert all(config.pool_of(r, Layout.SHARED) == "shared" for r in config.routes)
    assert config.pool("cpu").capacity == 2
    assert config.meta.endpoints() == {
        "meta.healthz": "/healthz",
        "meta.readyz": "/readyz",
        "meta.openapi": "/openapi.json",
        "meta.metrics": "/metrics",
    }
    openapi = config.route_for_endpoint("meta.openapi")
    assert openapi is not None and openapi.path == config.meta.openapi  # from [meta]


def edited(old: str, new: str) -> str:
    assert old in SHIPPED, old
    return SHIPPED.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not = [valid", "not valid TOML"),
        (edited('pool = "io"', 'pool = "gpu"'), "route 'offers.bike': pool 'gpu' is not declared"),
        (
            edited('methods = ["GET"]', 'methods = ["FETCH"]'),
            "route 'offers.bike': unknown HTTP method",
        ),
        (edited('methods = ["GET"]', "methods = []"), "route 'offers.bike': methods must be"),
        (
            edited("timeout_ms = 500", "timeout_ms = 0"),
            "route 'offers.bike': timeout_ms must be between",
        ),
        (
            edited("timeout_ms = 500", 'timeout_ms = "fast"'),
            "route 'offers.bike': timeout_ms must be an integer",
        ),
        (
            edited('path = "/v1/offers/bike"', 'path = "v1/bike"'),
            "route 'offers.bike': path must be",
        ),
        (
            edited('path = "/v1/offers/scooter"', 'path = "/v1/offers/bike"'),
            "GET /v1/offers/bike is already served by route 'offers.bike'",
        ),
        (
            edited('endpoint = "offers.scooter"', 'endpoint = "offers.bike"'),
            "route 'offers.bike' is declared twice",
        ),
        (
            edited("timeout_ms = 10000", "timeout_ms = 10000\nretry = { attempts = 1 }"),
            "route 'quotes.batch': retries are only allowed for idempotent methods, not POST",
        ),
        (
            edited('"connect-failure", "reset", "refused-stream"] }', '"5xx"] }'),
            "route 'offers.bike': retry.on 5xx is not allowed",
        ),
        (
            edited("timeout_ms = 500", "timeout_ms = 500\ncache = true"),
            "route 'offers.bike': unknown key(s) cache",
        ),
        (
            edited('bind = "127.0.0.1:8102"', 'bind = "0.0.0.0:8102"'),
            "[pools.io].bind must be a loopback address",
        ),
        (
            edited('bind = "127.0.0.1:8102"', 'bind = "127.0.0.1"'),
            "[pools.io].bind must be host:port",
        ),
        (
            edited('bind = "127.0.0.1:8102"', 'bind = "127.0.0.1:8101"'),
            "port 8101 is already used by [pools.cpu]",
        ),
        (
            edited("worker_connections = 1 ", "worker_connections = 0 "),
            "[pools.cpu]: worker_connections must be between 1",
        ),
        (edited("workers = 2\n", "workers = true\n"), "[pools.cpu]: workers must be an integer"),
        (edited("nice = 5", "nice = -5"), "[pools.cpu]: nice must be between 0 and 19"),
        (
            edited(
                'address = "127.0.0.1"            # never', 'address = "0.0.0.0"            # never'
            ),
            "[admin].address must be a loopback address",
        ),
        (
            edited('base_url = "http://127.0.0.1:8200"', 'base_url = "ftp://x"'),
            "[upstreams].base_url must look like",
        ),
        (edited("[shared]", "[sharde]"), "top level: unknown key(s) sharde"),
        (
            edited('endpoint = "offers.bike"', 'endpoint = "Offers Bike"'),
            "routes[0].endpoint must be a Flask endpoint name",
        ),
        (edited("[meta]", "[meta_]"), "unknown key(s) meta_"),
        (edited('metrics = "/metrics"', ""), "[meta]: metrics must be a non-empty string"),
        (edited('readyz = "/readyz"', 'readyz = "readyz"'), "[meta].readyz must be a literal"),
        (edited('readyz = "/readyz"', 'readyz = "/healthz"'), "[meta]: /healthz is given twice"),
        (edited("[meta]", '[meta]\nstatus = "/status"'), "[meta]: unknown key(s) status"),
        (
            edited('path = "/v1/offers/bike"', 'path = "/metrics"'),
            "route 'offers.bike': /metrics is served by every pool as 'meta.metrics'",
        ),
        (
            edited('endpoint = "meta.openapi"', 'endpoint = "meta.status"'),
            "route 'meta.status': no such meta route",
        ),
        (
            edited('endpoint = "meta.openapi"', 'endpoint = "meta.openapi"\npath = "/x"'),
            "route 'meta.openapi': its path is [meta].openapi; remove `path` here",
        ),
    ],
)
def test_each_mistake_is_named(text: str, message: str) -> None:
    with pytest.raises(RouteConfigError, match=re.escape(message)):
        parse_routes(text)


def test_a_pool_that_serves_nothing_is_an_error() -> None:
    text = (
        SHIPPED + '\n[pools.spare]\nbind = "127.0.0.1:8109"\nworkers = 1\nworker_connections = 10\n'
    )
    # TOML forbids re-opening [pools] after [[routes]]? No: dotted tables may come later.
    with pytest.raises(RouteConfigError, match=re.escape("[pools.spare] serves no route")):
        parse_routes(text)


def test_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RouteConfigError, match="route config not found"):
        load_routes(tmp_path / "nope.toml")


def test_with_ports_moves_every_listener() -> None:
    config = load_routes().with_ports(
        listener_port=1, admin_port=2, pool_ports={"io": 3, "shared": 4}
    )
    assert config.listener.address.port == 1
    assert config.admin.port == 2
    assert config.pool("io").bind.port == 3
    assert config.pool("cpu").bind.port == 8101
    assert config.shared.bind.port == 4
