"""The names the layers share, each written once: media types, header names,
environment variables, metric names the manifests read, log field names.

Every layer may import this module (the gevent timing core excepted, which stays
usable on its own); no other module writes these values out again, and
tests/unit/toolkit/test_contract.py fails when one does.
"""

from __future__ import annotations

from typing import Final

# --- Media types ----------------------------------------------------------------------

#: RFC 9457 problem details: every error body, the app's, Envoy's, the pools' and
#: the simulator's.
PROBLEM_JSON: Final = "application/problem+json"
#: Every other JSON body: the app's answers and requests, the simulator's, the tools'.
JSON: Final = "application/json"

# --- Header names ---------------------------------------------------------------------
# HTTP header names are case-insensitive; these are written in lower case, and a
# spelling Envoy or WSGI needs (%REQ(X-REQUEST-ID)%, HTTP_X_REQUEST_ID) is derived.

#: The request id Envoy sets (or keeps) and the app echoes in its responses.
REQUEST_ID_HEADER: Final = "x-request-id"
#: Every response the app makes names the pool that served it in this header.
POOL_HEADER: Final = "x-pricing-pool"
#: A 5xx problem's trace id (the request id when the request has none), also its body's
#: ``trace_id``: what to search the logs and Jaeger for.
TRACE_ID_HEADER: Final = "x-pricing-trace-id"
#: When Envoy received the request (its %START_TIME%, Unix seconds with microseconds):
#: where the request's deadline starts, and how long it waited before the pool.
ENVOY_START_HEADER: Final = "x-pricing-envoy-start"
#: The route's timeout as Envoy enforces it (Envoy sets it on every routed request).
ENVOY_TIMEOUT_HEADER: Final = "x-envoy-expected-rq-timeout-ms"
#: Which attempt of the request this is (1 the first; Envoy sets it on every routed
#: request): a retry's or a hedge's ENVOY_TIMEOUT_HEADER is what was left when it was sent.
ENVOY_ATTEMPT_HEADER: Final = "x-envoy-attempt-count"
#: On a pool's 503 for a request it shed (the reason, e.g. ``budget``): Envoy retries
#: such an answer on another replica, or waits for the hedged attempt, where the pool
#: has several; the request was not worked on, so that is safe.
SHED_HEADER: Final = "x-pricing-shed"


def wsgi_key(header: str) -> str:
    """The WSGI environ key of a request header (``HTTP_X_REQUEST_ID``)."""
    return "HTTP_" + header.upper().replace("-", "_")


# --- Environment variables ------------------------------------------------------------
# What a pool process (and the launcher, the image, the benchmark) reads. `stack` and
# the manifests set them; `pricing`, `routing.load`, `tracing` and `gunicorn_conf` read
# them. PRICING_* only where no standard name exists.

#: Path of the route config file (default: routes.toml next to the code).
ROUTES_ENV: Final = "PRICING_ROUTES"
#: The pool this process serves (default: the shared pool).
POOL_ENV: Final = "PRICING_POOL"
#: Where a pool or the simulator listens inside its container (the image's port).
PORT_ENV: Final = "PRICING_PORT"
#: Base URL of every upstream, overriding [upstreams].base_url (the stack's simulator).
UPSTREAM_URL_ENV: Final = "PRICING_UPSTREAM_URL"
#: PEM bundle of the CAs an `https://` upstream's certificate is checked against
#: (default: the system's).
UPSTREAM_CA_FILE_ENV: Final = "PRICING_UPSTREAM_CA_FILE"
#: Directory under which each pool keeps its metrics files (one sub-directory per pool,
#: emptied when the pool starts; default: under the system's temporary directory).
METRICS_DIR_ENV: Final = "PRICING_METRICS_DIR"
#: prometheus_client's multiprocess directory (its own name), one per pool.
MULTIPROC_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
#: ``off``: the pools write no access line per request (default ``on``; Envoy's access
#: log has one per request either way).
ACCESS_LOG_ENV: Final = "PRICING_ACCESS_LOG"
#: Tracing mode of the pools: ``off``, ``spans`` or ``full`` (the default).
TRACING_ENV: Final = "PRICING_TRACING"
#: The JSON-lines file spans are written to when no OTLP endpoint is set.
SPAN_FILE_ENV: Final = "PRICING_SPAN_FILE"
#: Scheduling delay (ms) from which a traced call, or a traced request's inbound delay,
#: gets its wait drawn as child spans (``tracing.wait_spans``); ``off``: never.
WAIT_SPANS_ENV: Final = "PRICING_TRACE_WAIT_SPANS_MS"
#: OpenTelemetry's standard base URL of the OTLP exporter (/v1/traces is added).
OTLP_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: Query parameters kept in traced URLs (comma-separated; the rest are redacted).
QUERY_ALLOW_ENV: Final = "PRICING_TRACE_QUERY_ALLOW"
#: Where built tools (the Jaeger binary) are cached (default ~/.cache/pricingservice).
CACHE_DIR_ENV: Final = "PRICING_CACHE_DIR"
#: Seconds `pricingctl bench` watches the machine's CPU before it starts (default 3).
BENCH_PREFLIGHT_ENV: Final = "PRICING_BENCH_PREFLIGHT_S"
#: Debugging only: where `bench.heapwatch` writes tracemalloc snapshots of the pools'
#: workers and the simulator (unset: nothing is traced).
HEAPWATCH_DIR_ENV: Final = "PRICING_HEAPWATCH_DIR"


def upstream_env(upstream: str, setting: str) -> str:
    """The variable that overrides one setting of one upstream:
    ``PRICING_UPSTREAM_<NAME>_<SETTING>`` (``URL``, ``MAX_WAIT_MS``)."""
    return f"PRICING_UPSTREAM_{upstream.upper()}_{setting}"


# --- Metric names the manifests and the alert rules read -------------------------------
# The pools expose them (``tracing.metric_families``); the io pool's HPA
# (``routing.kubernetes``) and the Prometheus rules (``routing.alerts``) read them.

#: The pools' loop-lag histogram, read by the io pool's HPA through prometheus-adapter.
LOOP_LAG_SERIES: Final = "pricing_loop_lag_seconds"
#: OpenTelemetry's http.server.request.duration, as Prometheus names it (dots become
#: underscores, the unit a suffix): the RED histogram, with HTTP_*_LABEL and ``pool``.
HTTP_SERVER_DURATION_SERIES: Final = "http_server_request_duration_seconds"
HTTP_METHOD_LABEL: Final = "http_request_method"
HTTP_ROUTE_LABEL: Final = "http_route"  # the URL rule's template, never the raw URL
HTTP_STATUS_LABEL: Final = "http_response_status_code"
#: The duration histograms' fixed upper bounds (seconds; +Inf last). The RED histogram
#: adds every route's timeout (``RouteConfig.request_duration_bounds_s``): the rules read
#: "answered within the route's timeout" from the bucket whose bound is that timeout. From
#: 0.5 ms (a call that waited for nothing) to 10 s, the longest route timeout; 0.2 s is
#: the io pool's p99 target, so "within target" is one bucket, not an interpolation.
DURATION_BUCKETS_S: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Every request's count and sum per (method, route, status, pool): request rates.
ROUTE_REQUESTS_SERIES: Final = "pricing_route_request_duration_seconds"
#: Requests a pool refused at once, by ``route`` and ``reason``.
SHED_SERIES: Final = "pricing_shed_total"
#: Per route, the time its requests waited for the hub (histogram).
ROUTE_HUB_WAIT_SERIES: Final = "pricing_route_hub_wait_seconds"
#: Of a ``victim`` route's hub wait, the seconds during which the culprit ``route`` ran.
ROUTE_CULPRIT_SERIES: Final = "pricing_route_culprit_seconds_total"

# --- Log field names ------------------------------------------------------------------
# The fields of every JSON log line, the pools' (``tracing.logs``) and Envoy's access
# log (``routing.envoy``) alike: one request is logged under the same names and units by
# both, so one query finds it in either.
#
# Names follow the OpenTelemetry log data model (``timestamp``, ``severity_text``,
# ``severity_number``, ``body``, ``trace_id``, ``span_id``, ``trace_flags``, the
# resource's ``service.name``) and OpenTelemetry's HTTP semantic conventions for the
# request (``http.request.method``, ``url.path``, ``http.route``,
# ``http.response.status_code``). Durations are milliseconds (``duration_ms``): Envoy's
# access log cannot write seconds. A field without a value is left out, never null.

LOG_TIMESTAMP: Final = "timestamp"  # ISO 8601, UTC, milliseconds: 2026-11-20T17:30:00.123Z
LOG_SEVERITY_TEXT: Final = "severity_text"
LOG_SEVERITY_NUMBER: Final = "severity_number"
LOG_BODY: Final = "body"
LOG_LOGGER: Final = "logger"
LOG_SERVICE_NAME: Final = "service.name"
LOG_TRACE_ID: Final = "trace_id"  # 32 lower-case hex digits
LOG_SPAN_ID: Final = "span_id"  # 16 lower-case hex digits
LOG_TRACE_FLAGS: Final = "trace_flags"  # 2 hex digits: "01" sampled, "00" not
LOG_REQUEST_ID: Final = "request_id"
LOG_POOL: Final = "pool"
LOG_HTTP_METHOD: Final = "http.request.method"
LOG_URL_PATH: Final = "url.path"  # without the query string
LOG_HTTP_ROUTE: Final = "http.route"  # the URL rule's template
LOG_HTTP_STATUS: Final = "http.response.status_code"
LOG_DURATION_MS: Final = "duration_ms"  # request received -> response sent

#: OpenTelemetry's severity numbers for Python's levels.
SEVERITY_NUMBERS: Final = {"DEBUG": 5, "INFO": 9, "WARNING": 13, "ERROR": 17, "CRITICAL": 21}
