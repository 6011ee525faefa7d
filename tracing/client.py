"""Client spans for upstream calls, each carrying its network / scheduling-delay split.

The io pool calls its upstreams with `pricing.upstream.httpclient` (chosen for CPU per
call; no contrib instrumentation exists for it), so this observer creates the
client spans itself, following the OpenTelemetry HTTP client conventions, and
injects W3C `traceparent` into the request.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Protocol

import gevent
from opentelemetry import propagate, trace
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_METHOD,
    HTTP_RESPONSE_STATUS_CODE,
)
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.semconv.attributes.url_attributes import URL_FULL, URL_PATH
from opentelemetry.trace import SpanKind, Status, StatusCode

from tracing import attributes
from tracing.timing import native
from tracing.timing.call_state import TOP_CULPRITS, top_culprits
from tracing.timing.call_timing import CallMeasurement, CallTiming, bound_calls
from tracing.timing.hook_errors import swallow
from tracing.wait_spans import call_wait_spans, start_wait_spans


class UpstreamCall:
    """One measured upstream call of a request: enough to observe its histograms and,
    for a slow request that was not sampled, to export its client span afterwards."""

    __slots__ = (
        "end_unix_ns",
        "error_type",
        "exception",
        "host",
        "method",
        "path",
        "port",
        "span_id",
        "start_unix_ns",
        "status",
        "timing",
        "upstream",
    )

    def __init__(
        self, upstream: str, method: str, host: str, port: int, path: str, start_unix_ns: int
    ) -> None:
        self.upstream = upstream
        self.method = method
        self.host = host
        self.port = port
        self.path = path
        self.start_unix_ns = start_unix_ns
        self.end_unix_ns = start_unix_ns
        self.status: int | None = None
        self.timing: CallTiming | None = None
        #: error.type: the status code of a 4xx/5xx reply, or why the call failed.
        self.error_type: str | None = None
        #: For a request whose spans are built at its end (``SampledTrace``): the client
        #: span's id, sent upstream in ``traceparent`` as the call starts (0: none), and
        #: what the call raised, for the span's exception event.
        self.span_id = 0
        self.exception: BaseException | None = None


class SampledTrace:
    """A request Envoy sampled whose spans are built when it ends, from what was measured
    (``tracing.span_records``), instead of live OpenTelemetry spans. Its server span's id
    is chosen as it starts; each upstream call gets its client span's id as it starts, and
    sends it in ``traceparent`` (with the incoming ``tracestate`` and ``baggage`` as they
    came)."""

    __slots__ = (
        "baggage",
        "flags",
        "new_span_id",
        "parent_span_id",
        "span_id",
        "trace_hex",
        "trace_id",
        "tracestate",
    )

    def __init__(
        self,
        trace_hex: str,
        parent_span_id: int,
        flags: int,
        new_span_id: Callable[[], int],
        tracestate: str | None = None,
        baggage: str | None = None,
    ) -> None:
        self.trace_hex = trace_hex
        self.trace_id = int(trace_hex, 16)
        self.parent_span_id = parent_span_id
        self.flags = flags
        self.new_span_id = new_span_id
        self.span_id = new_span_id()
        self.tracestate = tracestate
        self.baggage = baggage

    def inject(self, headers: dict[str, str], span_id: int) -> None:
        """The headers that carry a client span's context upstream."""
        headers["traceparent"] = f"00-{self.trace_hex}-{span_id:016x}-{self.flags:02x}"
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        if self.baggage:
            headers["baggage"] = self.baggage


class RequestTotals:
    """The measured upstream calls of one server request; for a request Envoy did not
    sample (no server span: ``tracing.server_span``), its incoming traceparent; for one
    whose spans are built at its end, its ``SampledTrace``. *offset_ns*: the request
    measurement's realtime - monotonic offset, which its calls' measurements reuse
    (``begin_call``)."""

    __slots__ = ("offset_ns", "records", "sampled", "traceparent")

    def __init__(
        self,
        traceparent: str | None = None,
        offset_ns: int | None = None,
        sampled: SampledTrace | None = None,
    ) -> None:
        self.records: list[UpstreamCall] = []
        self.traceparent = traceparent
        self.offset_ns = offset_ns
        self.sampled = sampled

    @property
    def calls(self) -> int:
        return len(self.records)

    def timed(self) -> list[tuple[str, CallTiming]]:
        return [(r.upstream, r.timing) for r in self.records if r.timing is not None]


# Set per request by the server side (tracing.server); fan-out greenlets run in a
# copy of the request's context, so they see, and add to, the same object.
request_totals: ContextVar[RequestTotals | None] = ContextVar("request_totals", default=None)


#: A call's measurement begun and finished: ``call_timing.bound_calls()``'s pair.
MeasureCalls = tuple[Callable[[int | None], Any], Callable[[Any], CallTiming]]


class TracingCallObserver:
    """A `pricing.upstream.httpclient.CallObserver` (by shape: tracing never imports pricing)."""

    def __init__(
        self,
        tracer: trace.Tracer,
        *,
        measure: bool,
        metrics: CallMetrics | None = None,
        calls: MeasureCalls | None = None,
        wait_spans_s: float | None = None,
    ) -> None:
        """*calls*: the (begin, finish) a call is measured with, when not the timing
        core's (a benchmark's fixed measurement); the reference observer then runs.
        *wait_spans_s*: the scheduling delay from which a live span's wait gets child
        spans (``tracing.wait_spans``; None: never)."""
        self._tracer = tracer
        self._wait_spans_s = wait_spans_s
        self._measure = measure
        # The compiled (or reference) begin and finish, bound once: they run for every call.
        measure_calls: MeasureCalls = calls or bound_calls()
        self._begin_call, self._finish_call = measure_calls
        self._metrics = metrics
        if calls is None and _compiled_observer is not None:
            # The compiled observer (``_client_native.c``): its ``call`` makes a
            # _CompiledCall, whose __enter__ and __exit__ run an unsampled request's call
            # without a Python frame, and hand every other case to _Call's.
            core = _compiled_observer(self, request_totals, metrics, measure)
            self.call = core.call  # type: ignore[method-assign]

    def call(self, upstream: str, method: str, host: str, port: int, path: str, /) -> _Call:
        """A context manager around one upstream call: yields what the client fills in
        (its extra headers, then the status), and measures, records and (when sampled)
        spans the call. The reference; the compiled observer replaces it per instance."""
        return _Call(self, upstream, method, host, port, path)

    def _finish(
        self,
        record: UpstreamCall,
        measurement: CallMeasurement | None,
        span: trace.Span | None,
        totals: RequestTotals | None,
    ) -> None:
        try:
            record.end_unix_ns = time.time_ns()
            if record.error_type is None and record.status is not None and record.status >= 400:
                record.error_type = str(record.status)
            if measurement is not None:
                record.timing = timing = self._finish_call(measurement)
                metrics = self._metrics
                if metrics is not None:
                    metrics.observe_call(record.upstream, timing)
            if span is not None:
                span.set_attributes(finished_call_attributes(record))
                if record.error_type is not None:
                    span.set_status(Status(StatusCode.ERROR))  # client spans: 4xx too
                add_call_events(span, record)
                start_wait_spans(
                    self._tracer,
                    span,
                    call_wait_spans(
                        record.timing, record.start_unix_ns, record.end_unix_ns, self._wait_spans_s
                    ),
                )
            if totals is not None and record.timing is not None:
                totals.records.append(record)
        except Exception as exc:  # tracing never breaks a request
            swallow("client span attributes", exc)


class _Call(UpstreamCall):
    """One upstream call in progress (`TracingCallObserver.call`), and its record once
    over. Also what the client fills in (``headers``, ``status``: the `Observed` of
    `pricing.upstream.httpclient`). One object, not three, and a class rather than a
    generator-based context manager: it runs for every upstream call."""

    __slots__ = ("_measurement", "_observer", "_span", "_span_scope", "_totals", "headers")

    def __init__(
        self,
        observer: TracingCallObserver,
        upstream: str,
        method: str,
        host: str,
        port: int,
        path: str,
    ) -> None:
        super().__init__(upstream, method, host, port, path, time.time_ns())
        self.headers: dict[str, str] = {}
        self._observer = observer
        self._measurement: CallMeasurement | None = None
        self._span: trace.Span | None = None
        self._span_scope: AbstractContextManager[trace.Span] | None = None
        self._totals: RequestTotals | None = None

    def __enter__(self) -> _Call:
        observer = self._observer
        self._totals = totals = request_totals.get()
        unsampled = totals.traceparent if totals is not None else None
        if unsampled is not None:
            # Not sampled (the common case in production): no span, but the trace id
            # goes on to the upstreams, and the call is measured for the histograms
            # and, should the request turn out slow, for a span exported afterwards.
            self.headers["traceparent"] = unsampled
        elif totals is not None and totals.sampled is not None:
            # Sampled, its spans built when the request ends: only the id goes out now.
            sampled = totals.sampled
            self.span_id = span_id = sampled.new_span_id()
            sampled.inject(self.headers, span_id)
        else:
            parent = trace.get_current_span().get_span_context()
            if parent.trace_flags.sampled or not parent.is_valid:
                # Sampled, or outside any trace (the tracer's sampler decides).
                scope = observer._tracer.start_as_current_span(
                    f"{self.method} {self.path.split('?', 1)[0]}",
                    kind=SpanKind.CLIENT,
                    attributes=client_span_attributes(self),
                )
                self._span = scope.__enter__()
                self._span_scope = scope
                propagate.inject(self.headers)
            else:
                self.headers["traceparent"] = (
                    f"00-{parent.trace_id:032x}-{parent.span_id:016x}-{int(parent.trace_flags):02x}"
                )
        if observer._measure:
            self._measurement = observer._begin_call(
                totals.offset_ns if totals is not None else None
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.error_type = error_type(exc)
            if self.span_id:
                self.exception = exc
        totals, self._totals = self._totals, None  # the record joins totals.records: no cycle
        measurement, self._measurement = self._measurement, None
        self._observer._finish(self, measurement, self._span, totals)
        scope = self._span_scope
        if scope is not None:
            self._span_scope = self._span = None
            scope.__exit__(exc_type, exc, tb)


class _CompiledCall(_Call):
    """A _Call made by the compiled observer: its __enter__ and __exit__ are
    ``_client_native.c``'s (set by ``_compiled``), which follow _Call's for a request
    Envoy did not sample and call them for anything else. Its slots must be exactly the
    C side's ``SLOT_NAMES``: ``configure_observer`` refuses the class otherwise."""

    __slots__ = ("_core",)


#: The extension module of the compiled observer, built beside the timing core's.
COMPILED_OBSERVER = "tracing._client_native"
#: The compiled observer's class where the compiled path runs, else None.
_compiled_observer: Any = None


def _compiled(extension: Any) -> dict[str, Any]:
    """Give _CompiledCall the compiled __enter__ and __exit__, and name the compiled
    observer; raises where the extension does not take the class (a stale build)."""
    enter, exit_ = extension.configure_observer(
        _CompiledCall, _Call.__enter__, _Call.__exit__, swallow
    )
    _CompiledCall.__enter__ = enter  # type: ignore[method-assign]
    _CompiledCall.__exit__ = exit_  # type: ignore[method-assign]
    return {"_compiled_observer": extension.CallObserver}


# The one place the compiled observer comes in: its own extension (_client_native.c),
# which takes what it needs of the timing core's through that one's C API capsule.
native.accelerate(sys.modules[__name__], _compiled, extension=COMPILED_OBSERVER)


class Observes(Protocol):
    def observe(self, value: float) -> None: ...


class CallMetrics(Protocol):
    """Where every measured call's timings go (``tracing.metrics.PoolMetrics``)."""

    def call_histograms(self, upstream: str) -> tuple[Observes, Observes, Observes]:
        """(network, delay, CPU wait) of calls to *upstream*: what ``observe_call``
        feeds, and the compiled observer feeds directly."""
        ...

    def observe_call(self, upstream: str, timing: CallTiming) -> None: ...


def client_span_attributes(record: UpstreamCall) -> dict[str, Any]:
    """A client span's attributes known when the call starts."""
    return {
        HTTP_REQUEST_METHOD: record.method,
        SERVER_ADDRESS: record.host,
        SERVER_PORT: record.port,
        URL_PATH: record.path.split("?", 1)[0],
        URL_FULL: f"http://{record.host}:{record.port}{record.path}",
        attributes.UPSTREAM: record.upstream,
    }


def error_type(exc: BaseException) -> str:
    """error.type for a call that raised: the error's own low-cardinality ``reason``
    when it has one (pricing.upstream.httpclient's: refused, reset, ...), ``timeout`` for the
    deadline's gevent.Timeout, else the exception's fully qualified class name."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return reason
    if isinstance(exc, gevent.Timeout | TimeoutError):
        return "timeout"
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def finished_call_attributes(record: UpstreamCall) -> dict[str, Any]:
    """A client span's attributes once the call is over: status and timing."""
    out: dict[str, Any] = {}
    if record.status is not None:
        out[HTTP_RESPONSE_STATUS_CODE] = record.status
    if record.error_type is not None:
        out[ERROR_TYPE] = record.error_type
    if record.timing is not None:
        out.update(timing_attributes(record.timing))
    return out


def add_call_events(span: trace.Span, record: UpstreamCall) -> None:
    """Mark on the span's timeline where the reply reached the kernel: network time ends
    there, and what follows until the span ends is waiting for the hub and parsing."""
    timing = record.timing
    if timing is not None and timing.reply_arrived_unix_ns is not None:
        span.add_event(
            attributes.EVENT_REPLY_IN_KERNEL,
            {attributes.SCHEDULING_DELAY: timing.scheduling_delay_s},
            timestamp=timing.reply_arrived_unix_ns,
        )


def timing_attributes(timing: CallTiming, max_culprits: int = TOP_CULPRITS) -> dict[str, Any]:
    """A client span's attributes for one measured call (``tracing.attributes``)."""
    result: dict[str, Any] = {
        attributes.NETWORK_DURATION: timing.network_s,
        attributes.SCHEDULING_DELAY: timing.scheduling_delay_s,
        attributes.SCHEDULING_CPU_WAIT: timing.cpu_wait_s,
        attributes.BLOCKED_DURATION: timing.blocked_s,
    }
    if timing.culprits:
        result[attributes.SCHEDULING_CULPRITS] = attributes.culprit_list(
            top_culprits(timing.culprits, max_culprits)
        )
    return result
