"""The fields of every JSON log line, the pools' (``tracing.logs``) and Envoy's access
log (``routing.envoy``) alike: one request is logged under the same names and units by
both, so one query finds it in either.

Names follow the OpenTelemetry log data model (``timestamp``, ``severity_text``,
``severity_number``, ``body``, ``trace_id``, ``span_id``, ``trace_flags``, the resource's
``service.name``) and OpenTelemetry's HTTP semantic conventions for the request
(``http.request.method``, ``url.path``, ``http.route``, ``http.response.status_code``).
Durations are milliseconds (``duration_ms``): Envoy's access log cannot write seconds.
A field without a value is left out, never written as null.
"""

from __future__ import annotations

from typing import Final

TIMESTAMP: Final = "timestamp"  # ISO 8601, UTC, milliseconds: 2026-11-20T17:30:00.123Z
SEVERITY_TEXT: Final = "severity_text"
SEVERITY_NUMBER: Final = "severity_number"
BODY: Final = "body"
LOGGER: Final = "logger"
SERVICE_NAME: Final = "service.name"
TRACE_ID: Final = "trace_id"  # 32 lower-case hex digits
SPAN_ID: Final = "span_id"  # 16 lower-case hex digits
TRACE_FLAGS: Final = "trace_flags"  # 2 hex digits: "01" sampled, "00" not
REQUEST_ID: Final = "request_id"
POOL: Final = "pool"
HTTP_METHOD: Final = "http.request.method"
URL_PATH: Final = "url.path"  # without the query string
HTTP_ROUTE: Final = "http.route"  # the URL rule's template
HTTP_STATUS: Final = "http.response.status_code"
DURATION_MS: Final = "duration_ms"  # request received -> response sent

#: OpenTelemetry's severity numbers for Python's levels.
SEVERITY_NUMBERS: Final = {"DEBUG": 5, "INFO": 9, "WARNING": 13, "ERROR": 17, "CRITICAL": 21}
