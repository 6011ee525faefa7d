"""Reading spans back: the OTLP JSON-lines file the exporter writes, and Jaeger's query API."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tracing import attributes
from tracing.export import JsonLinesFileExporter
from tracing.spans import Span, SpanSourceError, _jaeger_spans, from_file, from_jaeger

CULPRITS = ["POST /v1/offers/rideshare=0.272800", "<hub>=0.001500"]


def one_trace(tracer: Any) -> None:
    with (
        tracer.start_as_current_span(
            "GET /v1/offers/bike",
            kind=SpanKind.SERVER,
            attributes={"http.route": "/v1/offers/bike"},
        ),
        tracer.start_as_current_span(
            "GET /vehicles/v1/nearby",
            kind=SpanKind.CLIENT,
            attributes={
                "server.port": 8200,
                "pricing.upstream": "vehicles",
                "pricing.cached": True,
                attributes.NETWORK_DURATION: 0.11,
                attributes.SCHEDULING_DELAY: 0.273,
                attributes.SCHEDULING_CULPRITS: CULPRITS,
            },
        ),
    ):
        pass


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, list[ReadableSpan]]:
    """Two traces written by the real exporter, one batch per trace."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "pricingservice"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesFileExporter(path)
    one_trace(tracer)
    exporter.export(memory.get_finished_spans())
    memory.clear()
    one_trace(tracer)
    exporter.export(memory.get_finished_spans())
    first = list(memory.get_finished_spans())
    return path, first


def hexid(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def test_round_trip_through_the_file_keeps_every_field(
    written: tuple[Path, list[ReadableSpan]],
) -> None:
    path, last_trace = written
    spans = from_file(path)
    assert len(spans) == 4
    by_id = {s.span_id: s for s in spans}
    for sdk in last_trace:
        span = by_id[hexid(sdk.context.span_id, 16)]
        assert span.trace_id == hexid(sdk.context.trace_id, 32)
        assert span.name == sdk.name
        assert span.service == "pricingservice"
        assert sdk.start_time is not None and sdk.end_time is not None
        assert span.start_us == sdk.start_time // 1000
        assert span.duration_us == (sdk.end_time - sdk.start_time) // 1000
    client = next(s for s in spans if s.kind == "client" and s.span_id in by_id)
    server = by_id[client.parent_id]  # type: ignore[index]
    assert server.kind == "server"
    assert server.parent_id is None
    assert server.name == "GET /v1/offers/bike"
    assert client.attributes["gevent.scheduling.culprits"] == CULPRITS
    assert client.attributes["server.port"] == 8200
    assert client.attributes["pricing.upstream"] == "vehicles"
    assert client.attributes["pricing.cached"] is True
    assert client.attributes[attributes.NETWORK_DURATION] == pytest.approx(0.11)
    assert server.attributes["http.route"] == "/v1/offers/bike"


def test_trace_id_filter_keeps_only_that_trace(
    written: tuple[Path, list[ReadableSpan]],
) -> None:
    path, last_trace = written
    wanted = hexid(last_trace[0].context.trace_id, 32)
    spans = from_file(path, trace_id=wanted)
    assert len(spans) == 2
    assert {s.trace_id for s in spans} == {wanted}
    assert {s.span_id for s in spans} == {hexid(s.context.span_id, 16) for s in last_trace}


def test_unknown_trace_id_is_a_clear_error(written: tuple[Path, list[ReadableSpan]]) -> None:
    path, _ = written
    with pytest.raises(SpanSourceError, match=re.escape(f"trace {'ab' * 16} not found in {path}")):
        from_file(path, trace_id="ab" * 16)


def test_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(SpanSourceError) as info:
        from_file(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpanSourceError, match=re.escape(f"cannot read {tmp_path}")):
        from_file(tmp_path)


@pytest.mark.parametrize(
    "bad_line",
    [
        "not json at all",
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]',  # cut short
        "[1, 2, 3]",
        '{"something": "else"}',
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]}',
    ],
)
def test_malformed_line_names_path_and_line(
    written: tuple[Path, list[ReadableSpan]], bad_line: str
) -> None:
    path, _ = written
    good = path.read_text().splitlines()
    path.write_text(f"{good[0]}\n{bad_line}\n{good[1]}\n")
    with pytest.raises(
        SpanSourceError, match=rf"^{re.escape(str(path))}:2: not an OTLP JSON line$"
    ):
        from_file(path)


def test_undecodable_bytes_name_path_and_line(
    written: tuple[Path, list[ReadableSpan]],
) -> None:
    path, _ = written
    good = path.read_bytes().splitlines()
    path.write_bytes(good[0] + b"\n" + good[1] + b"\n\xff\xfe\x00garbage\n")
    with pytest.raises(
        SpanSourceError, match=rf"^{re.escape(str(path))}:3: not an OTLP JSON line$"
    ):
        from_file(path)


def test_blank_lines_are_skipped(written: tuple[Path, list[ReadableSpan]]) -> None:
    path, _ = written
    lines = path.read_text().splitlines()
    path.write_text(f"\n{lines[0]}\n   \n{lines[1]}\n\n")
    assert len(from_file(path)) == 4


def test_empty_file_has_no_spans(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text("")
    assert from_file(path) == []


# --- Jaeger ------------------------------------------------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
JAEGER_PAYLOAD: dict[str, Any] = {
    "data": [
        {
            "traceID": TRACE_ID,
            "spans": [
                {
                    "traceID": TRACE_ID,
                    "spanID": "00f067aa0ba902b7",
                    "operationName": "ingress",
                    "references": [],
                    "startTime": 1_700_000_000_000_000,
                    "duration": 410_000,
                    "tags": [
                        {"key": "span.kind", "type": "string", "value": "server"},
                        {"key": "http.status_code", "type": "string", "value": "200"},
                    ],
                    "logs": [],
                    "processID": "p1",
                    "warnings": None,
                },
                {
                    "traceID": TRACE_ID,
                    "spanID": "a1b2c3d4e5f60718",
                    "operationName": "GET /v1/offers/bike",
                    "references": [
                        {"refType": "CHILD_OF", "traceID": TRACE_ID, "spanID": "00f067aa0ba902b7"}
                    ],
                    "startTime": 1_700_000_000_001_000,
                    "duration": 400_000,
                    "tags": [
                        {"key": "span.kind", "type": "string", "value": "server"},
                        {"key": "http.route", "type": "string", "value": "/v1/offers/bike"},
                        {"key": "pricing.upstream_calls", "type": "int64", "value": 3},
                    ],
                    "logs": [],
                    "processID": "p2",
                },
                {
                    "traceID": TRACE_ID,
                    "spanID": "0000000000000abc",
                    "operationName": "GET /vehicles/v1/nearby",
                    "references": [
                        {
                            "refType": "FOLLOWS_FROM",
                            "traceID": TRACE_ID,
                            "spanID": "00f067aa0ba902b7",
                        },
                        {
                            "refType": "CHILD_OF",
                            "traceID": TRACE_ID,
                            "spanID": "a1b2c3d4e5f60718",
                        },
                    ],
                    "startTime": 1_700_000_000_002_000,
                    "duration": 383_000,
                    "tags": [
                        {"key": "span.kind", "type": "string", "value": "client"},
                        {"key": "server.port", "type": "int64", "value": 8200},
                        {"key": "gevent.network.duration", "type": "float64", "value": 0.11},
                        {"key": "gevent.scheduling.delay", "type": "float64", "value": 0.2728},
                        {"key": "error", "type": "bool", "value": False},
                        {
                            "key": "gevent.scheduling.culprits",
                            "type": "string",
                            "value": json.dumps(CULPRITS),
                        },
                        {"key": "note", "type": "string", "value": "[not json"},
                    ],
                    "logs": [],
                    "processID": "p2",
                },
            ],
            "processes": {
                "p1": {"serviceName": "envoy", "tags": []},
                "p2": {
                    "serviceName": "pricingservice",
                    "tags": [{"key": "pricing.pool", "type": "string", "value": "io"}],
                },
            },
        }
    ],
    "total": 0,
    "limit": 0,
    "offset": 0,
    "errors": None,
}


def test_jaeger_payload_becomes_spans() -> None:
    spans = {s.span_id: s for s in _jaeger_spans(JAEGER_PAYLOAD["data"])}
    assert set(spans) == {"00f067aa0ba902b7", "a1b2c3d4e5f60718", "0000000000000abc"}
    envoy = spans["00f067aa0ba902b7"]
    assert envoy == Span(
        trace_id=TRACE_ID,
        span_id="00f067aa0ba902b7",
        parent_id=None,
        service="envoy",
        name="ingress",
        kind="server",
        start_us=1_700_000_000_000_000,
        duration_us=410_000,
        attributes={"http.status_code": "200"},
    )
    server = spans["a1b2c3d4e5f60718"]
    assert (server.service, server.kind, server.parent_id) == (
        "pricingservice",
        "server",
        "00f067aa0ba902b7",
    )
    assert server.attributes["pricing.upstream_calls"] == 3
    client = spans["0000000000000abc"]
    assert client.kind == "client"
    assert client.parent_id == "a1b2c3d4e5f60718"  # CHILD_OF, not FOLLOWS_FROM
    assert client.name == "GET /vehicles/v1/nearby"
    assert client.duration_us == 383_000
    assert "span.kind" not in client.attributes
    assert client.attributes["gevent.scheduling.culprits"] == CULPRITS
    assert client.attributes["gevent.network.duration"] == 0.11
    assert client.attributes["server.port"] == 8200
    assert client.attributes["error"] is False
    assert client.attributes["note"] == "[not json"  # kept as is


def test_jaeger_span_without_kind_or_process_is_internal_of_unknown_service() -> None:
    trace = {"spans": [{"traceID": TRACE_ID, "spanID": "1" * 16, "processID": "gone"}]}
    (span,) = _jaeger_spans([trace])
    assert (span.kind, span.service, span.name, span.parent_id) == ("internal", "?", "", None)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("trace_id", [None, TRACE_ID])
def test_unreachable_jaeger_is_one_clear_error(trace_id: str | None) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(
        SpanSourceError, match="^" + re.escape(f"cannot reach Jaeger at {url}: ")
    ) as info:
        from_jaeger(url, trace_id=trace_id, timeout_s=2)
    assert "\n" not in str(info.value)
