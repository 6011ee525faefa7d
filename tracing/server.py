"""Per-worker OpenTelemetry set-up and the server side of each request.

`setup_worker(pool)` runs in gunicorn's `post_fork`, never in the master:
the exporter thread and the gevent hooks must belong to the worker process.
`init_app(app)` then instruments the Flask app the worker builds: a server
span for each request Envoy sampled (``server_span``; an unsampled one gets
none), the greenlet labelled with its route template, and the request's
summed scheduling delay set on its server span.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.semconv.attributes.deployment_attributes import DEPLOYMENT_ENVIRONMENT_NAME
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_METHOD,
    HTTP_RESPONSE_STATUS_CODE,
    HTTP_ROUTE,
)
from opentelemetry.semconv.attributes.service_attributes import (
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    SERVICE_VERSION,
)
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
)

from routing.edge import parse_envoy_start_ns
from tracing import attributes
from tracing.client import RequestTotals, SampledTrace, TracingCallObserver, request_totals
from tracing.export import ThreadedSpanProcessor, span_processor
from tracing.metrics import PoolMetrics, pool_metrics
from tracing.redact import QueryRedactor
from tracing.route import route_of
from tracing.server_span import (
    end_server_span,
    outcome_attributes,
    propagator_reads_traceparent,
    sampled_traceparent,
    server_attributes,
    start_server_span,
    unsampled_traceparent,
)
from tracing.settings import (
    DEFAULT_SERVICE_NAME,
    Mode,
    TracingSettings,
    resource_from_env,
)
from tracing.span_records import SpanBuilder, exception_event
from tracing.timing import server_timing
from tracing.timing.call_state import top_culprits
from tracing.timing.hook_errors import swallow
from tracing.timing.hub_block import HubBlockLog
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import UNKNOWN_LABEL, set_greenlet_label
from tracing.timing.server_timing import RequestMeasurement, RequestTiming, is_delayed

log = logging.getLogger(__name__)

#: The instrumentation scope of the pools' spans (the service name is the resource's).
SCOPE = "pricingservice"
#: deployment.environment.name unless OTEL_RESOURCE_ATTRIBUTES says otherwise.
DEFAULT_ENVIRONMENT = "development"
# Hub blocks longer than this are counted (pricing_hub_blocks), and logged with their
# stack when the watcher sees one while it lasts (seconds).
HUB_BLOCK_THRESHOLD_S = 0.1

_ENVIRON_MEASUREMENT = "pricing.request_measurement"
_ENVIRON_SPAN = "pricing.server_span"
_ENVIRON_ROUTE = "pricing.route"
_ENVIRON_STATUS = "pricing.status_line"
# The context token of a request whose spans are built at its end (detached at its end).
_ENVIRON_SAMPLED = "pricing.sampled_context"
# Largest plausible gap between Envoy's start and the pool's arrival stamp (ns): a
# header from elsewhere (a client setting it, a clock step) is ignored past it.
_MAX_ENVOY_BEFORE_NS = 60_000_000_000


@dataclass(frozen=True)
class Sampling:
    """Which requests get spans. Envoy decides (pools follow ``traceparent``'s sampled
    flag, so a trace is whole or absent); ``ratio`` is used only for requests that
    arrive without a decision (sent to a pool directly). A request slower than its
    route's threshold is exported in full whatever the decision."""

    ratio: float = 0.01
    #: route template (``"GET /v1/offers/bike"``) -> seconds.
    slow_s: Mapping[str, float] = field(default_factory=dict)
    default_slow_s: float = 1.0
    #: Slow requests exported per second and worker, at most. An overloaded worker
    #: finds every request slow: exporting them all would add the spans' CPU exactly
    #: when there is none to spare (measured: one io worker at 600 offers/s went from
    #: slow to serving nothing). The rest are counted, not exported.
    slow_per_s: float = 5.0

    def slow_threshold_s(self, route: str) -> float:
        return self.slow_s.get(route, self.default_slow_s)


class SlowBudget:
    """A token bucket for slow-request exports: ``take()`` says whether one may go."""

    __slots__ = ("_last", "_per_s", "_tokens", "dropped", "exported")

    def __init__(self, per_s: float) -> None:
        self._per_s = per_s
        self._tokens = per_s  # a burst of one second's worth
        self._last = time.monotonic()
        self.exported = 0
        self.dropped = 0

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._per_s, self._tokens + (now - self._last) * self._per_s)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.exported += 1
            return True
        self.dropped += 1
        return False


@dataclass
class WorkerTracing:
    pool: str
    settings: TracingSettings
    provider: TracerProvider
    processor: ThreadedSpanProcessor
    instrumentor: GeventTimingInstrumentor | None  # when mode is FULL
    # Hub blocks per route, counted for /metrics (stays empty without the instrumentor).
    hub_blocks: HubBlockLog = field(default_factory=lambda: HubBlockLog(log))
    sampling: Sampling = field(default_factory=Sampling)
    # Request header in which the proxy in front sends when it got the request (Unix
    # seconds with decimals; routing.envoy sets it); None: not measured.
    envoy_start_header: str | None = None
    metrics: PoolMetrics = field(default_factory=pool_metrics)
    # The running totals above already added to the metrics (sync_metrics).
    synced: dict[Any, float] = field(default_factory=dict)
    slow_budget: SlowBudget = field(default_factory=lambda: SlowBudget(Sampling().slow_per_s))
    #: Builds the spans of slow unsampled requests, and of sampled ones when
    #: ``build_sampled`` (``tracing.span_records``).
    spans: SpanBuilder | None = None
    #: Requests Envoy sampled get their spans built at their end, not live: the sampler
    #: keeps every sampled parent (parent-based, as ours and OTEL_TRACES_SAMPLER's are).
    build_sampled: bool = False

    @property
    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer(SCOPE)


_worker: WorkerTracing | None = None


def current() -> WorkerTracing | None:
    return _worker


def setup_worker(
    pool: str,
    settings: TracingSettings | None = None,
    sampling: Sampling | None = None,
    envoy_start_header: str | None = None,
) -> WorkerTracing | None:
    """Set up tracing for this worker process. Never raises: a broken tracing set-up
    logs and leaves the worker serving without spans."""
    global _worker
    try:
        settings = settings or TracingSettings.from_env()
    except ValueError as exc:
        log.error("tracing disabled: %s", exc)
        return None
    if settings.mode is Mode.OFF:
        return None
    try:
        resource = worker_resource(pool)
        sampling = sampling or Sampling()
        provider = TracerProvider(resource=resource, sampler=_sampler(settings, sampling))
        processor = span_processor(settings)
        redactor = QueryRedactor()  # before the exporter: no query value leaves the worker
        provider.add_span_processor(redactor)
        provider.add_span_processor(processor)
        spans = SpanBuilder(resource, SCOPE, processor, redactor, provider.id_generator)
        instrumentor = None
        metrics = pool_metrics()
        if settings.mode is Mode.FULL:
            instrumentor = GeventTimingInstrumentor(hub_block_threshold_s=HUB_BLOCK_THRESHOLD_S)
            instrumentor.instrument()
        # The switch tracer counts the blocks (none without the timing core).
        route_cpu = instrumentor.route_cpu if instrumentor is not None else None
        hub_blocks = HubBlockLog(log, counts=route_cpu.blocks if route_cpu is not None else None)
        if instrumentor is not None:
            if instrumentor.hub_block is not None:
                instrumentor.hub_block.register(hub_blocks)
            if instrumentor.loop_lag is not None:
                instrumentor.loop_lag.observers.append(metrics.observe_loop_lag)
                # One wake-up a second for both (metrics.init_app starts the flush later).
                metrics.ticker = instrumentor.loop_lag
        _worker = WorkerTracing(
            pool,
            settings,
            provider,
            processor,
            instrumentor,
            hub_blocks,
            sampling=sampling,
            envoy_start_header=envoy_start_header,
            slow_budget=SlowBudget(sampling.slow_per_s),
            metrics=metrics,
            spans=spans,
            build_sampled=keeps_sampled_parents(provider.sampler),
        )
        if _sync_current not in metrics.before_flush:
            metrics.before_flush.append(_sync_current)
        return _worker
    except Exception:
        log.exception("tracing set-up failed; serving without spans")
        return None


def worker_resource(pool: str) -> Resource:
    """The resource of a worker's spans: the project's defaults, overridden by the
    standard variables (OTEL_SERVICE_NAME, then OTEL_RESOURCE_ATTRIBUTES), which the
    SDK's own detector reads."""
    return resource_from_env(
        {
            SERVICE_NAME: DEFAULT_SERVICE_NAME,
            SERVICE_VERSION: _version(),
            DEPLOYMENT_ENVIRONMENT_NAME: DEFAULT_ENVIRONMENT,
            SERVICE_INSTANCE_ID: f"{pool}-{os.getpid()}",
            attributes.POOL: pool,
        }
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pricingservice")
    except PackageNotFoundError:
        return "unknown"


def keeps_sampled_parents(sampler: Sampler) -> bool:
    """Whether *sampler* records and samples every request whose remote parent was
    sampled, asked once with such a parent (then the spans of those requests can be built
    at their end without asking it: ``tracing.span_records``)."""
    parent = SpanContext(1, 1, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    try:
        result = sampler.should_sample(
            trace.set_span_in_context(NonRecordingSpan(parent)), 1, "probe", SpanKind.SERVER
        )
    except Exception:  # a custom sampler that cannot answer: it decides every request
        return False
    return result.decision is Decision.RECORD_AND_SAMPLE and not result.attributes


def _sampler(settings: TracingSettings, sampling: Sampling) -> Sampler | None:
    """None when OTEL_TRACES_SAMPLER is set (validated, parent-based): the SDK builds
    it from the environment. Otherwise Envoy's decision, and for requests without one
    (sent to a pool directly) the route config's ratio."""
    if settings.sampler is not None:
        return None
    return ParentBased(TraceIdRatioBased(sampling.ratio))


def sync_metrics(worker: WorkerTracing) -> None:
    """Bring the counts that real OS threads keep (span exporter, hub-block detector)
    and the slow-export budget's into the pool's metrics. Runs on the hub, before each
    metrics flush (``PoolMetrics.before_flush``: once a second and before a scrape)."""
    metrics, seen = worker.metrics, worker.synced
    metrics.sync(metrics.spans_exported, (), worker.processor.exported_spans, seen)
    metrics.sync(metrics.spans_dropped, (), worker.processor.dropped_spans, seen)
    metrics.sync(metrics.slow_traces, ("exported",), worker.slow_budget.exported, seen)
    metrics.sync(metrics.slow_traces, ("skipped",), worker.slow_budget.dropped, seen)
    for route, count in list(worker.hub_blocks.counts.items()):
        metrics.sync(metrics.hub_blocks, (route or UNKNOWN_LABEL,), count, seen)
    # CPU per route (routes suggest): the switch tracer keeps it, per greenlet label.
    route_cpu = worker.instrumentor.route_cpu if worker.instrumentor is not None else None
    if route_cpu is not None:
        for label, ns in list(route_cpu.current().items()):
            metrics.sync(metrics.route_cpu, (label or UNKNOWN_LABEL,), ns / 1e9, seen)


def _sync_current() -> None:
    worker = _worker
    if worker is not None:
        sync_metrics(worker)


def shutdown_worker() -> None:
    """Flush and stop (gunicorn `worker_exit`)."""
    global _worker
    worker, _worker = _worker, None
    if worker is None:
        return
    try:
        worker.provider.shutdown()
        if worker.instrumentor is not None:
            if worker.metrics.ticker is worker.instrumentor.loop_lag:
                worker.metrics.ticker = None  # it stops ticking: the flush keeps its own time
            worker.instrumentor.uninstrument()
        sync_metrics(worker)  # the last exports, into the counts the pool keeps
    except Exception:
        log.warning("tracing shutdown failed", exc_info=True)


def watch_gunicorn_worker(worker: Any) -> None:
    """Stamp inbound bytes on a gunicorn gevent worker: its listeners' accepted sockets
    inherit receive timestamps, and each connection greenlet watches its socket. Call in
    ``post_fork``, before the worker starts serving. Never raises."""
    try:
        for listener in getattr(worker, "sockets", ()):
            server_timing.enable_on_listener(listener.sock)
        handle = worker.handle

        def watched_handle(listener: Any, client: Any, addr: Any) -> Any:
            server_timing.watch_connection(client)
            try:
                return handle(listener, client, addr)
            finally:
                server_timing.unwatch_connection()

        worker.handle = watched_handle
    except Exception:
        log.exception("inbound delay not measured: the gunicorn worker could not be watched")


def init_app(app: Any, *, untraced_paths: Sequence[str] = ()) -> TracingCallObserver | None:
    """Instrument a Flask app; returns the upstream-call observer, or None when off.

    Requests to *untraced_paths* (health checks, scrapes) get no span. Records the
    mode it set up in ``app.extensions["tracing"]`` (``"off"`` included), for readiness.
    The metrics are ``tracing.metrics.init_app``'s, served whatever the mode.
    """
    worker = _worker
    app.extensions["tracing"] = worker.settings.mode.value if worker else Mode.OFF.value
    if worker is None:
        return None
    from flask import request

    measure = worker.instrumentor is not None
    untraced = frozenset(untraced_paths)
    # The sampled flag decides cheaply only where the propagator reads traceparent.
    precheck = propagator_reads_traceparent()
    tracer = worker.tracer
    spans = worker.spans
    build_sampled = precheck and measure and worker.build_sampled
    new_span_id = spans.new_span_id if spans is not None else None
    # The compiled (or reference) begin and finish, bound once: they run for every request.
    begin_request, finish_request = server_timing.bound_requests()
    # Outermost, so the handler's time starts before Flask runs. The status line is read
    # as the response starts, which Flask does before its teardown (``_end``): an
    # after_request hook for it cost ~1.9 us a request, this ~0.15 us.
    inner = app.wsgi_app

    def traced_wsgi_app(environ: dict[str, Any], start_response: Any) -> Any:
        if measure:
            environ[_ENVIRON_MEASUREMENT] = begin_request()

        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            environ[_ENVIRON_STATUS] = status
            return start_response(status, headers, exc_info)

        return inner(environ, start)

    app.wsgi_app = traced_wsgi_app

    @app.before_request
    def _begin() -> None:
        try:
            # Each `request.x` goes through werkzeug's context proxy: resolve it once.
            req = cast(Any, request)._get_current_object()
            route = route_of(req)
            set_greenlet_label(route)
            environ = req.environ
            environ[_ENVIRON_ROUTE] = route
            incoming = environ.get("HTTP_TRACEPARENT")
            measurement = environ.get(_ENVIRON_MEASUREMENT)
            offset = measurement.offset_ns if isinstance(measurement, RequestMeasurement) else None
            if precheck and unsampled_traceparent(incoming):
                # Envoy did not sample it: no span; its trace id goes on to the upstreams.
                request_totals.set(RequestTotals(incoming, offset))
                return
            if (
                build_sampled
                and new_span_id is not None
                and offset is not None
                and req.path not in untraced
            ):
                parsed = sampled_traceparent(incoming)
                if parsed is not None:
                    # Envoy sampled it: its spans are built when it ends (span_records).
                    sampled = SampledTrace(
                        *parsed,
                        new_span_id,
                        environ.get("HTTP_TRACESTATE"),
                        environ.get("HTTP_BAGGAGE"),
                    )
                    request_totals.set(RequestTotals(None, offset, sampled))
                    # The server span's ids in the context, for the logs.
                    environ[_ENVIRON_SAMPLED] = context.attach(
                        trace.set_span_in_context(NonRecordingSpan(server_context(sampled)))
                    )
                    return
            request_totals.set(RequestTotals(None, offset))
            if req.path not in untraced:
                environ[_ENVIRON_SPAN] = start_server_span(tracer, route, req)
        except Exception as exc:
            swallow("begin request", exc)

    @app.teardown_request
    def _end(exc: BaseException | None) -> None:
        try:
            req = cast(Any, request)._get_current_object()
            environ = req.environ
            totals = request_totals.get()
            measurement = environ.get(_ENVIRON_MEASUREMENT)
            route = environ.get(_ENVIRON_ROUTE) or route_of(req)
            status = 500 if exc is not None else _status_code(environ.get(_ENVIRON_STATUS))
            if isinstance(measurement, RequestMeasurement):
                timing = finish_request(measurement, totals.timed() if totals is not None else ())
                _account(
                    worker, FinishedRequest(route, timing, totals, status, req.headers), req, exc
                )
            request_totals.set(None)
            set_greenlet_label(None)
            started = environ.pop(_ENVIRON_SPAN, None)
            if started is not None:
                end_server_span(started[0], started[1], status, exc)
            token = environ.pop(_ENVIRON_SAMPLED, None)
            if token is not None:
                context.detach(token)
        except Exception as err:
            swallow("end request", err)

    return TracingCallObserver(worker.tracer, measure=measure, metrics=worker.metrics)


def _status_code(status_line: str | None) -> int | None:
    """The code of a WSGI status line (``"200 OK"``); None before the response started."""
    if status_line is None:
        return None
    try:
        return int(status_line[:3])
    except ValueError:
        return None


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


def _account(
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
    elif slow and worker.spans is not None and worker.slow_budget.take():
        _export_slow(worker, done)


def _request_events(timing: RequestTiming) -> list[Event]:
    """A server span's events: the request's bytes reaching the kernel, the handler's start."""
    events = []
    if timing.arrival_unix_ns is not None:
        events.append(
            Event(
                attributes.EVENT_REQUEST_IN_KERNEL,
                {attributes.INBOUND_DELAY: timing.inbound_delay_s or 0.0},
                timing.arrival_unix_ns,
            )
        )
    events.append(Event(attributes.EVENT_HANDLER_STARTED, None, timing.start_unix_ns))
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
    """Build the spans of a request Envoy sampled: what the live spans would have held."""
    assert worker.spans is not None
    timing, status = done.timing, done.status
    server_attrs = server_attributes(done.route, request)
    server_attrs.update(outcome_attributes(status, exc))
    server_attrs.update(
        request_attributes(
            done.route,
            timing,
            done.totals,
            done.envoy_start_ns(worker.envoy_start_header),
            slow=slow,
        )
    )
    events = _request_events(timing)
    if exc is not None:
        events.append(exception_event(exc, timing.end_unix_ns))
    trace_state = _trace_state(sampled.tracestate)
    worker.spans.request(
        name=done.route,
        parent=SpanContext(
            sampled.trace_id,
            sampled.parent_span_id,
            is_remote=True,
            trace_flags=TraceFlags(sampled.flags),
            trace_state=trace_state,
        ),
        span_id=sampled.span_id,
        trace_state=trace_state,
        attributes=server_attrs,
        events=events,
        error=exc is not None or (status is not None and status >= 500),
        start_ns=timing.start_unix_ns,
        end_ns=timing.end_unix_ns,
        records=done.totals.records if done.totals is not None else (),
    )


def _export_slow(worker: WorkerTracing, done: FinishedRequest) -> None:
    """Build the spans of a request that Envoy did not sample from what was measured,
    under its trace id and Envoy's span as parent (Envoy's span itself was not kept)."""
    assert worker.spans is not None
    route, timing, totals, status = done.route, done.timing, done.totals, done.status
    extracted = propagate.extract({k.lower(): v for k, v in done.headers.items()})
    method, _, template = route.partition(" ")
    server_attrs: dict[str, Any] = {HTTP_REQUEST_METHOD: method, HTTP_ROUTE: template}
    if status is not None:
        server_attrs[HTTP_RESPONSE_STATUS_CODE] = status
    server_attrs.update(
        request_attributes(
            route,
            timing,
            totals,
            done.envoy_start_ns(worker.envoy_start_header),
            slow=True,
            reason="slow",
        )
    )
    worker.spans.request(
        name=route,
        parent=trace.get_current_span(extracted).get_span_context(),
        attributes=server_attrs,
        events=_request_events(timing),
        error=status is not None and status >= 500,
        start_ns=timing.start_unix_ns,
        end_ns=timing.end_unix_ns,
        records=totals.records if totals is not None else (),
    )


__all__ = [
    "Sampling",
    "attributes",
    "current",
    "init_app",
    "setup_worker",
    "shutdown_worker",
    "watch_gunicorn_worker",
]
