"""The server span of a Flask request, made only for a request that needs one.

Envoy samples at the edge (1 % by default) and says so in ``traceparent``'s flags. A
request it did not sample gets no OpenTelemetry object at all here: no span, no context,
no attributes (the contrib Flask instrumentation made a non-recording span and its
attribute dictionary for every one: ``pricingctl bench span-cost``). Its trace id still reaches the
upstreams: the incoming ``traceparent`` is kept on the request's totals and passed on as
is (``tracing.client``). A slow unsampled request is exported afterwards from what was
measured (``tracing.request_spans``).

A request Envoy sampled gets no live span either, where the timing core measures it: its
spans are built when it ends (``tracing.span_records``), a quarter of the SDK's cost on
the hub. Its server span's ids are in the context while it runs (for the logs).

The checks are one look at a well-formed version-00 ``traceparent`` (the flags byte, or
the W3C pattern), and only when the configured propagator (``OTEL_PROPAGATORS``) reads
that header. Every other request (no header, another propagator, a malformed header, a
mode without measurements) goes through the SDK: the configured propagator extracts the
parent, the sampler decides, the span is live.

Attribute names are OpenTelemetry's stable HTTP server conventions. The contrib
Flask/WSGI instrumentation's settings are honoured as it documents them, read once as
the worker starts (``tracing.settings.ServerSpanSettings``); each costs only the
requests that get a span, and nothing when unset: excluded URLs, captured request and
response headers (and their redacted values), and ``OTEL_SEMCONV_STABILITY_OPT_IN``'s
``http`` (the contrib's stable set, ``client.*`` included) and ``http/dup`` (the old
names too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import context, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.semconv._incubating.attributes.http_attributes import (
    HTTP_FLAVOR,
    HTTP_HOST,
    HTTP_METHOD,
    HTTP_SCHEME,
    HTTP_SERVER_NAME,
    HTTP_STATUS_CODE,
    HTTP_TARGET,
    HTTP_USER_AGENT,
)
from opentelemetry.semconv._incubating.attributes.net_attributes import (
    NET_HOST_NAME,
    NET_HOST_PORT,
    NET_PEER_IP,
    NET_PEER_NAME,
    NET_PEER_PORT,
)
from opentelemetry.semconv.attributes.client_attributes import CLIENT_ADDRESS, CLIENT_PORT
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

from tracing.settings import Semconv, ServerSpanSettings

TRACEPARENT: Final = "traceparent"
# "00-" 32 hex "-" 16 hex "-" 2 hex
_TRACEPARENT_LEN: Final = 55
_TRACEPARENT: Final = re.compile("00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE: Final = "0" * 32
#: WSGI environ key: the response's headers, kept as it starts when they are captured.
RESPONSE_HEADERS: Final = "pricing.response_headers"
_REQUEST_HEADER: Final = "http.request.header."
_RESPONSE_HEADER: Final = "http.response.header."
_REDACTED: Final = "[REDACTED]"
_NO_SETTINGS: Final = ServerSpanSettings()


def unsampled_traceparent(value: str | None) -> bool:
    """True when *value* is a well-formed version-00 traceparent whose sampled flag is
    off; anything else is left to the propagator."""
    if value is None or len(value) != _TRACEPARENT_LEN or not value.startswith("00-"):
        return False
    try:
        return not int(value[53:55], 16) & 1
    except ValueError:
        return False


def sampled_traceparent(value: str | None) -> tuple[str, int, int] | None:
    """(trace id as 32 hex digits, parent span id, flags) of a well-formed version-00
    ``traceparent`` whose sampled flag is on (the W3C rules the SDK's propagator applies:
    lower-case hex, neither id all zeros); None for anything else."""
    if value is None or len(value) != _TRACEPARENT_LEN:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    trace_hex, span_hex, flags_hex = match.groups()
    flags = int(flags_hex, 16)
    span_id = int(span_hex, 16)
    if not flags & 1 or not span_id or trace_hex == _ZERO_TRACE:
        return None
    return trace_hex, span_id, flags


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


def excluded(settings: ServerSpanSettings, request: Any) -> bool:
    """Whether *request*'s full URL matches the excluded URLs (the contrib's
    ``ExcludeList.url_disabled`` on ``flask.request.url``): it gets no server span."""
    pattern = settings.excluded_urls
    return pattern is not None and pattern.search(request.url) is not None


def start_server_span(
    tracer: trace.Tracer, route: str, request: Any, settings: ServerSpanSettings = _NO_SETTINGS
) -> tuple[trace.Span, object]:
    """Start and attach the server span of a Flask *request* whose parent the propagator
    extracts; returns the span and the token to detach."""
    environ = request.environ
    parent = propagate.extract(environ, getter=_getter)
    attrs = server_attributes(route, request, settings)
    span = tracer.start_span(route, context=parent, kind=SpanKind.SERVER, attributes=attrs)
    token = context.attach(trace.set_span_in_context(span, parent))
    return span, token


def server_attributes(
    route: str, request: Any, settings: ServerSpanSettings = _NO_SETTINGS
) -> dict[str, Any]:
    """What a server span of a Flask *request* starts with (the stable HTTP server
    conventions): method, path, scheme, route template, query, host, port, user agent;
    and what *settings* add (captured headers, the contrib's names)."""
    environ = request.environ
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
    if settings.semconv is not Semconv.PROJECT:
        attrs.update(_contrib_attributes(environ, settings.semconv))
    if settings.request_headers is not None:
        attrs.update(request_header_attributes(environ, settings))
    return attrs


def _contrib_attributes(environ: Mapping[str, Any], semconv: Semconv) -> dict[str, Any]:
    """What the contrib's WSGI conventions add under ``OTEL_SEMCONV_STABILITY_OPT_IN``:
    ``client.*`` (http, http/dup), and every old name (http/dup)."""
    out: dict[str, Any] = {}
    peer, peer_port = environ.get("REMOTE_ADDR"), environ.get("REMOTE_PORT")
    if peer:
        out[CLIENT_ADDRESS] = peer
    if peer_port and str(peer_port).isdigit():
        out[CLIENT_PORT] = int(peer_port)
    if semconv is not Semconv.HTTP_DUP:
        return out
    old = {
        HTTP_METHOD: environ.get("REQUEST_METHOD"),
        HTTP_SERVER_NAME: environ.get("SERVER_NAME"),
        HTTP_SCHEME: environ.get("wsgi.url_scheme"),
        HTTP_HOST: environ.get("HTTP_HOST"),
        NET_HOST_NAME: environ.get("HTTP_HOST"),
        HTTP_TARGET: environ.get("RAW_URI") or environ.get("REQUEST_URI"),
        NET_PEER_IP: peer,
        HTTP_USER_AGENT: environ.get("HTTP_USER_AGENT"),
    }
    out.update((k, v) for k, v in old.items() if v)
    port = environ.get("SERVER_PORT")
    if port and str(port).isdigit():
        out[NET_HOST_PORT] = int(port)
    if peer_port and str(peer_port).isdigit():
        out[NET_PEER_PORT] = int(peer_port)
    remote_host = environ.get("REMOTE_HOST")
    if remote_host and remote_host != peer:
        out[NET_PEER_NAME] = remote_host
    flavor = environ.get("SERVER_PROTOCOL", "")
    if flavor.upper().startswith("HTTP/"):
        out[HTTP_FLAVOR] = flavor[5:]
    return out


def _sanitized(settings: ServerSpanSettings, name: str, value: str) -> str:
    pattern = settings.sanitize
    return _REDACTED if pattern is not None and pattern.search(name) else value


def request_header_attributes(
    environ: Mapping[str, Any], settings: ServerSpanSettings
) -> dict[str, Any]:
    """``http.request.header.<name>`` for each request header whose name the captured
    patterns match (the contrib's ``collect_custom_request_headers_attributes``)."""
    pattern = settings.request_headers
    out: dict[str, Any] = {}
    if pattern is None:
        return out
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            name = key[5:].replace("_", "-")
            if pattern.fullmatch(name):
                attribute = _REQUEST_HEADER + name.lower().replace("-", "_")
                out[attribute] = (_sanitized(settings, name, value),)
    return out


def response_header_attributes(headers: Any, settings: ServerSpanSettings) -> dict[str, Any]:
    """``http.response.header.<name>`` for each response header (a WSGI header list)
    whose name the captured patterns match; repeated headers joined with commas (the
    contrib's ``collect_custom_response_headers_attributes``)."""
    pattern = settings.response_headers
    if pattern is None or not headers:
        return {}
    joined: dict[str, str] = {}
    for key, value in headers:
        name = key.lower()
        joined[name] = f"{joined[name]},{value}" if name in joined else value
    return {
        _RESPONSE_HEADER + name.replace("-", "_"): (_sanitized(settings, name, value),)
        for name, value in joined.items()
        if pattern.fullmatch(name)
    }


def outcome_attributes(
    status: int | None, exc: BaseException | None, semconv: Semconv = Semconv.PROJECT
) -> dict[str, Any]:
    """A server span's attributes once its request is over: the status code, and the
    error's type for an exception or a 5xx."""
    out: dict[str, Any] = {}
    if status is not None:
        out[HTTP_RESPONSE_STATUS_CODE] = status
        if semconv is Semconv.HTTP_DUP:
            out[HTTP_STATUS_CODE] = status
    if exc is not None:
        out[ERROR_TYPE] = type(exc).__qualname__
    elif status is not None and status >= 500:
        out[ERROR_TYPE] = str(status)
    return out


def end_server_span(
    span: trace.Span,
    token: object,
    status: int | None,
    exc: BaseException | None,
    settings: ServerSpanSettings = _NO_SETTINGS,
    response_headers: Any = None,
) -> None:
    """Set the outcome (and the captured *response_headers*), end the span and detach
    its context."""
    try:
        if span.is_recording():
            span.set_attributes(outcome_attributes(status, exc, settings.semconv))
            if response_headers is not None:
                span.set_attributes(response_header_attributes(response_headers, settings))
            if exc is not None:
                span.record_exception(exc)
            if exc is not None or (status is not None and status >= 500):
                span.set_status(Status(StatusCode.ERROR))
        span.end()
    finally:
        context.detach(token)  # type: ignore[arg-type]
