"""The standard OpenTelemetry variables, as an operator sets them, on the real stack:
the pools export to the OTLP endpoint named in OTEL_EXPORTER_OTLP_ENDPOINT (a Jaeger
the stack did not start itself), under OTEL_SERVICE_NAME, with OTEL_RESOURCE_ATTRIBUTES
on the resource."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from routing.model import Layout, RouteConfig
from stack import jaeger
from stack.jaeger import JaegerPorts
from stack.launch import Stack
from tests.integration.conftest import http

pytestmark = pytest.mark.integration

SERVICE = "pricing-env-test"
OFFER = "/v1/offers/bike?origin=37.7700,-122.4200&destination=37.7849,-122.4094&user_id=u-7"


@pytest.fixture(scope="module")
def env_jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JaegerPorts]:
    if jaeger.cached_binary() is None:
        pytest.skip("no Jaeger binary cached (make jaeger)")
    proc, ports = jaeger.start(tmp_path_factory.mktemp("env-jaeger"))
    try:
        yield ports
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def env_stack(
    all_traced_routes: RouteConfig,
    env_jaeger: JaegerPorts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": env_jaeger.otlp_http_url,
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=ci,team=fares",
    }
    run_dir = tmp_path_factory.mktemp("env-stack")
    with Stack.on_free_ports(all_traced_routes, Layout.SPLIT, run_dir, extra_env=env) as stack:
        yield stack


def jaeger_traces(ports: JaegerPorts, service: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"service": service, "limit": 20, "lookback": "1h"})
    with urllib.request.urlopen(f"{ports.query_url}/api/traces?{query}", timeout=5) as resp:
        return json.load(resp)["data"] or []


def test_spans_arrive_in_jaeger_under_the_configured_service_name(
    env_stack: Stack, env_jaeger: JaegerPorts
) -> None:
    for _ in range(3):
        assert http("GET", f"{env_stack.url}{OFFER}").status == 200
    deadline = time.monotonic() + 15
    traces: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not traces:
        time.sleep(0.7)  # the exporter thread sends every 0.5 s
        traces = jaeger_traces(env_jaeger, SERVICE)
    assert traces, f"no trace of service {SERVICE!r} in Jaeger"
    spans = [s for t in traces for s in t["spans"]]
    processes = {pid: p for t in traces for pid, p in t["processes"].items()}
    server = [s for s in spans if s["operationName"] == "GET /v1/offers/bike"]
    assert server
    process = processes[server[0]["processID"]]
    assert process["serviceName"] == SERVICE
    tags = {tag["key"]: tag["value"] for tag in process["tags"]}
    assert tags["deployment.environment.name"] == "ci"
    assert tags["team"] == "fares"
    assert tags["pricing.pool"] == "io"
    assert tags["service.version"]
    clients = [s for s in spans if s["operationName"] == "GET /vehicles/v1/nearby"]
    assert clients
    client_tags = {tag["key"]: tag["value"] for tag in clients[0]["tags"]}
    assert client_tags["url.full"].startswith(f"{env_stack.simulator_url}/vehicles/v1/nearby?")
    # Nothing went to the span file: the endpoint was taken from the environment.
    assert not Path(env_stack.span_file).exists() or SERVICE not in env_stack.span_file.read_text()
