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
from typing import Any, cast

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
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
from opentelemetry.trace import SpanKind, Status, StatusCode

from routing.edge import parse_envoy_start_ns
from tracing import attributes
from tracing.client import (
    RequestTotals,
    TracingCallObserver,
    add_call_events,
    client_span_attributes,
    finished_call_attributes,
    request_totals,
)
from tracing.export import ThreadedSpanProcessor, span_processor
from tracing.metrics import PoolMetrics, pool_metrics
from tracing.redact import QueryRedactor
from tracing.route import route_of
from tracing.server_span import (
    end_server_span,
    propagator_reads_traceparent,
    start_server_span,
    unsampled_traceparent,
)
from tracing.settings import (
    DEFAULT_SERVICE_NAME,
    Mode,
    TracingSettings,
    resource_from_env,
)
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
# Hub blocks longer than this are reported with their stack (seconds).
HUB_BLOCK_THRESHOLD_S = 0.1

_ENVIRON_MEASUREMENT = "pricing.request_measurement"
_ENVIRON_SPAN = "pricing.server_span"
_ENVIRON_ROUTE = "pricing.route"
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
    # Exports the spans of slow requests that were not sampled: same processor, a
    # sampler that keeps everything.
    slow_provider: TracerProvider | None = None
    slow_budget: SlowBudget = field(default_factory=lambda: SlowBudget(Sampling().slow_per_s))

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
        slow_provider = TracerProvider(resource=resource, sampler=ALWAYS_ON)
        slow_provider.add_span_processor(redactor)
        slow_provider.add_span_processor(processor)
        instrumentor = None
        hub_blocks = HubBlockLog(log)
        metrics = pool_metrics()
        if settings.mode is Mode.FULL:
            instrumentor = GeventTimingInstrumentor(hub_block_threshold_s=HUB_BLOCK_THRESHOLD_S)
            instrumentor.instrument()
            if instrumentor.hub_block is not None:
                instrumentor.hub_block.register(hub_blocks)
            if instrumentor.loop_lag is not None:
                instrumentor.loop_lag.observers.append(metrics.observe_loop_lag)
        _worker = WorkerTracing(
            pool,
            settings,
            provider,
            processor,
            instrumentor,
            hub_blocks,
            sampling=sampling,
            envoy_start_header=envoy_start_header,
            slow_provider=slow_provider,
            slow_budget=SlowBudget(sampling.slow_per_s),
            metrics=metrics,
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
        metrics.sync(metrics.hub_blocks, (route,), count, seen)
    # CPU per route (routes suggest): the switch tracer keeps it, per greenlet label.
    route_cpu = worker.instrumentor.route_cpu if worker.instrumentor is not None else None
    if route_cpu is not None:
        for label, ns in list(route_cpu.by_label_ns.items()):
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
        if worker.slow_provider is not None:
            worker.slow_provider.shutdown()
        if worker.instrumentor is not None:
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
    from flask import g, request

    measure = worker.instrumentor is not None
    untraced = frozenset(untraced_paths)
    # The sampled flag decides cheaply only where the propagator reads traceparent.
    precheck = propagator_reads_traceparent()
    tracer = worker.tracer
    if measure:
        # Outermost, so the handler's time starts before Flask runs.
        inner = app.wsgi_app

        def timed_wsgi_app(environ: dict[str, Any], start_response: Any) -> Any:
            environ[_ENVIRON_MEASUREMENT] = server_timing.begin_request()
            return inner(environ, start_response)

        app.wsgi_app = timed_wsgi_app

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
            request_totals.set(RequestTotals(None, offset))
            if req.path not in untraced:
                environ[_ENVIRON_SPAN] = start_server_span(tracer, route, req)
        except Exception as exc:
            swallow("begin request", exc)

    @app.after_request
    def _status(response: Any) -> Any:
        g.pricing_status = response.status_code
        return response

    @app.teardown_request
    def _end(exc: BaseException | None) -> None:
        try:
            req = cast(Any, request)._get_current_object()
            environ = req.environ
            totals = request_totals.get()
            measurement = environ.get(_ENVIRON_MEASUREMENT)
            route = environ.get(_ENVIRON_ROUTE) or route_of(req)
            status = 500 if exc is not None else g.get("pricing_status")
            if isinstance(measurement, RequestMeasurement):
                timing = measurement.finish(totals.timed() if totals is not None else ())
                _account(worker, FinishedRequest(route, timing, totals, status, req.headers))
            request_totals.set(None)
            set_greenlet_label(None)
            started = environ.pop(_ENVIRON_SPAN, None)
            if started is not None:
                end_server_span(started[0], started[1], status, exc)
        except Exception as err:
            swallow("end request", err)

    return TracingCallObserver(worker.tracer, measure=measure, metrics=worker.metrics)


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


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """What the server side knows of a request once its handler ended."""

    route: str
    timing: RequestTiming
    totals: RequestTotals | None
    status: int | None
    headers: Any

    def envoy_start_ns(self, header: str | None) -> int | None:
        """When Envoy began the request (its start header, *header*), for the spans of a
        sampled or slow request: read only for those."""
        return parse_envoy_start_ns(self.headers.get(header)) if header else None


def _account(worker: WorkerTracing, done: FinishedRequest) -> None:
    """Histograms for every request; span attributes for a sampled one; a whole trace
    exported afterwards for a slow one that was not sampled."""
    timing = done.timing
    worker.metrics.observe_timing(done.route, timing)
    first = timing.arrival_unix_ns if timing.arrival_unix_ns is not None else timing.start_unix_ns
    slow = (timing.end_unix_ns - first) / 1e9 >= worker.sampling.slow_threshold_s(done.route)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            request_attributes(
                done.route,
                timing,
                done.totals,
                done.envoy_start_ns(worker.envoy_start_header),
                slow=slow,
            )
        )
        _add_request_events(span, timing)
    elif slow and worker.slow_provider is not None and worker.slow_budget.take():
        _export_slow(worker, done)


def _add_request_events(span: trace.Span, timing: RequestTiming) -> None:
    if timing.arrival_unix_ns is not None:
        span.add_event(
            attributes.EVENT_REQUEST_IN_KERNEL,
            {attributes.INBOUND_DELAY: timing.inbound_delay_s or 0.0},
            timestamp=timing.arrival_unix_ns,
        )
    span.add_event(attributes.EVENT_HANDLER_STARTED, timestamp=timing.start_unix_ns)


def _export_slow(worker: WorkerTracing, done: FinishedRequest) -> None:
    """Build the spans of a request that Envoy did not sample from what was measured,
    under its trace id and Envoy's span as parent (Envoy's span itself was not kept)."""
    assert worker.slow_provider is not None
    route, timing, totals, status = done.route, done.timing, done.totals, done.status
    tracer = worker.slow_provider.get_tracer(SCOPE)
    parent = propagate.extract({k.lower(): v for k, v in done.headers.items()})
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
    server = tracer.start_span(
        route,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=server_attrs,
        start_time=timing.start_unix_ns,
    )
    if status is not None and status >= 500:
        server.set_status(Status(StatusCode.ERROR))
    _add_request_events(server, timing)
    inside = trace.set_span_in_context(server)
    for record in totals.records if totals is not None else ():
        child = tracer.start_span(
            f"{record.method} {record.path.split('?', 1)[0]}",
            context=inside,
            kind=SpanKind.CLIENT,
            attributes=client_span_attributes(record),
            start_time=record.start_unix_ns,
        )
        child.set_attributes(finished_call_attributes(record))
        if record.error_type is not None:
            child.set_status(Status(StatusCode.ERROR))
        add_call_events(child, record)
        child.end(end_time=record.end_unix_ns)
    server.end(end_time=timing.end_unix_ns)


__all__ = [
    "Sampling",
    "attributes",
    "current",
    "init_app",
    "setup_worker",
    "shutdown_worker",
    "watch_gunicorn_worker",
]
