"""`pricingctl traces --from-spans`: the table, JSON, one trace's waterfall, and clear failures."""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from pricingctl.main import main
from tracing import attributes
from tracing.export import JsonLinesFileExporter

CULPRIT = "POST /v1/offers/rideshare=0.272800"


@pytest.fixture
def span_file(tmp_path: Path) -> tuple[Path, list[str]]:
    """Three bike offers, each calling vehicles and routing; returns the file and trace ids."""
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "pricingservice"}))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesFileExporter(path)))
    tracer = provider.get_tracer("test")
    trace_ids = []
    for i in range(3):
        with tracer.start_as_current_span("GET /v1/offers/bike", kind=SpanKind.SERVER) as server:
            trace_ids.append(format(server.get_span_context().trace_id, "032x"))
            with tracer.start_as_current_span(
                "GET /vehicles/v1/nearby",
                kind=SpanKind.CLIENT,
                attributes={
                    attributes.NETWORK_DURATION: 0.110 + i / 1000,
                    attributes.SCHEDULING_DELAY: 0.2728,
                    attributes.SCHEDULING_CULPRITS: [CULPRIT],
                },
            ):
                pass
            with tracer.start_as_current_span(
                "GET /routing/v1/route",
                kind=SpanKind.CLIENT,
                attributes={attributes.NETWORK_DURATION: 0.02, attributes.SCHEDULING_DELAY: 0.0},
            ):
                pass
    provider.shutdown()
    return path, trace_ids


def test_table_per_endpoint_and_upstream(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = span_file
    assert main(["traces", "--from-spans", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert "top culprits" in lines[0]
    endpoint = next(line for line in lines if "GET /v1/offers/bike" in line)
    assert endpoint.split()[:4] == ["endpoint", "GET", "/v1/offers/bike", "3"]
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert vehicles.startswith("upstream")
    assert "272.8" in vehicles  # scheduling delay, ms
    assert "POST /v1/offers/rideshare=0.818" in vehicles  # 3 x 0.2728 s caused
    assert any("GET /routing/v1/route" in line for line in lines)


def test_json_rows(span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = span_file
    assert main(["traces", "--from-spans", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in document["rows"]}
    assert set(rows) == {"GET /v1/offers/bike", "GET /vehicles/v1/nearby", "GET /routing/v1/route"}
    vehicles = rows["GET /vehicles/v1/nearby"]
    assert vehicles["kind"] == "upstream"
    assert vehicles["count"] == 3
    assert vehicles["delay_p50_ms"] == pytest.approx(272.8)
    assert vehicles["network_p50_ms"] == pytest.approx(111.0)
    assert vehicles["top_culprits"] == [
        {"label": "POST /v1/offers/rideshare", "seconds": pytest.approx(0.8184)}
    ]
    assert rows["GET /v1/offers/bike"]["kind"] == "endpoint"


def test_trace_id_prints_the_waterfall(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, trace_ids = span_file
    assert main(["traces", "--from-spans", str(path), "--trace-id", trace_ids[1]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"trace {trace_ids[1]}  (3 spans")
    assert "pricingservice: GET /v1/offers/bike [server]" in lines[1]
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert "net 111.0 / sched 272.8" in vehicles
    assert "<- POST /v1/offers/rideshare 272.8" in vehicles
    assert vehicles.index("pricingservice:") == lines[1].index("pricingservice:") + 2


def test_table_ends_with_each_rows_slowest_trace_as_a_command(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, trace_ids = span_file
    assert main(["traces", "--from-spans", str(path)]) == 0
    out = capsys.readouterr().out
    table, _, examples = out.partition("\n\nslowest trace of each row, slowest first")
    assert "times in ms" in table
    lines = examples.splitlines()[1:]
    assert len(lines) == 3  # one per row
    for line in lines:
        command = line[line.index("pricingctl traces") :]
        assert command.startswith(f"pricingctl traces --from-spans {path} --trace-id ")
        assert command.split()[-1] in trace_ids


@pytest.fixture
def measured_file(tmp_path: Path) -> tuple[Path, str]:
    """One bike offer as the stack exports it: Envoy's span, the pool's server span with
    the inbound delay and the breakdown's attributes, its vehicles call with CPU wait."""
    path = tmp_path / "spans.jsonl"
    providers = []
    for service in ("envoy", "pricingservice"):
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesFileExporter(path)))
        providers.append(provider)
    envoy, pool = (p.get_tracer("test") for p in providers)
    server_attributes = {
        attributes.NETWORK_DURATION: 0.100,
        attributes.SCHEDULING_DELAY: 0.040,
        attributes.SCHEDULING_CPU_WAIT: 0.010,
        attributes.ENVOY_BEFORE_POOL: 0.0,
        attributes.INBOUND_DELAY: 0.020,
        attributes.INBOUND_CPU_WAIT: 0.005,
        attributes.INBOUND_CULPRITS: [CULPRIT],
        attributes.HANDLER_DURATION: 0.0,
        attributes.HANDLER_RUNNING: 0.0,
        attributes.CRITICAL_NETWORK: 0.100,
        attributes.CRITICAL_SCHEDULING_DELAY: 0.040,
        attributes.CRITICAL_CPU_WAIT: 0.010,
    }
    with (
        envoy.start_as_current_span("GET /v1/offers/bike", kind=SpanKind.SERVER),
        pool.start_as_current_span(
            "GET /v1/offers/bike", kind=SpanKind.SERVER, attributes=server_attributes
        ) as server,
        pool.start_as_current_span(
            "GET /vehicles/v1/nearby",
            kind=SpanKind.CLIENT,
            attributes={
                attributes.NETWORK_DURATION: 0.100,
                attributes.SCHEDULING_DELAY: 0.040,
                attributes.SCHEDULING_CPU_WAIT: 0.010,
                attributes.SCHEDULING_CULPRITS: [CULPRIT],
            },
        ),
    ):
        trace_id = format(server.get_span_context().trace_id, "032x")
    for provider in providers:
        provider.shutdown()
    return path, trace_id


def test_table_shows_inbound_delay_and_cpu_wait_shares(
    measured_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = measured_file
    assert main(["traces", "--from-spans", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "inb p50" in lines[0] and "cpu%" in lines[0]
    endpoint = next(line for line in lines if "GET /v1/offers/bike" in line)
    # count, dur p50/p99, net p50/p99, sched p50/p99, cpu%, inb p50/p99, cpu%, culprits
    assert endpoint.split()[3:4] + endpoint.split()[8:14] == [
        "1",
        "40.0",
        "40.0",
        "25",
        "20.0",
        "20.0",
        "25",
    ]
    assert "inbound: POST /v1/offers/rideshare=0.273" in endpoint
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert vehicles.split()[10:14] == ["25", "-", "-", "-"]

    assert main(["traces", "--from-spans", str(path), "--json"]) == 0
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["endpoint"]["inbound_delay_p50_ms"] == pytest.approx(20.0)
    assert rows["endpoint"]["inbound_cpu_wait_pct"] == pytest.approx(25.0)
    assert rows["endpoint"]["top_inbound_culprits"] == [
        {"label": "POST /v1/offers/rideshare", "seconds": pytest.approx(0.2728)}
    ]
    assert rows["upstream"]["delay_cpu_wait_pct"] == pytest.approx(25.0)
    assert rows["upstream"]["inbound_delay_p50_ms"] is None


def test_trace_id_shows_where_the_offers_time_went(
    measured_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, trace_id = measured_file
    assert main(["traces", "--from-spans", str(path), "--trace-id", trace_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    server = next(line for line in lines if "pricingservice: GET /v1/offers/bike" in line)
    assert "inbound 20.0 (cpu wait 5.0)  <- POST /v1/offers/rideshare 272.8" in server
    vehicles = next(line for line in lines if "GET /vehicles/v1/nearby" in line)
    assert "net 100.0 / sched 40.0 (cpu wait 10.0)" in vehicles
    heading = next(i for i, line in enumerate(lines) if line.startswith("where the "))
    assert "of GET /v1/offers/bike went (Envoy's span" in lines[heading]
    parts = {line.split(None, 2)[2]: line.split()[0] for line in lines[heading + 1 :]}
    names = list(parts)
    assert names[0] == "envoy before pool" and names[-1] == "unexplained"
    assert parts["inbound cpu wait"] == "5.0" and parts["inbound hub busy"] == "15.0"
    assert parts["network"] == "100.0" and parts["delay cpu wait"] == "10.0"

    assert main(["traces", "--from-spans", str(path), "--trace-id", trace_id, "--json"]) == 0
    spans = json.loads(capsys.readouterr().out)
    (server_span,) = (
        s for s in spans if s["service"] == "pricingservice" and s["kind"] == "server"
    )
    result = server_span["breakdown"]
    assert result["parts_ms"]["inbound cpu wait"] == pytest.approx(5.0)
    assert result["parts_ms"]["delay hub busy"] == pytest.approx(30.0)
    assert "unexplained" in result["parts_ms"] and result["total_ms"] > 0
    assert all("breakdown" not in s for s in spans if s is not server_span)


def test_trace_id_of_spans_without_the_measurement_still_renders(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, trace_ids = span_file
    assert main(["traces", "--from-spans", str(path), "--trace-id", trace_ids[0]]) == 0
    out = capsys.readouterr().out
    assert "inbound - (cpu wait -)" in out
    assert "went: - (no gevent measurement on its span)" in out
    assert main(["traces", "--from-spans", str(path), "--trace-id", trace_ids[0], "--json"]) == 0
    spans = json.loads(capsys.readouterr().out)
    assert [s["breakdown"] for s in spans if s["kind"] == "server"] == [None]


def _jaeger_trace(trace_id: str = "abc123") -> dict[str, Any]:
    """One trace as Jaeger v2's /api/v3/traces returns it (OTLP JSON): a server span and
    a client call."""

    def span(span_id: str, name: str, kind: int, ms: int) -> dict[str, Any]:
        start = 1_700_000_000_000_000_000
        return {
            "traceId": trace_id,
            "spanId": span_id,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + ms * 1_000_000),
        }

    return {
        "result": {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [
                            {"key": "service.name", "value": {"stringValue": "pricingservice"}}
                        ]
                    },
                    "scopeSpans": [
                        {
                            "scope": {"name": "pricingservice"},
                            "spans": [
                                span("s1", "GET /v1/offers/bike", 2, 400),
                                span("c1", "GET /vehicles/v1/nearby", 3, 380),
                            ],
                        }
                    ],
                }
            ]
        }
    }


@pytest.fixture
def jaeger_queries() -> list[str]:
    """The paths (with query strings) fake_jaeger was asked for."""
    return []


@pytest.fixture
def fake_jaeger(jaeger_queries: list[str]) -> Iterator[str]:
    """Jaeger's query API on a loopback port, answering every query with one trace."""
    body = json.dumps(_jaeger_trace()).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            jaeger_queries.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_rows_from_jaeger_link_to_its_ui_slowest_first(
    fake_jaeger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["traces", "--from-jaeger", f"{fake_jaeger}/"]) == 0
    out = capsys.readouterr().out
    examples = out.split("(open in Jaeger's UI):\n", 1)[1].splitlines()
    assert examples[0].endswith(f"400.0 ms  {fake_jaeger}/trace/abc123?uiFind=s1")
    assert examples[1].endswith(f"380.0 ms  {fake_jaeger}/trace/abc123?uiFind=c1")

    assert main(["traces", "--from-jaeger", fake_jaeger, "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    (slowest,) = rows["GET /vehicles/v1/nearby"]["slowest"]
    assert slowest["url"] == f"{fake_jaeger}/trace/abc123?uiFind=c1"


def test_jaeger_is_asked_for_the_service_name_the_pools_use(
    fake_jaeger: str, jaeger_queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def service_asked() -> list[str]:
        query = urllib.parse.urlsplit(jaeger_queries.pop()).query
        return urllib.parse.parse_qs(query)["query.service_name"]

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert main(["traces", "--from-jaeger", fake_jaeger]) == 0
    assert service_asked() == ["pricingservice"]
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=pricing-attr,team=fares")
    assert main(["traces", "--from-jaeger", fake_jaeger]) == 0
    assert service_asked() == ["pricing-attr"]
    monkeypatch.setenv("OTEL_SERVICE_NAME", "pricing-eu")  # wins, as on the resource
    assert main(["traces", "--from-jaeger", fake_jaeger]) == 0
    assert service_asked() == ["pricing-eu"]
    assert main(["traces", "--from-jaeger", fake_jaeger, "--service", "envoy"]) == 0
    assert service_asked() == ["envoy"]


def test_trace_id_from_jaeger_ends_with_its_ui_link(
    fake_jaeger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["traces", "--from-jaeger", fake_jaeger, "--trace-id", "abc123"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("trace abc123")
    assert lines[-1] == f"in Jaeger's UI: {fake_jaeger}/trace/abc123"


def test_trace_id_with_json_lists_its_spans(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, trace_ids = span_file
    assert main(["traces", "--from-spans", str(path), "--trace-id", trace_ids[0], "--json"]) == 0
    spans = json.loads(capsys.readouterr().out)
    assert len(spans) == 3
    assert {s["trace_id"] for s in spans} == {trace_ids[0]}
    assert {s["kind"] for s in spans} == {"server", "client"}


def test_missing_file_exits_2_with_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SystemExit) as info:
        main(["traces", "--from-spans", str(missing)])
    assert info.value.code == 2  # a bad flag value, refused at the door
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("pricingctl traces: error: argument --from-spans: no such file")
    assert str(missing) in err


def test_missing_default_file_exits_1_with_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pricingctl.traces.DEFAULT_SPAN_FILE", tmp_path / "spans.jsonl")
    assert main(["traces", "--from-spans"]) == 1  # the default file: read, not checked
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("pricingctl: ")
    assert "Traceback" not in err


def test_unknown_trace_id_exits_1(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = span_file
    assert main(["traces", "--from-spans", str(path), "--trace-id", "0" * 32]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found" in err


def test_malformed_file_exits_1_naming_the_line(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = span_file
    with path.open("a") as f:
        f.write("{truncated\n")
    lines = len(path.read_text().splitlines())
    assert main(["traces", "--from-spans", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"pricingctl: {path}:{lines}: not an OTLP JSON line\n"


def test_empty_file_prints_the_friendly_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text("")
    assert main(["traces", "--from-spans", str(path)]) == 0
    assert capsys.readouterr().out.strip() == (
        "no spans of pricingservice yet: send some traffic first"
    )


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_limit_below_one_exits_2(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    path, _ = span_file
    with pytest.raises(SystemExit) as info:
        main(["traces", "--from-spans", str(path), "--limit", limit])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("pricingctl traces: error: argument --limit: must be between 1 and")
    assert err.count("\n") == 1


def test_unreachable_jaeger_exits_1_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["traces", "--from-jaeger", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot reach Jaeger" in err
    assert "--from-spans" in err  # tells the user the other source


def test_file_and_jaeger_are_exclusive(
    span_file: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = span_file
    with pytest.raises(SystemExit) as info:
        main(["traces", "--from-spans", str(path), "--from-jaeger", "http://127.0.0.1:1"])
    assert info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err
