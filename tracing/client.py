"""Client spans for upstream calls, each carrying its network / scheduling-delay split.

The io pool calls its upstreams with `pricing.httpclient` (chosen for CPU per
call; no contrib instrumentation exists for it), so this observer creates the
client spans itself, following the OpenTelemetry HTTP client conventions, and
injects W3C `traceparent` into the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from tracing import attributes
from tracing.call_timing import begin_call
from tracing.hook_errors import swallow

UPSTREAM_ATTR = "pricing.upstream"


class RequestTotals:
    """Sum of the scheduling delay of one server request's upstream calls."""

    __slots__ = ("calls", "network_s", "scheduling_delay_s")

    def __init__(self) -> None:
        self.calls = 0
        self.network_s = 0.0
        self.scheduling_delay_s = 0.0


# Set per request by the server side (tracing.server); fan-out greenlets run in a
# copy of the request's context, so they see, and add to, the same object.
request_totals: ContextVar[RequestTotals | None] = ContextVar("request_totals", default=None)


class _Observed:
    """What pricing.httpclient's client reads back: extra headers, and the status."""

    __slots__ = ("headers", "status")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.status: int | None = None


class TracingCallObserver:
    """A `pricing.httpclient.CallObserver` (by shape: tracing imports nothing from pricing)."""

    def __init__(self, tracer: trace.Tracer, *, measure: bool) -> None:
        self._tracer = tracer
        self._measure = measure

    @contextmanager
    def call(
        self, upstream: str, method: str, host: str, port: int, path: str
    ) -> Iterator[_Observed]:
        route = path.split("?", 1)[0]
        observed = _Observed()
        span_attributes: dict[str, Any] = {
            "http.request.method": method,
            "server.address": host,
            "server.port": port,
            "url.path": route,
            UPSTREAM_ATTR: upstream,
        }
        with self._tracer.start_as_current_span(
            f"{method} {route}", kind=SpanKind.CLIENT, attributes=span_attributes
        ) as span:
            propagate.inject(observed.headers)
            measurement = begin_call() if self._measure else None
            try:
                yield observed
            finally:
                try:
                    if observed.status is not None:
                        span.set_attribute("http.response.status_code", observed.status)
                        if observed.status >= 400:  # client spans: 4xx is an error too
                            span.set_status(Status(StatusCode.ERROR))
                    if measurement is not None:
                        timing = measurement.finish()
                        span.set_attributes(timing.as_attributes())
                        totals = request_totals.get()
                        if totals is not None:
                            totals.calls += 1
                            totals.network_s += timing.network_s
                            totals.scheduling_delay_s += timing.scheduling_delay_s
                except Exception as exc:  # tracing never breaks a request
                    swallow("client span attributes", exc)


def server_span_attributes(totals: RequestTotals) -> dict[str, Any]:
    return {
        attributes.SCHEDULING_DELAY: totals.scheduling_delay_s,
        attributes.NETWORK_DURATION: totals.network_s,
        "pricing.upstream_calls": totals.calls,
        # A searchable flag: Jaeger's tag search cannot compare the delay as a number.
        attributes.SLOW: totals.scheduling_delay_s >= attributes.SLOW_SCHEDULING_DELAY_S,
    }
