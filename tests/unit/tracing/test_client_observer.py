"""Client spans of upstream calls: names, HTTP attributes, traceparent, status, timing."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tracing import attributes
from tracing.client import (
    UPSTREAM_ATTR,
    RequestTotals,
    TracingCallObserver,
    request_totals,
    server_span_attributes,
)

NEARBY = "/vehicles/v1/nearby?lat=37.77&lng=-122.42&radius_m=500"


@pytest.fixture
def memory() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(memory: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider
    provider.shutdown()


def observer(provider: TracerProvider, *, measure: bool = False) -> TracingCallObserver:
    return TracingCallObserver(provider.get_tracer("test"), measure=measure)


def only_span(memory: InMemorySpanExporter) -> ReadableSpan:
    (span,) = memory.get_finished_spans()
    return span


def test_client_span_is_named_after_method_and_path_without_query(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    with observer(provider).call("vehicles", "GET", "127.0.0.1", 8200, NEARBY) as observed:
        observed.status = 200
    span = only_span(memory)
    assert span.name == "GET /vehicles/v1/nearby"
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        "http.request.method": "GET",
        "server.address": "127.0.0.1",
        "server.port": 8200,
        "url.path": "/vehicles/v1/nearby",
        UPSTREAM_ATTR: "vehicles",
        "http.response.status_code": 200,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_traceparent_names_the_client_span(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    with observer(provider).call("routing", "POST", "upstream", 80, "/routing/v1/route") as obs:
        headers = dict(obs.headers)
    span = only_span(memory)
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00"
    assert trace_id == format(span.context.trace_id, "032x")
    assert span_id == format(span.context.span_id, "016x")
    assert int(flags, 16) & 0x01  # sampled (the SDK may also set the W3C "random" bit)


def test_client_span_is_a_child_of_the_current_server_span(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("GET /v1/offers/bike", kind=SpanKind.SERVER) as server,
        observer(provider).call("vehicles", "GET", "h", 1, NEARBY),
    ):
        pass
    client = next(s for s in memory.get_finished_spans() if s.kind is SpanKind.CLIENT)
    assert client.parent is not None
    assert client.parent.span_id == server.get_span_context().span_id
    assert client.context.trace_id == server.get_span_context().trace_id


@pytest.mark.parametrize("status", [500, 503, 504])
def test_5xx_marks_the_span_as_error(
    provider: TracerProvider, memory: InMemorySpanExporter, status: int
) -> None:
    with observer(provider).call("vehicles", "GET", "h", 1, NEARBY) as observed:
        observed.status = status
    span = only_span(memory)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["http.response.status_code"] == status


def test_no_status_when_the_call_never_got_an_answer(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    with observer(provider).call("vehicles", "GET", "h", 1, NEARBY):
        pass
    assert "http.response.status_code" not in (only_span(memory).attributes or {})


def test_exception_is_recorded_and_reraised(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    with (
        pytest.raises(TimeoutError, match="read timed out"),
        observer(provider).call("promotions", "GET", "h", 1, "/promotions/v1/active"),
    ):
        raise TimeoutError("read timed out")
    span = only_span(memory)
    assert span.status.status_code is StatusCode.ERROR
    (event,) = [e for e in span.events if e.name == "exception"]
    assert (event.attributes or {})["exception.type"] == "TimeoutError"
    assert (event.attributes or {})["exception.message"] == "read timed out"
    assert span.end_time is not None


def test_without_measure_there_are_no_timing_attributes(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    totals = RequestTotals()
    token = request_totals.set(totals)
    try:
        with observer(provider, measure=False).call("vehicles", "GET", "h", 1, NEARBY):
            pass
    finally:
        request_totals.reset(token)
    attrs = only_span(memory).attributes or {}
    assert attributes.NETWORK_DURATION not in attrs
    assert attributes.SCHEDULING_DELAY not in attrs
    assert totals.calls == 0


def test_measure_sets_network_and_scheduling_attributes(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    # No gevent instrumentor installed: the measurement still runs and reports numbers.
    with observer(provider, measure=True).call("vehicles", "GET", "h", 1, NEARBY) as observed:
        observed.status = 200
    attrs = only_span(memory).attributes or {}
    for key in (attributes.NETWORK_DURATION, attributes.SCHEDULING_DELAY):
        value = attrs[key]
        assert isinstance(value, int | float), key
        assert value >= 0, key
    assert attrs["http.response.status_code"] == 200


def test_measure_adds_each_call_to_the_request_totals(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    totals = RequestTotals()
    token = request_totals.set(totals)
    try:
        obs = observer(provider, measure=True)
        for upstream in ("vehicles", "routing", "promotions"):
            with obs.call(upstream, "GET", "h", 1, f"/{upstream}/v1/x"):
                pass
    finally:
        request_totals.reset(token)
    assert totals.calls == 3
    assert totals.network_s >= 0
    assert totals.scheduling_delay_s >= 0
    spans = memory.get_finished_spans()
    per_call: list[float] = [
        float((s.attributes or {})[attributes.NETWORK_DURATION])  # type: ignore[arg-type]
        for s in spans
    ]
    assert totals.network_s == pytest.approx(math.fsum(per_call))
    assert server_span_attributes(totals) == {
        attributes.SCHEDULING_DELAY: totals.scheduling_delay_s,
        attributes.NETWORK_DURATION: totals.network_s,
        "pricing.upstream_calls": 3,
        attributes.SLOW: totals.scheduling_delay_s >= attributes.SLOW_SCHEDULING_DELAY_S,
    }


@pytest.mark.parametrize(
    ("delay_s", "slow"),
    [(0.0, False), (0.0499, False), (0.05, True), (0.3, True)],
)
def test_server_span_is_flagged_slow_from_the_delay_threshold(delay_s: float, slow: bool) -> None:
    totals = RequestTotals()
    totals.calls = 3
    totals.scheduling_delay_s = delay_s
    assert server_span_attributes(totals)[attributes.SLOW] is slow


def test_measure_without_request_totals_is_fine(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    assert request_totals.get() is None
    with observer(provider, measure=True).call("vehicles", "GET", "h", 1, NEARBY):
        pass
    assert attributes.NETWORK_DURATION in (only_span(memory).attributes or {})


def test_measured_call_that_raises_still_ends_its_measurement(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    totals = RequestTotals()
    token = request_totals.set(totals)
    try:
        with (
            pytest.raises(ConnectionResetError),
            observer(provider, measure=True).call("vehicles", "GET", "h", 1, NEARBY),
        ):
            raise ConnectionResetError
    finally:
        request_totals.reset(token)
    # The autouse fixture checks that no measurement was left in progress.
    assert totals.calls == 1
    assert attributes.SCHEDULING_DELAY in (only_span(memory).attributes or {})
