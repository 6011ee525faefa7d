"""The OTLP exporters (``tracing.otlp_exporters``) send protobuf written straight from the
queue's records (``tracing.export.encode_otlp_protobuf``): what the SDK's exporter sent
for the SDK spans built from the same records, decoded and compared field by field, and
byte for byte; over HTTP through the SDK's own client, and as the message the gRPC stub
sends. Shapes of every kind are compared in ``test_export_encoding.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from bench import span_cost
from tests.unit.support.spans import sdk_protobuf
from tracing.export import encode_otlp_protobuf, readable_spans
from tracing.otlp_exporters import HttpRecordExporter, grpc_record_exporter
from tracing.span_records import RequestRecord


@pytest.fixture(scope="module")
def queued() -> list[Any]:
    """What sampled offers leave on the export queue: records (built off the hub), and
    SDK spans (traced live) beside them, as a user span would be."""
    items = span_cost.sampled_request_queue(4)
    assert {type(item) for item in items} > {RequestRecord}
    return items


def spans_of(request: ExportTraceServiceRequest) -> list[Any]:
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def test_records_encode_to_what_the_sdk_sends_for_their_sdk_spans(queued: list[Any]) -> None:
    expected = ExportTraceServiceRequest.FromString(sdk_protobuf(readable_spans(queued)))
    sent = ExportTraceServiceRequest.FromString(encode_otlp_protobuf(queued))
    assert len(spans_of(sent)) == 16
    # Field by field (ids, names, kinds, parents, times, attributes, events, status,
    # flags, resource, scope, dropped counts), span by span for a readable failure.
    for ours, theirs in zip(spans_of(sent), spans_of(expected), strict=True):
        assert ours == theirs
    assert sent == expected
    assert encode_otlp_protobuf(queued) == sdk_protobuf(readable_spans(queued))


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps what it is sent."""

    bodies: list[tuple[str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append((self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    bodies: list[tuple[str, bytes]] = []
    handler = type("Handler", (Collector,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_the_http_exporter_sends_the_records_through_the_sdks_client(
    queued: list[Any], collector: tuple[str, list[tuple[str, bytes]]]
) -> None:
    """Fails if the SDK exporter's private parts it relies on change."""
    endpoint, bodies = collector
    exporter = HttpRecordExporter(encode_otlp_protobuf, endpoint=endpoint)
    try:
        assert exporter.export(queued) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    ((content_type, body),) = bodies
    assert content_type == "application/x-protobuf"
    assert body == sdk_protobuf(readable_spans(queued))


def test_a_batch_over_the_size_limit_is_dropped_before_sending(
    queued: list[Any], collector: tuple[str, list[tuple[str, bytes]]]
) -> None:
    endpoint, bodies = collector
    exporter = HttpRecordExporter(encode_otlp_protobuf, endpoint=endpoint, max_request_size=100)
    try:
        assert exporter.export(queued) is SpanExportResult.FAILURE
        exporter.shutdown()
        assert exporter.export(queued) is SpanExportResult.FAILURE  # after shutdown
    finally:
        assert bodies == []


def test_the_grpc_exporter_sends_the_sdks_message_for_the_records(queued: list[Any]) -> None:
    exporter = grpc_record_exporter(encode_otlp_protobuf, "http://127.0.0.1:9")
    try:
        assert exporter.takes_records
        message = exporter._translate_data(queued)
        assert message.SerializePartialToString() == sdk_protobuf(readable_spans(queued))
    finally:
        exporter.shutdown()
