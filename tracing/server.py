"""Per-worker OpenTelemetry set-up and the server side of each request.

`setup_worker(pool)` runs in gunicorn's `post_fork`, never in the master:
the exporter thread and the gevent hooks must belong to the worker process.
It returns the worker's tracing (``tracing.worker.WorkerTracing``), which the
app factory hands to ``tracing.flask_tracing.FlaskTracing`` to instrument the
Flask app the worker builds.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.semconv.attributes.deployment_attributes import DEPLOYMENT_ENVIRONMENT_NAME
from opentelemetry.semconv.attributes.service_attributes import (
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    SERVICE_VERSION,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from tracing import attributes
from tracing.export import span_processor
from tracing.metrics import PoolMetrics, pool_metrics
from tracing.redact import QueryRedactor
from tracing.settings import DEFAULT_SERVICE_NAME, Mode, TracingSettings, resource_from_env
from tracing.span_records import SpanBuilder
from tracing.timing import server_timing
from tracing.timing.hub_block import HubBlockLog
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.worker import SCOPE, Sampling, SlowBudget, WorkerTracing

log = logging.getLogger(__name__)

#: deployment.environment.name unless OTEL_RESOURCE_ATTRIBUTES says otherwise.
DEFAULT_ENVIRONMENT: Final = "development"
# Hub blocks longer than this are counted (pricing_hub_blocks), and logged with their
# stack when the watcher sees one while it lasts (seconds).
HUB_BLOCK_THRESHOLD_S: Final = 0.1


# The worker this process set up (post_fork), for the app factory: gunicorn builds the
# app in a call of its own, which only this process-wide slot reaches. Nothing below
# the factory reads it: the worker is handed on.
_worker: WorkerTracing | None = None


def current() -> WorkerTracing | None:
    """The tracing this worker process set up (``setup_worker``), None when off."""
    return _worker


def setup_worker(
    pool: str,
    settings: TracingSettings | None = None,
    sampling: Sampling | None = None,
    envoy_start_header: str | None = None,
    metrics: PoolMetrics | None = None,
) -> WorkerTracing | None:
    """Set up tracing for this worker process, counting into *metrics* (this process's
    by default). Never raises: a broken tracing set-up logs and leaves the worker
    serving without spans."""
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
        spans = SpanBuilder(
            resource,
            SCOPE,
            processor,
            redactor,
            provider.id_generator,
            wait_spans_s=settings.wait_spans_s,
        )
        instrumentor = None
        metrics = metrics or pool_metrics()
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
        if _worker is not None:
            _forget(_worker)
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
        metrics.before_flush.append(_worker.sync_metrics)
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


def _forget(worker: WorkerTracing) -> None:
    """Stop bringing *worker*'s counts into its metrics."""
    if worker.sync_metrics in worker.metrics.before_flush:
        worker.metrics.before_flush.remove(worker.sync_metrics)


def shutdown_worker() -> None:
    """Flush and stop this process's tracing (gunicorn `worker_exit`)."""
    global _worker
    worker, _worker = _worker, None
    if worker is None:
        return
    _forget(worker)
    try:
        worker.provider.shutdown()
        if worker.instrumentor is not None:
            if worker.metrics.ticker is worker.instrumentor.loop_lag:
                worker.metrics.ticker = None  # it stops ticking: the flush keeps its own time
            worker.instrumentor.uninstrument()
        worker.sync_metrics()  # the last exports, into the counts the pool keeps
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


__all__ = [
    "Sampling",
    "WorkerTracing",
    "current",
    "setup_worker",
    "shutdown_worker",
    "watch_gunicorn_worker",
]
