"""The Flask side of a worker's tracing, as OpenTelemetry contrib's Flask instrumentor:
``FlaskTracing(worker).instrument(app)`` gives each request Envoy sampled a server span
(``server_span``; an unsampled one gets none), labels its greenlet with its route
template, measures it (``server_timing``) and accounts it (``request_spans``);
``uninstrument(app)`` undoes exactly that. A second ``instrument`` is harmless: the app
carries a marker (``INSTRUMENTED``) with what was patched.

The hooks run for every request: each is a closure over what it needs, bound once per
app, with no lookup through the instrumentor. Their cost: ``pricingctl bench span-cost``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan

from tracing.client import RequestTotals, SampledTrace, TracingCallObserver, request_totals
from tracing.request_spans import FinishedRequest, account, server_context
from tracing.route import route_of
from tracing.server_span import (
    RESPONSE_HEADERS,
    end_server_span,
    excluded,
    propagator_reads_traceparent,
    sampled_traceparent,
    start_server_span,
    unsampled_traceparent,
)
from tracing.settings import Mode
from tracing.timing import server_timing
from tracing.timing.hook_errors import swallow
from tracing.timing.labels import set_greenlet_label
from tracing.timing.server_timing import RequestMeasurement
from tracing.worker import WorkerTracing

#: ``app.extensions`` key: the tracing mode the app was built under (``"off"`` included),
#: for readiness.
MODE: Final = "tracing"
#: ``app.extensions`` key marking an instrumented app: what ``uninstrument`` restores.
INSTRUMENTED: Final = "tracing.instrumented"

_ENVIRON_MEASUREMENT = "pricing.request_measurement"
_ENVIRON_SPAN = "pricing.server_span"
_ENVIRON_ROUTE = "pricing.route"
_ENVIRON_STATUS = "pricing.status_line"
# The context token of a request whose spans are built at its end (detached at its end).
_ENVIRON_SAMPLED = "pricing.sampled_context"
# What app.wsgi_app was when the app's own attribute was not set (the class's method).
_INHERITED: Final = object()


@dataclass(frozen=True)
class _Patched:
    """What ``instrument`` changed on one app."""

    wsgi_app: Any  # the app's own wsgi_app before, or _INHERITED
    begin: Callable[[], None]
    end: Callable[[BaseException | None], None]
    observer: TracingCallObserver


class FlaskTracing:
    """Instruments Flask apps for one worker's tracing (*worker*: None when tracing is
    off). Requests to *untraced_paths* (health checks, scrapes) get no span."""

    def __init__(self, worker: WorkerTracing | None, untraced_paths: Sequence[str] = ()) -> None:
        self.worker = worker
        self.untraced_paths = frozenset(untraced_paths)

    def instrument(self, app: Any) -> TracingCallObserver | None:
        """Instrument *app* (a second call changes nothing); returns the upstream-call
        observer, or None when tracing is off. Records the mode in
        ``app.extensions[MODE]``."""
        worker = self.worker
        app.extensions[MODE] = worker.settings.mode.value if worker else Mode.OFF.value
        if worker is None:
            return None
        patched: _Patched | None = app.extensions.get(INSTRUMENTED)
        if patched is not None:
            return patched.observer
        measure = worker.instrumentor is not None
        # The compiled (or reference) begin and finish, bound once: they run for every
        # request.
        begin_request, finish_request = server_timing.bound_requests()
        begin = _make_begin(worker, self.untraced_paths, measure)
        end = _make_end(worker, finish_request)
        own = app.__dict__.get("wsgi_app", _INHERITED)
        keep_headers = worker.settings.server.response_headers is not None
        app.wsgi_app = _wrap_wsgi(app.wsgi_app, begin_request if measure else None, keep_headers)
        app.before_request(begin)
        app.teardown_request(end)
        observer = TracingCallObserver(
            worker.tracer,
            measure=measure,
            metrics=worker.metrics,
            wait_spans_s=worker.settings.wait_spans_s,
        )
        app.extensions[INSTRUMENTED] = _Patched(own, begin, end, observer)
        return observer

    @staticmethod
    def uninstrument(app: Any) -> None:
        """Undo ``instrument`` on *app*: its ``wsgi_app`` back to what it was, the hooks
        gone (idempotent)."""
        patched: _Patched | None = app.extensions.pop(INSTRUMENTED, None)
        if patched is None:
            return
        if patched.wsgi_app is _INHERITED:
            del app.wsgi_app
        else:
            app.wsgi_app = patched.wsgi_app
        _remove(app.before_request_funcs.get(None), patched.begin)
        _remove(app.teardown_request_funcs.get(None), patched.end)


def _remove(hooks: list[Any] | None, hook: Any) -> None:
    if hooks is not None and hook in hooks:
        hooks.remove(hook)


def _wrap_wsgi(
    inner: Any, begin_request: Callable[[], RequestMeasurement] | None, keep_headers: bool = False
) -> Any:
    """Outermost, so the handler's time starts before Flask runs. The status line is read
    as the response starts, which Flask does before its teardown (``_end``): cheaper
    than an after_request hook (``pricingctl bench span-cost``). *keep_headers*: the
    response headers too, for the captured ones (``RESPONSE_HEADERS``)."""

    def traced_wsgi_app(environ: dict[str, Any], start_response: Any) -> Any:
        if begin_request is not None:
            environ[_ENVIRON_MEASUREMENT] = begin_request()

        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            environ[_ENVIRON_STATUS] = status
            if keep_headers:
                environ[RESPONSE_HEADERS] = headers
            return start_response(status, headers, exc_info)

        return inner(environ, start)

    return traced_wsgi_app


def _make_begin(
    worker: WorkerTracing, untraced: frozenset[str], measure: bool
) -> Callable[[], None]:
    """The ``before_request`` hook: label the greenlet, and decide the request's spans."""
    from flask import request

    # The sampled flag decides cheaply only where the propagator reads traceparent.
    precheck = propagator_reads_traceparent()
    tracer = worker.tracer
    spans = worker.spans
    build_sampled = precheck and measure and worker.build_sampled
    new_span_id = spans.new_span_id if spans is not None else None
    server = worker.settings.server

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
            # No span for health checks, scrapes and the excluded URLs (looked at only
            # for a request that would get one).
            skip = req.path in untraced or excluded(server, req)
            if build_sampled and new_span_id is not None and offset is not None and not skip:
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
            if not skip:
                environ[_ENVIRON_SPAN] = start_server_span(tracer, route, req, server)
        except Exception as exc:
            swallow("begin request", exc)

    return _begin


def _make_end(
    worker: WorkerTracing, finish_request: Callable[..., Any]
) -> Callable[[BaseException | None], None]:
    """The ``teardown_request`` hook: finish the measurement, account the request, end
    its span."""
    from flask import request

    server = worker.settings.server

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
                account(
                    worker, FinishedRequest(route, timing, totals, status, req.headers), req, exc
                )
            request_totals.set(None)
            set_greenlet_label(None)
            started = environ.pop(_ENVIRON_SPAN, None)
            if started is not None:
                end_server_span(
                    started[0], started[1], status, exc, server, environ.get(RESPONSE_HEADERS)
                )
            token = environ.pop(_ENVIRON_SAMPLED, None)
            if token is not None:
                context.detach(token)
        except Exception as err:
            swallow("end request", err)

    return _end


def _status_code(status_line: str | None) -> int | None:
    """The code of a WSGI status line (``"200 OK"``); None before the response started."""
    if status_line is None:
        return None
    try:
        return int(status_line[:3])
    except ValueError:
        return None
