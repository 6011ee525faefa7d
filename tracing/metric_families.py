"""Every metric family of a pool worker, declared once: the names, label sets, buckets
and help texts in ``FAMILIES``, one row each, which ``tracing.metrics.PoolMetrics``
builds in one loop. Pure data (no prometheus_client here); a later family is one more
row.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

from toolkit.contract import (
    DURATION_BUCKETS_S,
    HTTP_METHOD_LABEL,
    HTTP_ROUTE_LABEL,
    HTTP_SERVER_DURATION_SERIES,
    HTTP_STATUS_LABEL,
    LOOP_LAG_SERIES,
    ROUTE_CULPRIT_SERIES,
    ROUTE_HUB_WAIT_SERIES,
    ROUTE_REQUESTS_SERIES,
    SHED_SERIES,
)

#: ``sys.getallocatedblocks()`` of the live workers (``tracing.process_sample``).
ALLOCATED_BLOCKS: Final = "pricing_python_allocated_blocks"

#: Why a pool refused a request at once (``pricing_shed_total{reason}``): it reached its
#: handler with less of its deadline left than its route needs (``min_budget_ms``).
SHED_REASONS = ("budget",)
#: Why an upstream call failed (``pricing_upstream_failures_total{reason}``).
#: ``circuit_open`` is reserved for a circuit breaker: nothing emits it yet.
FAILURE_REASONS: Final = (
    "timeout",
    "refused",
    "reset",
    "connect",
    "5xx",
    "4xx",
    "bad_response",
    "bulkhead_full",
    "circuit_open",
    "error",
)

# Every duration histogram has DURATION_BUCKETS_S (toolkit.contract); the RED
# histogram's are those and every route's timeout (``RouteConfig.request_duration_bounds_s``,
# given to ``PoolMetrics``): the alert rules read the bucket at a route's timeout.
#: Upper bounds of the per-route timing histograms (inbound delay, its CPU wait, handler,
#: hub wait): a short set, as these are per route on top of the RED family (which keeps
#: DURATION_BUCKETS_S). 1 ms: waited for nothing; 5 ms: `routes suggest`'s CPU-heavy
#: threshold (one such request holds the hub that long); 20 ms: the io pool's loop-lag
#: target; 50 ms; 200 ms: the io pool's p99 target; 1 s; 10 s: the longest route timeout.
ROUTE_TIMING_BUCKETS_S: Final = (0.001, 0.005, 0.02, 0.05, 0.2, 1.0, 10.0)
#: Upper bounds of the loop-lag histogram (seconds). The io pool's HPA targets a p99
#: of 20 ms (deploy/kubernetes): 0.02 is a bound, with 15 and 25 ms either side, so the
#: p99 near the target is read between close bounds.
LOOP_LAG_BUCKETS_S: Final = (
    0.001,
    0.005,
    0.01,
    0.015,
    0.02,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)

#: OpenTelemetry's http.server.request.duration, as Prometheus names it (dots become
#: underscores, the unit a suffix), with its attributes as labels, plus the pool.
HTTP_SERVER_DURATION: Final = HTTP_SERVER_DURATION_SERIES
HTTP_SERVER_LABELS: Final = (HTTP_METHOD_LABEL, HTTP_ROUTE_LABEL, HTTP_STATUS_LABEL, "pool")
#: Methods kept as they are; any other is "_OTHER" (OpenTelemetry's rule: a client
#: inventing methods must not create series).
KNOWN_METHODS: Final = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)
BUILD_INFO: Final = "pricing_build_info"

#: Names `pricingctl routes suggest` reads back (``tracing.readback.usage``), as exposed.
HANDLER: Final = "pricing_handler_duration_seconds"
INBOUND_DELAY: Final = "pricing_inbound_delay_seconds"
ROUTE_HUB_WAIT: Final = ROUTE_HUB_WAIT_SERIES
ROUTE_CPU: Final = "pricing_route_cpu_seconds_total"
ROUTE_NETWORK: Final = "pricing_route_network_seconds_total"
ROUTE_CULPRIT: Final = ROUTE_CULPRIT_SERIES
#: The culprit (or route) that stands for the folded ones; "<...>" like ``<hub>``: never
#: placed.
CULPRIT_OTHER: Final = "<other>"
#: Culprit seconds grow routes x routes: per victim, each worker exposes at most this
#: many culprits by name (the ones with the most seconds when it first had room), and
#: folds every other culprit's seconds into CULPRIT_OTHER. A pool's culprit series are
#: then at most routes x workers x (CULPRIT_TOP_K + 1), however many routes run there.
CULPRIT_TOP_K: Final = 5
#: The per-route timing histograms (ROUTE_TIMING_BUCKETS_S) keep their own series for
#: at most this many routes per worker: the ones with the most requests when it first
#: had room; every other route's observations go to route=CULPRIT_OTHER. The RED
#: summary (ROUTE_REQUESTS) and the route CPU, network and culprit counters stay per
#: route (what `routes suggest` counts requests and CPU by).
ROUTE_TIMING_TOP_K: Final = 16
#: The RED histogram (HTTP_SERVER_DURATION, a bucket a bound a series) keeps its own series
#: for at most this many (method, route) per worker, chosen like the timing histograms'
#: and as many (the busiest when it first had room, named for good, every status of a
#: named route included); every other route's observations go to
#: http_route=CULPRIT_OTHER, with their method, status and pool. So the histogram's
#: series stay at most (RED_TOP_K + methods) x statuses in use per worker, and the
#: pool's latency distribution summed over routes stays whole.
RED_TOP_K: Final = ROUTE_TIMING_TOP_K
#: What stays exact per (method, route, status, pool) past RED_TOP_K: a summary (count
#: and sum, no quantiles, two lines a series) fed at flush from the RED histogram's own
#: in-process children, so the request path pays nothing for it. Requests per route
#: (`routes suggest`), error rates per route and mean latency per route come from here.
ROUTE_REQUESTS: Final = ROUTE_REQUESTS_SERIES
#: Counts the label sets a worker folded into CULPRIT_OTHER, per family: (culprit,
#: victim) pairs of the culprit family, routes of the timing histograms, (method,
#: route) of the RED histogram.
SERIES_FOLDED: Final = "pricing_metric_series_folded_total"


class Kind(Enum):
    """How a row is built (``PoolMetrics._build``)."""

    COUNTER = "counter"
    HISTOGRAM = "histogram"
    #: A per-route histogram naming at most ROUTE_TIMING_TOP_K routes per worker.
    TOP_ROUTES = "top_routes"
    #: The RED histogram, naming at most RED_TOP_K (method, route), fed with the summary
    #: ROUTE_REQUESTS (the row before it).
    RED = "red"
    SUMMARY = "summary"
    #: The (culprit, victim) counter naming at most CULPRIT_TOP_K culprits per victim.
    TOP_CULPRITS = "top_culprits"
    #: SERIES_FOLDED: made before every other row (they count their folds into it), and
    #: flushed where its row stands.
    FOLDED = "folded"
    #: A live gauge (``mode``: prometheus_client's multiprocess mode), set, not flushed.
    GAUGE = "gauge"


#: prometheus_client's multiprocess mode of a live gauge.
GaugeMode = Literal["livesum", "livemin", "max"]


@dataclass(frozen=True)
class Spec:
    """One metric family. *name* as prometheus_client takes it (a counter without its
    ``_total``); *help* may name ``{top_k}``, the family's top-k, filled in when built."""

    attr: str | None
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    mode: GaugeMode | None = None


_UPSTREAM: Final = ("upstream",)
_ROUTE: Final = ("route",)

#: Every family, in the order they are flushed: SERIES_FOLDED after every family that
#: folds, so a flush carries a fold and its count together.
FAMILIES: Final = (
    # RED per route, as OpenTelemetry's http.server.request.duration: the route is the
    # template ("/v1/offers/bike", "" when no rule matched), never a raw URL. The
    # histogram names the busiest (method, route) of each worker (RED_TOP_K), the summary
    # keeps every one's count and sum (RED_TOP_K's comment says why).
    Spec(
        "route_requests",
        ROUTE_REQUESTS,
        Kind.SUMMARY,
        "Duration of HTTP server requests per route, every route: count and sum "
        f"({HTTP_SERVER_DURATION} has the buckets of the busiest).",
        HTTP_SERVER_LABELS,
    ),
    Spec(
        "request_duration",
        HTTP_SERVER_DURATION,
        Kind.RED,
        "Duration of HTTP server requests: from the app receiving a request until "
        "its response; per worker, the {top_k} busiest routes by name, the rest "
        f"as {HTTP_ROUTE_LABEL}={CULPRIT_OTHER!r} ({ROUTE_REQUESTS} has every route).",
        HTTP_SERVER_LABELS,
        DURATION_BUCKETS_S,
    ),
    # Answered 503 without being worked on, by reason (SHED_REASONS).
    Spec(
        "shed",
        SHED_SERIES.removesuffix("_total"),
        Kind.COUNTER,
        "Requests the pool refused at once instead of working on them, by route and reason.",
        ("route", "reason"),
    ),
    # Per upstream: every call, its failures by reason, its duration.
    Spec(
        "upstream_calls",
        "pricing_upstream_calls",
        Kind.COUNTER,
        "Upstream calls made (bulkhead refusals included).",
        _UPSTREAM,
    ),
    Spec(
        "upstream_failures",
        "pricing_upstream_failures",
        Kind.COUNTER,
        "Upstream calls that produced no usable answer, by reason.",
        ("upstream", "reason"),
    ),
    Spec(
        "upstream_duration",
        "pricing_upstream_duration_seconds",
        Kind.HISTOGRAM,
        "From an upstream call's start until its answer or failure (seconds).",
        _UPSTREAM,
        DURATION_BUCKETS_S,
    ),
    # The gevent timing (PRICING_TRACING=full): every request and call, whatever the
    # span sampling.
    Spec(
        "inbound_delay",
        INBOUND_DELAY,
        Kind.TOP_ROUTES,
        "From a request's first bytes in the pool's kernel until its handler started.",
        _ROUTE,
        ROUTE_TIMING_BUCKETS_S,
    ),
    Spec(
        "inbound_cpu_wait",
        "pricing_inbound_cpu_wait_seconds",
        Kind.TOP_ROUTES,
        "Of the inbound delay, time the process waited for a CPU.",
        _ROUTE,
        ROUTE_TIMING_BUCKETS_S,
    ),
    Spec(
        "handler",
        HANDLER,
        Kind.TOP_ROUTES,
        "From the handler's start until its end (the server span's time).",
        _ROUTE,
        ROUTE_TIMING_BUCKETS_S,
    ),
    Spec(
        "network",
        "pricing_upstream_network_seconds",
        Kind.HISTOGRAM,
        "Time an upstream call waited for the network (send until reply in kernel).",
        _UPSTREAM,
        DURATION_BUCKETS_S,
    ),
    Spec(
        "delay",
        "pricing_upstream_scheduling_delay_seconds",
        Kind.HISTOGRAM,
        "Time an upstream call's greenlet was ready but waited for the hub.",
        _UPSTREAM,
        DURATION_BUCKETS_S,
    ),
    Spec(
        "cpu_wait",
        "pricing_upstream_cpu_wait_seconds",
        Kind.HISTOGRAM,
        "Of the scheduling delay, time the process waited for a CPU.",
        _UPSTREAM,
        DURATION_BUCKETS_S,
    ),
    # What each route costs the hub and suffers from it (routes suggest).
    Spec(
        "hub_wait",
        ROUTE_HUB_WAIT,
        Kind.TOP_ROUTES,
        "Time a request was ready but waited for the hub along its critical path "
        "(inbound delay, the critical call's pre-send wait, scheduling delay, wake).",
        _ROUTE,
        ROUTE_TIMING_BUCKETS_S,
    ),
    Spec(
        "route_cpu",
        ROUTE_CPU.removesuffix("_total"),
        Kind.COUNTER,
        "Time greenlets working for the route ran on the hub: its CPU time (runs "
        "over 1 ms less the thread's run-queue wait).",
        _ROUTE,
    ),
    Spec(
        "route_network",
        ROUTE_NETWORK.removesuffix("_total"),
        Kind.COUNTER,
        "Time the route's requests waited on the network (their critical upstream "
        "call's network time).",
        _ROUTE,
    ),
    Spec(
        "route_culprit",
        ROUTE_CULPRIT.removesuffix("_total"),
        Kind.TOP_CULPRITS,
        "Of the victim route's hub wait, seconds during which greenlets of the "
        "route ran (delay pieces over 1 ms); per victim and worker, the top "
        f"{{top_k}} routes by name, the rest as {CULPRIT_OTHER!r}.",
        ("route", "victim"),
    ),
    Spec(
        "series_folded",
        SERIES_FOLDED.removesuffix("_total"),
        Kind.FOLDED,
        "Label sets a worker folded into an '<other>' series to keep the family "
        "bounded, by family.",
        ("family",),
    ),
    Spec(
        "loop_lag",
        LOOP_LAG_SERIES,
        Kind.HISTOGRAM,
        "How late the hub ran its periodic loop-lag timer (every second), per tick.",
        (),
        LOOP_LAG_BUCKETS_S,
    ),
    Spec(
        "hub_blocks",
        "pricing_hub_blocks",
        Kind.COUNTER,
        "Greenlet runs that held the hub for the hub-block threshold or longer, as they end.",
        _ROUTE,
    ),
    Spec(
        "spans_exported",
        "pricing_spans_exported",
        Kind.COUNTER,
        "Spans handed to the exporter successfully.",
    ),
    Spec(
        "spans_dropped",
        "pricing_spans_dropped",
        Kind.COUNTER,
        "Spans dropped (queue full or export failed).",
    ),
    Spec(
        "slow_traces",
        "pricing_slow_traces",
        Kind.COUNTER,
        "Slow requests not sampled by Envoy: exported, or skipped past the per-worker "
        "export budget.",
        ("outcome",),
    ),
    # Live: one per running worker, gone when gunicorn reaps it.
    Spec(
        "workers",
        "pricing_workers",
        Kind.GAUGE,
        "Worker processes serving this pool.",
        mode="livesum",
    ),
    # What the pool runs (value 1): which build a series came from.
    Spec(
        "build_info",
        BUILD_INFO,
        Kind.GAUGE,
        "The running build: the service's version, Python's and the main libraries'.",
        ("version", "python_version", "gevent_version", "opentelemetry_sdk_version"),
        mode="max",
    ),
    # The pool's workers' own process metrics (``tracing.process_sample``): CPU is a
    # counter in the pool's files (a replaced worker's seconds stay in the total); the
    # gauges are the live workers' sum (memory, descriptors), the smallest limit, the
    # oldest start.
    Spec(
        "process_cpu",
        "process_cpu_seconds",
        Kind.COUNTER,
        "User and system CPU time of the pool's workers.",
    ),
    Spec(
        None,
        "process_resident_memory_bytes",
        Kind.GAUGE,
        "Resident memory of the pool's live workers.",
        mode="livesum",
    ),
    Spec(
        None,
        "process_virtual_memory_bytes",
        Kind.GAUGE,
        "Virtual memory of the pool's live workers.",
        mode="livesum",
    ),
    Spec(
        None,
        "process_open_fds",
        Kind.GAUGE,
        "Open file descriptors of the pool's live workers.",
        mode="livesum",
    ),
    Spec(
        None,
        "process_max_fds",
        Kind.GAUGE,
        "The smallest descriptor limit of the pool's live workers.",
        mode="livemin",
    ),
    Spec(
        None,
        "process_start_time_seconds",
        Kind.GAUGE,
        "Start of the pool's oldest live worker (Unix seconds).",
        mode="livemin",
    ),
    Spec(
        None,
        ALLOCATED_BLOCKS,
        Kind.GAUGE,
        "Python's object allocator blocks in use (sys.getallocatedblocks()), summed over "
        "the pool's live workers: a leak of Python objects, apart from the C heap's RSS.",
        mode="livesum",
    ),
)
