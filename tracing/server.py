"""Per-worker OpenTelemetry set-up and the server side of each request.

`setup_worker(pool)` runs in gunicorn's `post_fork`, never in the master:
the exporter thread and the gevent hooks must belong to the worker process.
`init_app(app)` then instruments the Flask app the worker builds: a server
span per request (opentelemetry-instrumentation-flask, W3C traceparent from
Envoy), the greenlet labelled with its route template, and the request's
summed scheduling delay set on its server span.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider

from tracing import attributes
from tracing.client import (
    RequestTotals,
    TracingCallObserver,
    request_totals,
    server_span_attributes,
)
from tracing.export import JsonLinesFileExporter, ThreadedSpanProcessor
from tracing.settings import Mode, TracingSettings
from tracing.timing.hook_errors import swallow
from tracing.timing.hub_block import HubBlockLog
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import set_greenlet_label

log = logging.getLogger(__name__)

SERVICE = "pricingservice"
# Hub blocks longer than this are reported with their stack (seconds).
HUB_BLOCK_THRESHOLD_S = 0.1


@dataclass
class WorkerTracing:
    pool: str
    settings: TracingSettings
    provider: TracerProvider
    processor: ThreadedSpanProcessor
    instrumentor: GeventTimingInstrumentor | None  # when mode is FULL
    # Hub blocks per route, counted for /metrics (stays empty without the instrumentor).
    hub_blocks: HubBlockLog = field(default_factory=lambda: HubBlockLog(log))

    @property
    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer(SERVICE)


_worker: WorkerTracing | None = None


def current() -> WorkerTracing | None:
    return _worker


def setup_worker(pool: str, settings: TracingSettings | None = None) -> WorkerTracing | None:
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
        resource = Resource.create(
            {
                SERVICE_NAME: SERVICE,
                SERVICE_INSTANCE_ID: f"{pool}-{os.getpid()}",
                attributes.POOL: pool,
            }
        )
        provider = TracerProvider(resource=resource)
        processor = ThreadedSpanProcessor(_exporter(settings))
        provider.add_span_processor(processor)
        instrumentor = None
        hub_blocks = HubBlockLog(log)
        if settings.mode is Mode.FULL:
            instrumentor = GeventTimingInstrumentor(hub_block_threshold_s=HUB_BLOCK_THRESHOLD_S)
            instrumentor.instrument()
            if instrumentor.hub_block is not None:
                instrumentor.hub_block.register(hub_blocks)
        _worker = WorkerTracing(pool, settings, provider, processor, instrumentor, hub_blocks)
        return _worker
    except Exception:
        log.exception("tracing set-up failed; serving without spans")
        return None


def _exporter(settings: TracingSettings) -> Any:
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(
            endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/traces", timeout=5
        )
    return JsonLinesFileExporter(settings.span_file)


def shutdown_worker() -> None:
    """Flush and stop (gunicorn `worker_exit`)."""
    global _worker
    worker, _worker = _worker, None
    if worker is None:
        return
    try:
        worker.provider.shutdown()
        if worker.instrumentor is not None:
            worker.instrumentor.uninstrument()
    except Exception:
        log.warning("tracing shutdown failed", exc_info=True)


def init_app(
    app: Any, *, metrics_path: str, untraced_paths: Sequence[str] = ()
) -> TracingCallObserver | None:
    """Instrument a Flask app; returns the upstream-call observer, or None when off.

    Serves the worker's metrics at *metrics_path*; requests to *untraced_paths*
    (health checks, scrapes) get no span. Records the mode it set up in
    ``app.extensions["tracing"]`` (``"off"`` included), for readiness.
    """
    worker = _worker
    app.extensions["tracing"] = worker.settings.mode.value if worker else Mode.OFF.value
    if worker is None:
        return None
    from flask import request
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    measure = worker.instrumentor is not None
    FlaskInstrumentor().instrument_app(
        app,
        tracer_provider=worker.provider,
        excluded_urls=",".join(re.escape(path) + r"(\?|$)" for path in untraced_paths) or None,
    )

    @app.before_request
    def _begin() -> None:
        try:
            rule = request.url_rule
            label = f"{request.method} {rule.rule}" if rule is not None else "<no route>"
            set_greenlet_label(label)
            request_totals.set(RequestTotals())
        except Exception as exc:
            swallow("begin request", exc)

    @app.after_request
    def _end(response: Any) -> Any:
        try:
            totals = request_totals.get()
            if measure and totals is not None and totals.calls:
                trace.get_current_span().set_attributes(server_span_attributes(totals))
            request_totals.set(None)
            set_greenlet_label(None)
        except Exception as exc:
            swallow("end request", exc)
        return response

    from flask import Response

    from tracing import metrics

    def _metrics() -> Response:
        return Response(metrics.render(worker), mimetype=None, content_type=metrics.CONTENT_TYPE)

    app.add_url_rule(metrics_path, endpoint=metrics.ENDPOINT, view_func=_metrics)
    return TracingCallObserver(worker.tracer, measure=measure)


__all__ = ["attributes", "current", "init_app", "setup_worker", "shutdown_worker"]
