"""The standard OpenTelemetry variables, as an operator sets them, on the real stack:
the pools export to the OTLP endpoint named in OTEL_EXPORTER_OTLP_ENDPOINT (a Jaeger
the stack did not start itself), under OTEL_SERVICE_NAME, with OTEL_RESOURCE_ATTRIBUTES
on the resource. And the JSON logs: one request followed from Envoy's access log line
to the pool's lines to its trace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from routing.model import Layout, RouteConfig
from stack.jaeger import JaegerPorts
from stack.launch import Stack
from tests.integration.support import jaeger_api
from tests.integration.support.http import http, reset_upstreams, set_upstream
from tests.integration.support.stack import json_lines
from tests.samples import OFFER_PATH
from toolkit.wait import wait_for, wait_until

pytestmark = pytest.mark.integration

SERVICE = "pricing-env-test"


@pytest.fixture(scope="module")
def env_stack(
    all_traced_routes: RouteConfig,
    own_jaeger: JaegerPorts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": own_jaeger.otlp_http_url,
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=ci,team=fares",
    }
    run_dir = tmp_path_factory.mktemp("env-stack")
    with Stack.on_free_ports(all_traced_routes, Layout.SPLIT, run_dir, extra_env=env) as stack:
        yield stack


def jaeger_traces(ports: JaegerPorts, service: str) -> list[dict[str, Any]]:
    return (
        jaeger_api.v1(ports.query_url, "/api/traces", service=service, limit=20, lookback="1h")
        or []
    )


def test_spans_arrive_in_jaeger_under_the_configured_service_name(
    env_stack: Stack, own_jaeger: JaegerPorts
) -> None:
    for _ in range(3):
        assert http("GET", f"{env_stack.url}{OFFER_PATH}").status == 200

    def offer_traced(traces: list[dict[str, Any]]) -> bool:
        # A trace's server span ends last, and may leave in a later batch than its calls.
        return any(s["operationName"] == "GET /v1/offers/bike" for t in traces for s in t["spans"])

    # the exporter thread sends every 0.5 s
    traces: list[dict[str, Any]] = wait_for(
        lambda: jaeger_traces(own_jaeger, SERVICE), 15, 0.7, until=offer_traced
    )
    assert traces, f"no trace of service {SERVICE!r} in Jaeger"
    spans = [s for t in traces for s in t["spans"]]
    # (process ids are per trace: p1 in one trace is not p1 in another)
    server = [
        (s, t["processes"][s["processID"]])
        for t in traces
        for s in t["spans"]
        if s["operationName"] == "GET /v1/offers/bike"
    ]
    assert server
    process = server[0][1]
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


def test_one_request_is_followed_from_envoys_log_to_the_pools_log_to_its_trace(
    env_stack: Stack, own_jaeger: JaegerPorts
) -> None:
    set_upstream(env_stack, "vehicles", error_rate=1.0, error_status=503)
    try:
        reply = http("GET", f"{env_stack.url}{OFFER_PATH}")
    finally:
        reset_upstreams(env_stack)
    # A 5xx problem names its trace: in the body and in a header.
    assert reply.status == 503, reply.body
    problem = reply.json()
    trace_id, request_id = problem["trace_id"], reply.headers["x-request-id"]
    assert len(trace_id) == 32 and reply.headers["x-pricing-trace-id"] == trace_id
    logs = env_stack.run_dir / "logs"

    def envoy_line() -> dict[str, Any] | None:
        found = [r for r in json_lines(logs / "envoy.log") if r["request_id"] == request_id]
        return found[0] if found else None

    assert wait_until(lambda: envoy_line() is not None, 10), "no Envoy access log line"
    envoy = envoy_line()
    assert envoy is not None
    assert envoy["trace_id"] == trace_id
    assert envoy["upstream_cluster"] == "io_pool" and envoy["http.response.status_code"] == 503
    assert envoy["upstream_host"] == f"127.0.0.1:{env_stack.config.pool('io').bind.port}"

    pool_lines = [r for r in json_lines(logs / "pool-io.log") if r.get("trace_id") == trace_id]
    keys = {"timestamp", "severity_text", "logger", "body", "pool", "pid", "trace_id", "span_id"}
    assert pool_lines and all(keys <= set(r) for r in pool_lines), pool_lines
    access = [r for r in pool_lines if r["logger"] == "gunicorn.access"]
    assert len(access) == 1, pool_lines
    assert access[0]["http.route"] == "/v1/offers/bike" and access[0]["pool"] == "io"
    assert access[0]["request_id"] == request_id
    assert access[0]["http.response.status_code"] == 503

    def in_jaeger() -> bool:
        try:
            traces = jaeger_api.v1(own_jaeger.query_url, f"/api/traces/{trace_id}")
        except OSError:
            return False
        return bool(traces) and any(s["spanID"] == access[0]["span_id"] for s in traces[0]["spans"])

    assert wait_until(in_jaeger, 15), f"trace {trace_id} with the pool's span not in Jaeger"
