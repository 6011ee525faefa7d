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
from tracing.readback.spans import SpanSourceError, from_file, from_jaeger, lookback_s

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


class FakeJaeger:
    """Jaeger v2's /api/v3/traces on loopback: answers what the test sets, records
    what it was asked."""

    def __init__(self) -> None:
        import http.server
        import threading

        owner = self
        self.status, self.body, self.paths = 200, "", []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.paths.append(self.path)
                data = owner.body.encode()
                self.send_response(owner.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def fake_jaeger() -> Any:
    jaeger = FakeJaeger()
    yield jaeger
    jaeger.server.shutdown()


def test_jaeger_and_the_file_are_read_by_one_reader(
    written: tuple[Path, list[ReadableSpan]], fake_jaeger: FakeJaeger
) -> None:
    """Jaeger v2 answers OTLP JSON, wrapped in {"result": ...}: the file's lines as
    Jaeger would serve them give the same spans (a streamed answer, one object per
    chunk, too)."""
    path, _ = written
    lines = path.read_text().splitlines()
    fake_jaeger.body = "\n".join(json.dumps({"result": json.loads(line)}) for line in lines)
    from_api = from_jaeger(fake_jaeger.url, service="pricingservice", limit=7, lookback="15m")
    assert from_api == from_file(path)
    (asked,) = fake_jaeger.paths
    assert asked.startswith("/api/v3/traces?")
    query = dict(p.split("=", 1) for p in asked.split("?", 1)[1].split("&"))
    assert query["query.service_name"] == "pricingservice" and query["query.num_traces"] == "7"
    assert query["query.start_time_min"] < query["query.start_time_max"]


def test_one_trace_from_jaeger(
    written: tuple[Path, list[ReadableSpan]], fake_jaeger: FakeJaeger
) -> None:
    path, first = written
    trace_id = hexid(first[0].context.trace_id, 32)
    fake_jaeger.body = json.dumps({"result": json.loads(path.read_text().splitlines()[1])})
    spans = from_jaeger(fake_jaeger.url, trace_id=trace_id)
    assert {s.trace_id for s in spans} == {trace_id}
    assert fake_jaeger.paths == [f"/api/v3/traces/{trace_id}"]


def test_a_trace_jaeger_does_not_have_is_one_clear_error_and_an_empty_search_no_spans(
    fake_jaeger: FakeJaeger,
) -> None:
    fake_jaeger.status = 404
    fake_jaeger.body = '{"error":{"httpCode":404,"message":"No traces found"}}'
    with pytest.raises(SpanSourceError, match=f"trace {TRACE_ID} not found in Jaeger"):
        from_jaeger(fake_jaeger.url, trace_id=TRACE_ID)
    assert from_jaeger(fake_jaeger.url, service="nobody") == []


def test_a_bad_lookback_is_one_clear_error(fake_jaeger: FakeJaeger) -> None:
    with pytest.raises(SpanSourceError, match="lookback 'soon'"):
        from_jaeger(fake_jaeger.url, lookback="soon")
    assert lookback_s("15m") == 900 and lookback_s("2h") == 7200 and lookback_s("1d") == 86400


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
