"""Spans the tracing unit tests build and compare: a delayed call's and a request's
measured timing (the wait spans are drawn from them), and the SDK's own OTLP encoding that
the span file's encoder and the built records are checked against."""

from __future__ import annotations

import base64
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from tracing.timing.call_state import CallTiming
from tracing.timing.server_timing import RequestTiming

MS = 1_000_000
START = 1_700_000_000_000_000_000
HOG = "POST /v1/offers/rideshare"


def delayed_call(
    network_ms: float = 60, delay_ms: float = 90, arrived_ms: float = 61
) -> CallTiming:
    return CallTiming(
        duration_s=0.155,
        network_s=network_ms / 1000,
        scheduling_delay_s=delay_ms / 1000,
        blocked_s=0.0,
        culprits=MappingProxyType({HOG: 0.085, "<hub>": 0.004}),
        cpu_wait_s=0.02,
        reply_arrived_unix_ns=START + round(arrived_ms * MS),
    )


def request_timing(inbound_ms: float) -> RequestTiming:
    return RequestTiming(
        arrival_unix_ns=START,
        start_unix_ns=START + round(inbound_ms * MS),
        end_unix_ns=START + 300 * MS,
        inbound_delay_s=inbound_ms / 1000,
        inbound_cpu_wait_s=0.1,
        inbound_culprits=MappingProxyType({HOG: 0.25}),
        duration_s=0.3 - inbound_ms / 1000,
        running_s=0.01,
        waiting_s=0.29 - inbound_ms / 1000,
    )


def sdk_encoding(spans: list[ReadableSpan]) -> dict[str, Any]:
    """What the span file held before: the SDK's OTLP encoder, read back by protobuf's
    canonical JSON mapping, ids turned from base64 to hex."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                items = [span, *span.get("links", ())]
                for item in items:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64decode(item[key]).hex()
    return document


def sdk_protobuf(spans: list[ReadableSpan]) -> bytes:
    """What the SDK's OTLP exporters send for *spans*: its encoder's request, serialized."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans).SerializePartialToString()  # type: ignore[no-any-return]
