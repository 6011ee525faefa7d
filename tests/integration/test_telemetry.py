"""What any OpenTelemetry backend reads, end to end: one request through Envoy into
each pool, its spans under the stable HTTP names, its log lines (the pool's and
Envoy's) under the same field names and trace id, the metrics with the documented
labels; the scrape against Prometheus' naming rules. And the SDK's exporter settings
(OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_BSP_*), each through the real
exporter into a Jaeger no stack started."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from routing.model import Layout, RouteConfig
from stack import jaeger
from stack.jaeger import JaegerPorts
from stack.launch import Stack
from tests.integration.support import jaeger_api
from tests.integration.support.http import http
from tests.integration.support.stack import json_lines
from tests.samples import OFFER_PATH, RIDE
from toolkit.wait import wait_until
from tracing.readback.spans import Span

pytestmark = pytest.mark.integration

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The older HTTP names the stable conventions replaced: none may appear on a pool span.
OLD_HTTP_NAMES = {
    "http.method",
    "http.status_code",
    "http.target",
    "http.url",
    "http.scheme",
    "http.host",
    "http.flavor",
    "http.server_name",
    "http.user_agent",
    "net.host.name",
    "net.host.port",
    "net.peer.name",
    "net.peer.port",
}


@pytest.fixture(scope="module")
def traced_stack(
    all_traced_routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    if jaeger.cached_binary() is None:
        pytest.skip("no Jaeger binary cached (make jaeger)")
    run_dir = tmp_path_factory.mktemp("telemetry-stack")
    with Stack.on_free_ports(all_traced_routes, Layout.SPLIT, run_dir, with_jaeger=True) as stack:
        yield stack


def trace_of(stack: Stack, trace_id: str, services: set[str]) -> list[Span]:
    assert stack.jaeger_url is not None
    found = jaeger_api.wait_for_spans(
        stack.jaeger_url,
        lambda found: services <= {s.service for s in found},
        20,
        0.5,
        trace_id=trace_id,
    )
    assert services <= {s.service for s in found}, f"trace {trace_id}: {[s.name for s in found]}"
    return found


@pytest.mark.parametrize(
    ("method", "path", "body", "pool", "route"),
    [
        ("GET", OFFER_PATH, None, "io", "/v1/offers/bike"),
        ("POST", "/v1/offers/rideshare", RIDE, "cpu", "/v1/offers/rideshare"),
    ],
)
def test_one_request_reads_the_same_in_spans_logs_and_metrics(
    traced_stack: Stack, method: str, path: str, body: Any, pool: str, route: str
) -> None:
    reply = http(method, traced_stack.url + path, body)
    assert reply.status == 200, reply.body
    assert reply.headers["x-pricing-pool"] == pool
    request_id = reply.headers["x-request-id"]
    logs = traced_stack.run_dir / "logs"

    # The two access lines of the request: same names, same trace id, same units.
    def lines() -> tuple[dict[str, Any], dict[str, Any]] | None:
        envoy = [r for r in json_lines(logs / "envoy.log") if r.get("request_id") == request_id]
        ours = [
            r
            for r in json_lines(logs / f"pool-{pool}.log")
            if r.get("request_id") == request_id and r["logger"] == "gunicorn.access"
        ]
        return (envoy[0], ours[0]) if envoy and ours else None

    assert wait_until(lambda: lines() is not None, 10), "no access line from Envoy or the pool"
    found = lines()
    assert found is not None
    envoy, line = found
    shared = (
        "timestamp",
        "severity_text",
        "severity_number",
        "body",
        "service.name",
        "trace_id",
        "request_id",
        "pool",
        "http.request.method",
        "url.path",
        "http.response.status_code",
        "duration_ms",
    )
    for name in shared:
        assert name in envoy and name in line, name
    assert envoy["trace_id"] == line["trace_id"] and re.fullmatch(r"[0-9a-f]{32}", line["trace_id"])
    for name in ("http.request.method", "url.path", "http.response.status_code", "pool"):
        assert envoy[name] == line[name], name
    assert (line["http.request.method"], line["url.path"]) == (method, route)
    assert line["http.response.status_code"] == 200 and line["severity_number"] == 9
    assert line["trace_flags"] == "01" and re.fullmatch(r"[0-9a-f]{16}", line["span_id"])
    assert envoy["service.name"] == "envoy" and line["service.name"] == "pricingservice"
    # Milliseconds in both: the pool's part of the request is within Envoy's.
    assert 0 < line["duration_ms"] <= envoy["duration_ms"] + 1
    assert None not in line.values() and None not in envoy.values()

    # Its trace: Envoy's span, the pool's server span (and the io pool's client spans),
    # the pool's under the stable HTTP names only.
    spans = trace_of(traced_stack, line["trace_id"], {"envoy", "pricingservice"})
    ours = [s for s in spans if s.service == "pricingservice"]
    server = [s for s in ours if s.kind == "server"]
    assert len(server) == 1 and server[0].span_id == line["span_id"]
    assert server[0].attributes["http.request.method"] == method
    assert server[0].attributes["http.response.status_code"] == 200
    assert server[0].attributes["url.path"] == route
    assert server[0].attributes["http.route"] == route
    if pool == "io":
        clients = [s for s in ours if s.kind == "client"]
        assert clients and all("http.request.method" in s.attributes for s in clients)
    for span in ours:
        old = OLD_HTTP_NAMES & set(span.attributes)
        assert not old, f"{span.name} carries the older names {sorted(old)}"
    # Envoy names its own tags the older way, and carries the stable names beside them.
    (edge,) = [s for s in spans if s.service == "envoy"]
    assert edge.attributes["http.request.method"] == method
    assert str(edge.attributes["http.response.status_code"]) == "200"
    assert edge.attributes["url.path"] == route

    # The metrics: OpenTelemetry's http.server.request.duration, with its labels.
    scrape = http("GET", traced_stack.pool_url(pool) + "/metrics").body.decode()
    wanted = {
        "http_request_method": method,
        "http_route": route,
        "http_response_status_code": "200",
        "pool": pool,
    }
    counts = [
        sample
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name == "http_server_request_duration_seconds_count"
    ]
    assert any(s.labels == wanted and s.value >= 1 for s in counts), counts


BASE_UNITS = ("_seconds", "_bytes", "_ratio")
NOT_BASE_UNITS = re.compile(
    r"_(milliseconds|ms|microseconds|us|nanoseconds|ns|minutes|hours|kb|mb|percent)(_|$)"
)
HIGH_CARDINALITY_LABELS = {"pid", "trace_id", "span_id", "request_id", "user_id", "url", "path"}
UNITLESS_GAUGES = {
    "pricing_workers",
    "process_open_fds",
    "process_max_fds",
    "pricing_python_allocated_blocks",
}
MAX_SERIES_PER_FAMILY = 300


def test_the_scrape_follows_prometheus_naming_rules(traced_stack: Stack) -> None:
    """promtool's checks, with prometheus_client's parser: counters end in _total,
    histograms carry a base unit, no other unit, info metrics are 1, labels are
    bounded (no ids, raw paths or query strings)."""
    for pool in ("io", "cpu"):
        http("GET", traced_stack.url + OFFER_PATH)
        http("GET", traced_stack.url + "/v1/offers/bike?origin=1,2&destination=x&user_id=u")
        text = http("GET", traced_stack.pool_url(pool) + "/metrics").body.decode()
        families = list(text_string_to_metric_families(text))
        names = {f.name for f in families}
        assert "http_server_request_duration_seconds" in names
        assert "pricing_build_info" in names
        assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= names
        for family in families:
            name = family.name
            assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name), name
            assert not NOT_BASE_UNITS.search(name), f"{name}: not a base unit"
            if family.type == "counter":
                assert all(s.name == name + "_total" for s in family.samples), name
            else:
                assert not name.endswith("_total"), f"{name}: _total on a {family.type}"
            if family.type == "histogram":
                assert name.endswith(BASE_UNITS), f"{name}: histogram without a unit"
            if name.endswith("_info"):
                assert family.type == "gauge" and {s.value for s in family.samples} == {1.0}
            elif family.type == "gauge":
                assert name.endswith(BASE_UNITS) or name in UNITLESS_GAUGES, name
            series = {tuple(sorted(s.labels.items())) for s in family.samples}
            assert len(series) <= MAX_SERIES_PER_FAMILY, f"{name}: {len(series)} series"
            for sample in family.samples:
                assert not HIGH_CARDINALITY_LABELS & set(sample.labels), (name, sample.labels)
                for label in ("route", "http_route", "victim"):
                    value = sample.labels.get(label, "")
                    assert "?" not in value and not re.search(r"\d{3,}", value), (name, value)


# --- the SDK's exporter settings, through the real exporters -------------------------

WORKER = """
import json, os, sys, time
from tracing.server import setup_worker, shutdown_worker
worker = setup_worker("io")
count, pause_s = int(sys.argv[1]), float(sys.argv[2])
for i in range(count):
    with worker.tracer.start_as_current_span(f"span-{i}"):
        pass
time.sleep(pause_s)
print(json.dumps({"exported_before_shutdown": worker.processor.exported_spans}), flush=True)
processor = worker.processor
shutdown_worker()
print(json.dumps({"exported": processor.exported_spans, "dropped": processor.dropped_spans}))
"""


def run_worker(
    env: dict[str, str], tmp_path: Path, count: int = 3, pause_s: float = 0.0
) -> tuple[str, list[dict[str, Any]]]:
    """A pool worker's tracing set-up, from the environment, in its own process: makes
    *count* spans, waits *pause_s*, shuts down. Its stdout and its JSON lines."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full = {
        **clean,
        "PRICING_TRACING": "spans",
        "PRICING_SPAN_FILE": str(tmp_path / "spans.jsonl"),
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(count), str(pause_s)],
        env=full,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    return out, [json.loads(line) for line in out.splitlines() if line.startswith('{"exported')]


def spans_of(ports: JaegerPorts, service: str, expect: int, timeout_s: float = 15) -> list[Span]:
    return jaeger_api.wait_for_spans(
        ports.query_url,
        lambda spans: len(spans) >= expect,
        timeout_s,
        0.5,
        service=service,
        limit=100,
        lookback="15m",
    )


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_protocol_is_honoured(own_jaeger: JaegerPorts, tmp_path: Path, protocol: str) -> None:
    service = f"proto-{protocol.replace('/', '-')}-{uuid.uuid4().hex[:6]}"
    port = own_jaeger.otlp_grpc if protocol == "grpc" else own_jaeger.otlp_http
    _, (_, after) = run_worker(
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_SERVICE_NAME": service,
        },
        tmp_path,
    )
    assert after == {"exported": 3, "dropped": 0}
    assert sorted(s.name for s in spans_of(own_jaeger, service, 3)) == [
        "span-0",
        "span-1",
        "span-2",
    ]
    assert not (tmp_path / "spans.jsonl").exists()


def test_the_wrong_protocol_for_the_port_delivers_nothing(
    own_jaeger: JaegerPorts, tmp_path: Path
) -> None:
    """The control for the test above: the protocol variable is what decided."""
    service = f"wrong-{uuid.uuid4().hex[:6]}"
    _, (_, after) = run_worker(
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{own_jaeger.otlp_grpc}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
            "OTEL_SERVICE_NAME": service,
        },
        tmp_path,
    )
    assert after["exported"] == 0 and after["dropped"] == 3


def test_traces_exporter_console_and_none(own_jaeger: JaegerPorts, tmp_path: Path) -> None:
    service = f"console-{uuid.uuid4().hex[:6]}"
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": own_jaeger.otlp_http_url}
    out, (_, after) = run_worker(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": service, **endpoint}, tmp_path
    )
    printed = [json.loads(line) for line in out.splitlines() if '"span-' in line]
    assert sorted(p["name"] for p in printed) == ["span-0", "span-1", "span-2"]
    assert after["exported"] == 3
    out, (_, after) = run_worker(
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": service, **endpoint}, tmp_path
    )
    assert after == {"exported": 0, "dropped": 0} and '"span-' not in out
    # Neither went to Jaeger, though its endpoint was set, nor to the span file. Both
    # workers have exited (what they exported, they had sent): a few seconds is many times
    # what the spans that do go there take to show (the protocol tests above).
    assert spans_of(own_jaeger, service, 1, timeout_s=3) == []
    assert not (tmp_path / "spans.jsonl").exists()


def test_bsp_schedule_delay_and_queue_size_are_honoured(
    own_jaeger: JaegerPorts, tmp_path: Path
) -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": own_jaeger.otlp_http_url}
    # A long delay: nothing leaves before shutdown (the default, 0.5 s, would have).
    _, (before, after) = run_worker(
        {"OTEL_BSP_SCHEDULE_DELAY": "60000", **endpoint}, tmp_path, count=3, pause_s=1.5
    )
    assert before["exported_before_shutdown"] == 0 and after["exported"] == 3
    _, (before, after) = run_worker({**endpoint}, tmp_path, count=3, pause_s=1.5)
    assert before["exported_before_shutdown"] == 3  # the control: the default delay
    # A two-span queue: a burst of 50 spans cannot fit; what fits arrives in Jaeger.
    service = f"bsp-{uuid.uuid4().hex[:6]}"
    _, (_, after) = run_worker(
        {
            "OTEL_BSP_MAX_QUEUE_SIZE": "2",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
            "OTEL_SERVICE_NAME": service,
            **endpoint,
        },
        tmp_path,
        count=50,
    )
    assert after["dropped"] > 0 and after["exported"] + after["dropped"] == 50
    time.sleep(1)
    assert len(spans_of(own_jaeger, service, after["exported"])) == after["exported"]
