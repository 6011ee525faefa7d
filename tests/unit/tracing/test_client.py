"""Client spans of upstream calls: names, HTTP attributes, traceparent, status, timing."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import nullcontext

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.samples import RIDE_ROUTE
from tests.unit.support.timing import timing_path
from tracing import attributes
from tracing.client import (
    RequestTotals,
    TracingCallObserver,
    request_totals,
    timing_attributes,
)
from tracing.timing.call_state import CallState
from tracing.timing.histogram import Histogram

HOG = RIDE_ROUTE
MS = 1_000_000
NEARBY = "/vehicles/v1/nearby?lat=37.77&lng=-122.42&radius_m=500"


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs against the compiled observer (``_client_native.c``) and the
    Python reference (``_Call``)."""
    with timing_path(request.param == "compiled"):
        yield request.param


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
        "url.full": f"http://127.0.0.1:8200{NEARBY}",
        "pricing.upstream": "vehicles",
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
    assert (span.attributes or {})["error.type"] == str(status)


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
    assert (span.attributes or {})["error.type"] == "timeout"
    assert span.end_time is not None


class Refused(Exception):
    reason = "refused"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Refused("connect"), "refused"),  # pricing.upstream.httpclient's reason, by shape
        (ValueError("x"), "ValueError"),
        (KeyError("x"), "KeyError"),
    ],
)
def test_error_type_is_the_reason_or_the_class_name(
    provider: TracerProvider, memory: InMemorySpanExporter, exc: Exception, expected: str
) -> None:
    with pytest.raises(type(exc)), observer(provider).call("vehicles", "GET", "h", 1, NEARBY):
        raise exc
    assert (only_span(memory).attributes or {})["error.type"] == expected


def test_a_successful_call_has_no_error_type(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    with observer(provider).call("vehicles", "GET", "h", 1, NEARBY) as observed:
        observed.status = 200
    assert "error.type" not in (only_span(memory).attributes or {})


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
    assert [r.upstream for r in totals.records] == ["vehicles", "routing", "promotions"]
    spans = memory.get_finished_spans()
    per_call: list[float] = [
        float((s.attributes or {})[attributes.NETWORK_DURATION])  # type: ignore[arg-type]
        for s in spans
    ]
    recorded = [t.network_s for _, t in totals.timed()]
    assert math.fsum(recorded) == pytest.approx(math.fsum(per_call))


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


def test_timing_attributes_use_the_named_constants() -> None:
    state = CallState()
    state.start_ns = 0
    state.on_socket_wait(0, 30 * MS, 10 * MS)
    state.culprits_ns = {HOG: 15 * MS, "<hub>": 5 * MS}
    state.cpu_wait_ns = 4 * MS
    attrs = timing_attributes(state.to_timing(40 * MS))
    assert attrs == {
        attributes.NETWORK_DURATION: pytest.approx(0.010),
        attributes.SCHEDULING_DELAY: pytest.approx(0.020),
        attributes.SCHEDULING_CPU_WAIT: pytest.approx(0.004),
        attributes.BLOCKED_DURATION: 0.0,
        attributes.SCHEDULING_CULPRITS: [f"{HOG}=0.015000", "<hub>=0.005000"],
    }


def test_an_unsampled_request_gets_no_client_span_but_passes_its_trace_on(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    """Envoy did not sample the trace: the call makes no span (the cheap path), sends
    the same trace id on, unsampled, and is still measured for histograms and a possible
    slow export."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    parent = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(0))
    totals = RequestTotals()
    token = request_totals.set(totals)
    try:
        with (
            trace.use_span(NonRecordingSpan(parent)),
            observer(provider, measure=True).call("vehicles", "GET", "h", 1, NEARBY) as obs,
        ):
            obs.status = 200
    finally:
        request_totals.reset(token)
    assert memory.get_finished_spans() == ()
    assert obs.headers["traceparent"] == f"00-{0xABC:032x}-{0xDEF:016x}-00"
    (record,) = totals.records
    assert record.status == 200 and record.timing is not None
    assert record.end_unix_ns >= record.start_unix_ns


def test_the_reply_arrival_is_an_event_on_the_client_span(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    from tracing.client import UpstreamCall, add_call_events

    state = CallState()
    state.start_ns = 0
    state.reply_arrived_unix_ns = 1_700_000_000_123_456_789
    record = UpstreamCall("vehicles", "GET", "h", 1, NEARBY, 1_700_000_000_000_000_000)
    record.timing = state.to_timing(40 * MS)
    span = provider.get_tracer("t").start_span("GET /x")
    add_call_events(span, record)
    span.end()
    (event,) = only_span(memory).events
    assert event.name == attributes.EVENT_REPLY_IN_KERNEL
    assert event.timestamp == 1_700_000_000_123_456_789


def test_an_unsampled_request_passes_its_traceparent_on_without_a_span(
    provider: TracerProvider, memory: InMemorySpanExporter
) -> None:
    incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    token = request_totals.set(RequestTotals(incoming))
    try:
        with observer(provider).call("vehicles", "GET", "127.0.0.1", 8200, NEARBY) as observed:
            observed.status = 200
    finally:
        request_totals.reset(token)
    assert observed.headers["traceparent"] == incoming
    assert memory.get_finished_spans() == ()


# --- the compiled observer against the reference --------------------------------------


class FakeMetrics:
    """A CallMetrics with the reference's histograms; *fail*: call_histograms raises."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.histograms: dict[str, tuple[Histogram, Histogram, Histogram]] = {}

    def call_histograms(self, upstream: str) -> tuple[Histogram, Histogram, Histogram]:
        if self.fail:
            raise RuntimeError("no histograms")
        if upstream not in self.histograms:
            self.histograms[upstream] = (Histogram([0.001]), Histogram([0.001]), Histogram([1.0]))
        return self.histograms[upstream]

    def observe_call(self, upstream: str, timing: object) -> None:
        network, delay, cpu_wait = self.call_histograms(upstream)
        network.observe(timing.network_s)  # type: ignore[attr-defined]
        delay.observe(timing.scheduling_delay_s)  # type: ignore[attr-defined]
        cpu_wait.observe(timing.cpu_wait_s)  # type: ignore[attr-defined]

    def counts(self) -> dict[str, list[list[int]]]:
        return {u: [h.counts for h in hs] for u, hs in self.histograms.items()}


UNSAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
# (request, status, raised, measure): how each call of the recorded sequence goes. The
# request: none (no RequestTotals), unsampled (Envoy's traceparent, flag 00), or a live
# sampled span (the reference's path in both).
SEQUENCE: list[tuple[str, int | None, type[Exception] | None, bool]] = [
    ("unsampled", 200, None, True),
    ("unsampled", 404, None, True),
    ("unsampled", 503, None, False),
    ("unsampled", None, None, True),
    ("unsampled", 200, ConnectionResetError, True),
    ("unsampled", None, TimeoutError, True),
    ("none", 200, None, True),
    ("none", 500, ValueError, False),
    ("sampled", 200, None, True),
    ("sampled", 502, None, True),
    ("unsampled", 302, None, True),
]


def replay(
    provider: TracerProvider, metrics: FakeMetrics
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Each call of SEQUENCE made, on a fresh observer: (what the client saw, what was
    recorded) per call."""
    from opentelemetry import trace

    seen: list[tuple[object, ...]] = []
    records: list[tuple[object, ...]] = []
    for i, (request, status, raised, measure) in enumerate(SEQUENCE):
        obs = TracingCallObserver(provider.get_tracer("t"), measure=measure, metrics=metrics)
        totals = RequestTotals(UNSAMPLED if request == "unsampled" else None)
        token = request_totals.set(totals if request != "none" else None)
        tracer = provider.get_tracer("t")
        try:
            with (
                tracer.start_as_current_span("server")
                if request == "sampled"
                else trace.use_span(trace.INVALID_SPAN),
                pytest.raises(raised) if raised else nullcontext(),
                obs.call(f"up{i % 3}", "GET", "h", 80 + i, f"/p/{i}?q=1") as call,
            ):
                call.status = status
                if raised:
                    raise raised("boom")
        finally:
            request_totals.reset(token)
        headers = dict(call.headers)
        seen.append((request, "traceparent" in headers, headers.get("traceparent") == UNSAMPLED))
        for record in totals.records:
            timing = record.timing
            assert timing is not None
            records.append(
                (
                    record.upstream, record.method, record.host, record.port, record.path,
                    record.status, record.error_type, record.span_id,
                    type(record.exception).__name__,
                    record.end_unix_ns >= record.start_unix_ns > 0,
                    timing.duration_s >= 0, timing.network_s, timing.scheduling_delay_s,
                    timing.blocked_s, dict(timing.culprits), timing.socket_waits,
                    timing.cpu_wait_s,
                )
            )  # fmt: skip
    return seen, records


def test_the_compiled_observer_records_what_the_reference_does(
    provider: TracerProvider, memory: InMemorySpanExporter, implementation: str
) -> None:
    """The same recorded sequence of calls through both: what went upstream, the records
    each request kept, the histograms and the spans are the same (times aside: a call
    with no I/O has 0 s of network and delay in both)."""
    results = {}
    for name in ("reference", "compiled"):
        memory.clear()
        metrics = FakeMetrics()
        with timing_path(name == "compiled"):
            seen, records = replay(provider, metrics)
        spans = sorted(
            (s.name, sorted((s.attributes or {}).keys()), s.status.status_code.name)
            for s in memory.get_finished_spans()
        )
        results[name] = (seen, records, metrics.counts(), spans)
    reference, compiled = results["reference"], results["compiled"]
    assert compiled[0] == reference[0]
    assert compiled[1] == reference[1]
    assert compiled[2] == reference[2]
    assert compiled[3] == reference[3]
    # Each kind of call was there: the measured calls of a request (six unsampled, two
    # sampled) recorded; client spans for the sampled ones and the two outside any
    # request (the tracer's sampler decides), and the two server spans.
    assert len(reference[1]) == 8 and len(reference[3]) == 6


def test_the_compiled_observer_is_the_one_that_runs(
    provider: TracerProvider, implementation: str
) -> None:
    from tracing.client import _Call, _CompiledCall

    made = observer(provider, measure=True).call("vehicles", "GET", "h", 1, NEARBY)
    if implementation == "compiled":
        assert type(made) is _CompiledCall
        assert type(_CompiledCall.__dict__["__enter__"]).__name__ == "method_descriptor"
        assert type(_CompiledCall.__dict__["__exit__"]).__name__ == "method_descriptor"
    else:
        assert type(made) is _Call


def test_a_failure_after_the_call_is_swallowed_and_logged(
    provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """The metrics failing (here: no histograms) does not break the call: the error is
    logged, as the reference's try logs it, and the record stops where it failed."""
    totals = RequestTotals(UNSAMPLED)
    token = request_totals.set(totals)
    try:
        obs = TracingCallObserver(
            provider.get_tracer("t"), measure=True, metrics=FakeMetrics(fail=True)
        )
        with obs.call("vehicles", "GET", "h", 1, NEARBY) as call:
            call.status = 200
    finally:
        request_totals.reset(token)
    (logged,) = [r for r in caplog.records if "client span attributes" in r.getMessage()]
    assert logged.exc_info is not None and "no histograms" in str(logged.exc_info[1])
    assert totals.records == []  # the reference's try ended before the append
    assert call.timing is not None
