"""JSON logs, one object per line, each naming the request it belongs to.

Every line carries ``timestamp`` (UTC, ISO 8601), ``severity_text``,
``severity_number``, ``body``, ``logger``, ``service.name``, ``pool``, ``pid`` and,
inside a request, ``trace_id``, ``span_id``, ``trace_flags`` and ``http.route``: the
same trace id, under the same name, as Envoy's access log (``%TRACE_ID%``) and the
trace in Jaeger, so one request can be followed from Envoy to the pool to its spans.
The names are ``toolkit.contract``'s (OpenTelemetry's log data model), shared with
Envoy's access log; a field without a value is left out. ``init_app`` records a
request's ids when it starts; the formatter reads them from the request's context
(each greenlet has its own), gunicorn's access log from the WSGI environ.

The trace id is there whether or not the request was sampled (Envoy sends it in
``traceparent`` either way); with tracing off it is read from that header.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from toolkit import contract
from tracing.route import NO_ROUTE, route_of

#: Where the request's ids are kept in the WSGI environ (gunicorn's access log reads it).
ENVIRON_KEY: Final = "pricing.log_ids"


@dataclass(frozen=True, slots=True)
class RequestIds:
    trace_id: str | None
    span_id: str | None
    route: str | None
    sampled: bool = False


_current: ContextVar[RequestIds | None] = ContextVar("pricing_log_ids", default=None)


def current_ids() -> RequestIds | None:
    """The ids of the request being served in this greenlet, if any."""
    return _current.get()


def _ids_of(request: Any) -> RequestIds:
    trace_id = span_id = None
    sampled = False
    try:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
            sampled = bool(context.trace_flags.sampled)
    except ImportError:  # pragma: no cover - OpenTelemetry is a runtime dependency
        pass
    if trace_id is None:  # tracing off: the ids Envoy sent
        parts = (request.headers.get("traceparent") or "").split("-")
        if len(parts) == 4 and len(parts[1]) == 32 and len(parts[2]) == 16:
            trace_id, span_id, sampled = parts[1], parts[2], parts[3] == "01"
    return RequestIds(trace_id, span_id, route_of(request), sampled)


def init_app(app: Any) -> None:
    """Record each request's ids for its log lines. Register after tracing's own
    instrumentation, so that the request's server span is current."""
    from flask import request

    @app.before_request
    def _remember() -> None:
        ids = _ids_of(request)
        _current.set(ids)
        request.environ[ENVIRON_KEY] = ids


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a traceback becomes the ``exception`` field (its
    newlines escaped: the record stays on one line)."""

    def __init__(self, pool: str | None = None, service: str | None = None) -> None:
        super().__init__()
        self.pool = pool if pool is not None else os.environ.get(contract.POOL_ENV)
        if service is None:
            from tracing.settings import service_name

            service = service_name()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        return self.line(
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            record.process,
            getattr(record, "request_ids", None) or _current.get(),
            fields if isinstance(fields, dict) else None,
            self.formatException(record.exc_info) if record.exc_info else None,
        )

    def line(
        self,
        created: float,
        level: str,
        logger: str,
        message: str,
        pid: int | None,
        ids: RequestIds | None,
        fields: dict[str, Any] | None = None,
        exception: str | None = None,
    ) -> str:
        """One line, without a LogRecord: gunicorn's access log writes one per request
        and skips the logging machinery (``gunicorn_conf.json_logs``)."""
        out: dict[str, Any] = {
            contract.LOG_TIMESTAMP: _iso(created),
            contract.LOG_SEVERITY_TEXT: level,
            contract.LOG_SEVERITY_NUMBER: contract.SEVERITY_NUMBERS.get(level, 0),
            contract.LOG_BODY: message,
            contract.LOG_LOGGER: logger,
            contract.LOG_SERVICE_NAME: self.service,
            contract.LOG_POOL: self.pool,
            "pid": pid,
        }
        if ids is not None:
            out[contract.LOG_TRACE_ID] = ids.trace_id
            out[contract.LOG_SPAN_ID] = ids.span_id
            if ids.trace_id is not None:
                out[contract.LOG_TRACE_FLAGS] = "01" if ids.sampled else "00"
            if ids.route is not None and ids.route != NO_ROUTE:
                out[contract.LOG_HTTP_ROUTE] = ids.route.partition(" ")[2]
        if fields:
            out.update(fields)
        if exception is not None:
            out["exception"] = exception
        out = {key: value for key, value in out.items() if value is not None}
        return json.dumps(out, separators=(",", ":"), default=str)


def _iso(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"
