"""The server span of a Flask request, made only for a request that needs one.

Envoy samples at the edge (1 % by default) and says so in ``traceparent``'s flags. A
request it did not sample gets no OpenTelemetry object at all here: no span, no context,
no attributes (the contrib Flask instrumentation made a non-recording span and its
attribute dictionary for every one, ~50 us a request). Its trace id still reaches the
upstreams: the incoming ``traceparent`` is kept on the request's totals and passed on as
is (``tracing.client``). A slow unsampled request is exported afterwards from what was
measured (``tracing.server._export_slow``).

The check is one look at the flags byte of a well-formed version-00 ``traceparent``,
and only when the configured propagator (``OTEL_PROPAGATORS``) reads that header. Every
other request (sampled, no header, another propagator, a malformed header) goes through
the SDK: the configured propagator extracts the parent, the sampler decides.

Attribute names are OpenTelemetry's stable HTTP server conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import context, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_METHOD,
    HTTP_RESPONSE_STATUS_CODE,
    HTTP_ROUTE,
)
from opentelemetry.semconv.attributes.network_attributes import NETWORK_PROTOCOL_VERSION
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.semconv.attributes.url_attributes import URL_PATH, URL_QUERY, URL_SCHEME
from opentelemetry.semconv.attributes.user_agent_attributes import USER_AGENT_ORIGINAL
from opentelemetry.trace import SpanKind, Status, StatusCode

TRACEPARENT: Final = "traceparent"
# "00-" 32 hex "-" 16 hex "-" 2 hex
_TRACEPARENT_LEN: Final = 55


def unsampled_traceparent(value: str | None) -> bool:
    """True when *value* is a well-formed version-00 traceparent whose sampled flag is
    off; anything else is left to the propagator."""
    if value is None or len(value) != _TRACEPARENT_LEN or not value.startswith("00-"):
        return False
    try:
        return not int(value[53:55], 16) & 1
    except ValueError:
        return False


def propagator_reads_traceparent() -> bool:
    """Whether the configured propagator (OTEL_PROPAGATORS) uses ``traceparent``."""
    return TRACEPARENT in propagate.get_global_textmap().fields


class _EnvironGetter(Getter[Mapping[str, Any]]):
    """Reads carrier keys from a WSGI environ (``traceparent`` -> ``HTTP_TRACEPARENT``)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get("HTTP_" + key.upper().replace("-", "_"))
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [k[5:].lower().replace("_", "-") for k in carrier if k.startswith("HTTP_")]


_getter = _EnvironGetter()


def start_server_span(tracer: trace.Tracer, route: str, request: Any) -> tuple[trace.Span, object]:
    """Start and attach the server span of a Flask *request* whose parent the propagator
    extracts; returns the span and the token to detach."""
    environ = request.environ
    parent = propagate.extract(environ, getter=_getter)
    template = route.partition(" ")[2]
    attrs: dict[str, Any] = {
        HTTP_REQUEST_METHOD: request.method,
        URL_PATH: request.path,
        URL_SCHEME: environ.get("wsgi.url_scheme", "http"),
    }
    if template:
        attrs[HTTP_ROUTE] = template
    query = environ.get("QUERY_STRING")
    if query:
        # Conditionally required by the HTTP conventions; its values are redacted by the
        # provider's QueryRedactor as the span starts (allow-listed keys keep theirs).
        attrs[URL_QUERY] = query
    host = environ.get("SERVER_NAME")
    if host:
        attrs[SERVER_ADDRESS] = host
    port = environ.get("SERVER_PORT")
    if port and str(port).isdigit():
        attrs[SERVER_PORT] = int(port)
    agent = environ.get("HTTP_USER_AGENT")
    if agent:
        attrs[USER_AGENT_ORIGINAL] = agent
    protocol = environ.get("SERVER_PROTOCOL", "")
    if protocol.startswith("HTTP/"):
        attrs[NETWORK_PROTOCOL_VERSION] = protocol[5:]
    span = tracer.start_span(route, context=parent, kind=SpanKind.SERVER, attributes=attrs)
    token = context.attach(trace.set_span_in_context(span, parent))
    return span, token


def end_server_span(
    span: trace.Span, token: object, status: int | None, exc: BaseException | None
) -> None:
    """Set the outcome, end the span and detach its context."""
    try:
        if span.is_recording():
            if status is not None:
                span.set_attribute(HTTP_RESPONSE_STATUS_CODE, status)
            if exc is not None:
                span.record_exception(exc)
                span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR))
            elif status is not None and status >= 500:
                span.set_attribute(ERROR_TYPE, str(status))
                span.set_status(Status(StatusCode.ERROR))
        span.end()
    finally:
        context.detach(token)  # type: ignore[arg-type]
