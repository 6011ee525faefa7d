"""The SDK's OTLP span exporters, fed protobuf written straight from the export queue's
records (``tracing.export.encode_otlp_protobuf``, given as *encode*): they take the
processor's records as they are (``takes_records``), with SDK spans beside them, and no
SDK span is built for them. Sending, retries, compression, headers, the size limit and
the exporters' own metrics stay the SDK's; the transport is the one
``OTEL_EXPORTER_OTLP_PROTOCOL`` names (``tracing.export.make_exporter``).

They rely on private parts of the SDK's exporters (the HTTP exporter's client, size check
and metrics; the gRPC one's ``_translate_data``): neither takes encoded bytes through a
public hook. ``tests/unit/tracing/test_otlp_protobuf.py`` fails if those change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http._common import (
    RequestPayloadTooLargeError,
    _is_request_too_large,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

from tracing import otlp_protobuf

log = logging.getLogger(__name__)

#: A batch of SDK spans and records -> its ExportTraceServiceRequest bytes.
Encode = Callable[[Sequence[Any]], bytes]


class HttpRecordExporter(OTLPSpanExporter):
    """OTLP/HTTP (protobuf): the SDK's exporter, its batches encoded by *encode*."""

    takes_records = True
    span_encoder = staticmethod(otlp_protobuf.span_encoder)

    def __init__(self, encode: Encode, **options: Any) -> None:
        super().__init__(**options)
        self.encode = encode

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        if self._shutdown:
            log.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                data = self.encode(spans)
            except Exception as error:
                log.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if _is_request_too_large(data, self._max_request_size):
                log.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size %d",
                    len(data),
                    self._max_request_size,
                )
                result.error = RequestPayloadTooLargeError(
                    f"Serialized span request size {len(data)} bytes exceeds "
                    f"max_request_size {self._max_request_size} bytes."
                )
                return SpanExportResult.FAILURE
            sent = self._client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


def grpc_record_exporter(encode: Encode, endpoint: str | None) -> Any:
    """OTLP/gRPC: the SDK's exporter, its batches encoded by *encode* and parsed into
    the request message its stub sends (protobuf's C parser: far cheaper than building
    the message span by span). gRPC is imported only when it is chosen."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    class GrpcRecordExporter(GrpcSpanExporter):
        takes_records = True
        span_encoder = staticmethod(otlp_protobuf.span_encoder)

        def _translate_data(self, data: Sequence[Any]) -> ExportTraceServiceRequest:
            return ExportTraceServiceRequest.FromString(encode(data))

    return GrpcRecordExporter(endpoint=endpoint)
