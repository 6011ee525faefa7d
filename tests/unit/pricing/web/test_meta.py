"""Meta routes (health, readiness, the API description) come from routes.toml's [meta],
in every pool; readiness means ready, not just alive."""

from __future__ import annotations

import pytest

from pricing import create_app
from routing.envoy import envoy_config
from routing.load import DEFAULT_ROUTES_PATH, parse_routes
from routing.model import RouteConfig
from tests.unit.support.gateway import FakeGateway
from tests.unit.support.problems import problem


def moved(**paths: str) -> RouteConfig:
    """A copy of routes.toml with some [meta] paths changed."""
    text = DEFAULT_ROUTES_PATH.read_text()
    for name, path in paths.items():
        line = next(x for x in text.splitlines() if x.startswith(f"{name} = "))
        text = text.replace(line, f'{name} = "{path}"')
    return parse_routes(text, source="moved.toml")


def test_changing_the_openapi_path_in_routes_toml_moves_it(gateway: FakeGateway) -> None:
    config = moved(openapi="/v1/openapi.json")
    for pool in ("io", "cpu", "shared"):
        client = create_app(pool, config=config, gateway=gateway).test_client()
        spec = client.get("/v1/openapi.json")
        assert spec.status_code == 200, pool
        assert "/v1/openapi.json" in spec.get_json()["paths"]
        assert "/openapi.json" not in spec.get_json()["paths"]
        assert client.get("/openapi.json").status_code == 404
    (route,) = [r for r in _envoy_routes(config) if r["name"] == "meta.openapi"]
    assert route["match"]["path"] == "/v1/openapi.json"
    assert route["route"]["cluster"] == "io_pool"


def test_changing_the_readiness_path_moves_envoys_health_check(gateway: FakeGateway) -> None:
    config = moved(readyz="/ready", healthz="/alive")
    client = create_app("io", config=config, gateway=gateway).test_client()
    assert client.get("/ready").status_code == 200
    assert client.get("/alive").status_code == 200
    assert client.get("/readyz").status_code == 404
    for cluster in envoy_config(config)["static_resources"]["clusters"]:
        if cluster["name"] != "otel_collector":  # where Envoy sends its spans
            assert cluster["health_checks"][0]["http_health_check"]["path"] == "/ready"


@pytest.mark.parametrize(
    ("missing", "step"),
    [
        ("pricing.ready", "app built"),
        ("pricing.gateway", "upstream clients built"),
        ("tracing", "tracing set up"),
    ],
)
def test_readyz_is_503_until_every_step_is_done(
    routes: RouteConfig, gateway: FakeGateway, missing: str, step: str
) -> None:
    app = create_app("io", config=routes, gateway=gateway)
    client = app.test_client()
    assert client.get("/readyz").get_json() == {"status": "ok", "pool": "io"}
    del app.extensions[missing]
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert problem(response)["detail"] == f"waiting for: {step}"
    assert client.get("/healthz").status_code == 200  # alive all the same


def _envoy_routes(config: RouteConfig) -> list[dict]:
    listener = envoy_config(config)["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return list(hcm["route_config"]["virtual_hosts"][0]["routes"])
