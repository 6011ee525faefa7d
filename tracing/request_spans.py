"""What the server side makes of a request once its handler ended: the histograms for
every request, the server span's attributes and events for a sampled one (or its record,
whose spans the exporter thread builds: ``tracing.span_records``), and a whole trace
exported afterwards for a slow one Envoy did not sample.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from opentelemetry import propagate, trace
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_METHOD,
    HTTP_RESPONSE_STATUS_CODE,
    HTTP_ROUTE,
)
from opentelemetry.trace import INVALID_SPAN, SpanContext, TraceFlags, TraceState

from routing.edge import parse_envoy_start_ns
from tracing import attributes
from tracing.client import RequestTotals, SampledTrace, UpstreamCall
from tracing.server_span import (
    RESPONSE_HEADERS,
    excluded,
    outcome_attributes,
    response_header_attributes,
    server_attributes,
)
from tracing.span_records import SpanEvent, exception_event
from tracing.timing.call_state import top_culprits
from tracing.timing.server_timing import RequestTiming, is_delayed
from tracing.wait_spans import inbound_wait_spans, start_wait_spans
from tracing.worker import WorkerTracing

# Largest plausible gap between Envoy's start and the pool's arrival stamp (ns): a
# header from elsewhere (a client setting it, a clock step) is ignored past it.
_MAX_ENVOY_BEFORE_NS: Final = 60_000_000_000


def request_attributes(
    route: str,
    timing: RequestTiming,
    totals: RequestTotals | None,
    envoy_start_ns: int | None = None,
    *,
    slow: bool = False,
    reason: str = "sampled",
) -> dict[str, Any]:
    """The server span's attributes: the sums over its calls and every part of its time."""
    out: dict[str, Any] = {
        attributes.HANDLER_DURATION: timing.duration_s,
        attributes.HANDLER_RUNNING: timing.running_s,
        attributes.HANDLER_WAITING: timing.waiting_s,
        attributes.TRACE_REASON: reason,
    }
    if slow:
        out[attributes.SLOW] = True
    if timing.inbound_delay_s is not None:
        out[attributes.INBOUND_DELAY] = timing.inbound_delay_s
        out[attributes.INBOUND_CPU_WAIT] = timing.inbound_cpu_wait_s
        if timing.inbound_culprits:
            out[attributes.INBOUND_CULPRITS] = attributes.culprit_list(
                top_culprits(timing.inbound_culprits)
            )
        if envoy_start_ns is not None and timing.arrival_unix_ns is not None:
            before = timing.arrival_unix_ns - envoy_start_ns
            if 0 <= before <= _MAX_ENVOY_BEFORE_NS:
                out[attributes.ENVOY_BEFORE_POOL] = before / 1e9
    if totals is not None and totals.records:
        timed = [r.timing for r in totals.records if r.timing is not None]
        out[attributes.UPSTREAM_CALLS] = len(totals.records)
        out[attributes.NETWORK_DURATION] = sum(t.network_s for t in timed)
        out[attributes.SCHEDULING_DELAY] = sum(t.scheduling_delay_s for t in timed)
        out[attributes.SCHEDULING_CPU_WAIT] = sum(t.cpu_wait_s for t in timed)
    out[attributes.DELAYED] = is_delayed(timing)
    critical = timing.critical
    if critical is not None:
        out[attributes.CRITICAL_UPSTREAM] = timing.critical_upstream or ""
        out[attributes.CRITICAL_PRESEND_DELAY] = timing.presend_delay_s
        out[attributes.CRITICAL_NETWORK] = critical.network_s
        out[attributes.CRITICAL_SCHEDULING_DELAY] = critical.scheduling_delay_s
        out[attributes.CRITICAL_CPU_WAIT] = critical.cpu_wait_s
        out[attributes.CRITICAL_RUNNING] = (
            critical.duration_s - critical.network_s - critical.scheduling_delay_s
        )
        out[attributes.CRITICAL_WAKE_DELAY] = timing.wake_delay_s
        out[attributes.CRITICAL_OVERLAP] = timing.overlap_s
    return out


class FinishedRequest(NamedTuple):
    """What the server side knows of a request once its handler ended. (A named tuple:
    one is made for every request, and a frozen dataclass sets each field through
    ``object.__setattr__``.)"""

    route: str
    timing: RequestTiming
    totals: RequestTotals | None
    status: int | None
    headers: Any

    def envoy_start_ns(self, header: str | None) -> int | None:
        """When Envoy began the request (its start header, *header*), for the spans of a
        sampled or slow request: read only for those."""
        return parse_envoy_start_ns(self.headers.get(header)) if header else None


def account(
    worker: WorkerTracing,
    done: FinishedRequest,
    request: Any = None,
    exc: BaseException | None = None,
) -> None:
    """Histograms for every request; span attributes for a sampled one (or its spans,
    built now: ``tracing.span_records``); a whole trace exported afterwards for a slow one
    that was not sampled. *request*, *exc*: the Flask request and what it raised."""
    timing = done.timing
    worker.metrics.observe_timing(done.route, timing)
    first = timing.arrival_unix_ns if timing.arrival_unix_ns is not None else timing.start_unix_ns
    slow = (timing.end_unix_ns - first) / 1e9 >= worker.sampling.slow_threshold_s(done.route)
    totals = done.totals
    sampled = totals.sampled if totals is not None else None
    if sampled is not None and request is not None:
        _export_sampled(worker, done, sampled, request, exc, slow)
        return
    # Envoy did not sample it (its traceparent kept for the upstreams): no span was started.
    unsampled = totals is not None and totals.traceparent is not None
    span = INVALID_SPAN if unsampled else trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            request_attributes(
                done.route,
                timing,
                totals,
                done.envoy_start_ns(worker.envoy_start_header),
                slow=slow,
            )
        )
        _add_request_events(span, timing)
        start_wait_spans(
            worker.tracer, span, inbound_wait_spans(timing, worker.settings.wait_spans_s)
        )
    elif (
        slow
        and worker.spans is not None
        and not (request is not None and excluded(worker.settings.server, request))
        and worker.slow_budget.take()
    ):
        _export_slow(worker, done)


def measured_fields(
    route: str,
    timing: RequestTiming,
    calls: tuple[UpstreamCall, ...],
    envoy_start_ns: int | None,
    slow: bool,
    reason: str,
) -> tuple[dict[str, Any], list[SpanEvent]]:
    """A built server span's attributes and events from its measurements alone
    (``request_attributes``, ``_request_events``): derived on the exporter thread
    (``tracing.span_records.RequestRecord``), not on the hub. *calls*: the request's
    calls as it ended (a call its deadline cut off may still add to its totals)."""
    totals = RequestTotals()
    totals.records = list(calls)
    attrs = request_attributes(route, timing, totals, envoy_start_ns, slow=slow, reason=reason)
    return attrs, _request_events(timing)


def _request_events(timing: RequestTiming) -> list[SpanEvent]:
    """A server span's events: the request's bytes reaching the kernel, the handler's start."""
    events = []
    if timing.arrival_unix_ns is not None:
        events.append(
            SpanEvent(
                attributes.EVENT_REQUEST_IN_KERNEL,
                {attributes.INBOUND_DELAY: timing.inbound_delay_s or 0.0},
                timing.arrival_unix_ns,
            )
        )
    events.append(SpanEvent(attributes.EVENT_HANDLER_STARTED, None, timing.start_unix_ns))
    return events


def _add_request_events(span: trace.Span, timing: RequestTiming) -> None:
    for event in _request_events(timing):
        span.add_event(event.name, event.attributes, timestamp=event.timestamp)


def server_context(sampled: SampledTrace) -> SpanContext:
    """The span context of the server span of a request whose spans are built at its end."""
    return SpanContext(
        sampled.trace_id,
        sampled.span_id,
        is_remote=False,
        trace_flags=TraceFlags(sampled.flags),
        trace_state=_trace_state(sampled.tracestate),
    )


def _trace_state(header: str | None) -> TraceState | None:
    return TraceState.from_header([header]) if header else None


def _export_sampled(
    worker: WorkerTracing,
    done: FinishedRequest,
    sampled: SampledTrace,
    request: Any,
    exc: BaseException | None,
    slow: bool,
) -> None:
    """Queue the spans of a request Envoy sampled: what the live spans would have held.
    On the hub, only what the Flask request and the outcome say; the exporter thread
    derives the rest from the measurements (``measured_fields``)."""
    assert worker.spans is not None
    timing, status, totals = done.timing, done.status, done.totals
    server = worker.settings.server
    server_attrs = server_attributes(done.route, request, server)
    server_attrs.update(outcome_attributes(status, exc, server.semconv))
    server_attrs.update(response_header_attributes(request.environ.get(RESPONSE_HEADERS), server))
    envoy_start_ns = done.envoy_start_ns(worker.envoy_start_header)
    events = [] if exc is None else [exception_event(exc, timing.end_unix_ns)]
    calls = tuple(totals.records) if totals is not None else ()
    worker.spans.request(
        name=done.route,
        parent=SpanContext(
            sampled.trace_id,
            sampled.parent_span_id,
            is_remote=True,
            trace_flags=TraceFlags(sampled.flags),
        ),
        span_id=sampled.span_id,
        trace_state=sampled.tracestate or None,
        attributes=server_attrs,
        events=events,
        error=exc is not None or (status is not None and status >= 500),
        start_ns=timing.start_unix_ns,
        end_ns=timing.end_unix_ns,
        records=calls,
        derive=(measured_fields, (done.route, timing, calls, envoy_start_ns, slow, "sampled")),
        waits=inbound_wait_spans(timing, worker.spans.wait_spans_s),
    )


def slow_root(edge: SpanContext) -> dict[str, Any]:
    """The server span of a slow-kept trace is its root: Envoy's span (*edge*) was not
    exported, and a parent missing from the trace makes Jaeger warn. Its id goes in an
    attribute instead (``attributes.EDGE_SPAN_ID``)."""
    return {attributes.EDGE_SPAN_ID: f"{edge.span_id:016x}"} if edge.is_valid else {}


def _export_slow(worker: WorkerTracing, done: FinishedRequest) -> None:
    """Queue the spans of a request that Envoy did not sample, built from what was measured,
    as the root of its trace (Envoy's span was not kept: ``slow_root``)."""
    assert worker.spans is not None
    route, timing, totals, status = done.route, done.timing, done.totals, done.status
    extracted = propagate.extract({k.lower(): v for k, v in done.headers.items()})
    edge = trace.get_current_span(extracted).get_span_context()
    method, _, template = route.partition(" ")
    server_attrs: dict[str, Any] = {HTTP_REQUEST_METHOD: method, HTTP_ROUTE: template}
    if status is not None:
        server_attrs[HTTP_RESPONSE_STATUS_CODE] = status
    envoy_start_ns = done.envoy_start_ns(worker.envoy_start_header)
    calls = tuple(totals.records) if totals is not None else ()
    server_attrs.update(slow_root(edge))
    worker.spans.request(
        name=route,
        parent=None,
        trace_id=edge.trace_id if edge.is_valid else None,
        trace_state=edge.trace_state if edge.is_valid else None,
        attributes=server_attrs,
        events=[],
        error=status is not None and status >= 500,
        start_ns=timing.start_unix_ns,
        end_ns=timing.end_unix_ns,
        records=calls,
        derive=(measured_fields, (route, timing, calls, envoy_start_ns, True, "slow")),
        waits=inbound_wait_spans(timing, worker.spans.wait_spans_s),
    )
