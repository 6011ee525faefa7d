"""`GET /metrics` on every pool: Prometheus metrics of the whole pool, whatever the
tracing mode (``PRICING_TRACING=off`` included).

prometheus_client in multiprocess mode: every worker writes its values to mmap'ed
files in the pool's ``PROMETHEUS_MULTIPROC_DIR`` (set and emptied by the pool's
master, ``gunicorn_conf.common``), and a scrape, whichever worker answers it, sums the
files of every worker, dead ones included, so counters never go backwards when a
worker is replaced. No ``pid`` label: live gauges (``pricing_workers``) are kept per
process and dropped when gunicorn reaps a worker (``mark_process_dead``). Without the
variable (unit tests, a bare ``flask run``) the same metrics live in this process.

Every family is declared in ``PoolMetrics``; a later family goes there too.
Observing is on the request path of 100 % of requests, so it never touches
prometheus_client: an observation goes into a plain in-process counter or histogram
(``tracing.timing.histogram``, well under a microsecond), and ``PoolMetrics.flush``
folds what they gained into the prometheus_client values (an mmap write each, several
microseconds) once a second on the hub, before every scrape this worker answers, and at
worker exit (gunicorn's ``worker_exit``). A scrape therefore sees the other workers'
counts up to one flush interval late, and a SIGKILLed worker loses at most its last
interval's counts; a graceful stop loses nothing. ``bench/metrics_cost.py`` measures
both paths.

Not routed through Envoy: like /healthz it is for whoever runs the pools.

With the gevent timing on, also what each route costs the hub and suffers from it
(CPU, network, hub wait, culprit seconds): what ``pricingctl routes suggest`` reads
(``tracing.readback.usage``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    Summary,
    generate_latest,
)
from prometheus_client import Histogram as PromHistogram

from toolkit.contract import POOL_ENV
from tracing import prometheus_adapter
from tracing.timing.call_state import CallTiming
from tracing.timing.histogram import Histogram, new_histogram
from tracing.timing.hook_errors import swallow
from tracing.timing.server_timing import RequestTiming

#: The endpoint name; its path is [meta].metrics in routes.toml.
ENDPOINT: Final = "meta.metrics"
#: prometheus_client's own variable: the directory its multiprocess mode writes to.
MULTIPROC_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"

#: Seconds between two flushes of a worker's in-process counts into prometheus_client:
#: how late a scrape may see another worker's counts, and what a SIGKILLed worker loses.
FLUSH_INTERVAL_S: Final = 1.0


class Ticker(Protocol):
    """A periodic timer already running on the hub, whose every tick calls its observers
    (``tracing.timing.loop_lag.LoopLagGauge`` is one)."""

    interval_s: float
    observers: list[Callable[[float], None]]


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

#: Upper bounds of every duration histogram (seconds; +Inf last). From 0.5 ms (a call
#: that waited for nothing) to 10 s, the longest route timeout (quotes.batch); 0.2 s
#: is the io pool's p99 target, so "within target" is one bucket, not an interpolation.
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
HTTP_SERVER_DURATION: Final = "http_server_request_duration_seconds"
HTTP_SERVER_LABELS: Final = (
    "http_request_method",
    "http_route",
    "http_response_status_code",
    "pool",
)
#: Methods kept as they are; any other is "_OTHER" (OpenTelemetry's rule: a client
#: inventing methods must not create series).
KNOWN_METHODS: Final = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)
BUILD_INFO: Final = "pricing_build_info"

#: Names `pricingctl routes suggest` reads back (``tracing.readback.usage``), as exposed.
HANDLER: Final = "pricing_handler_duration_seconds"
INBOUND_DELAY: Final = "pricing_inbound_delay_seconds"
ROUTE_HUB_WAIT: Final = "pricing_route_hub_wait_seconds"
ROUTE_CPU: Final = "pricing_route_cpu_seconds_total"
ROUTE_NETWORK: Final = "pricing_route_network_seconds_total"
ROUTE_CULPRIT: Final = "pricing_route_culprit_seconds_total"
#: Culprit seconds grow routes x routes: per victim, each worker exposes at most this
#: many culprits by name (the ones with the most seconds when it first had room), and
#: folds every other culprit's seconds into CULPRIT_OTHER. A pool's culprit series are
#: then at most routes x workers x (CULPRIT_TOP_K + 1), however many routes run there.
CULPRIT_TOP_K: Final = 5
#: The culprit that stands for the folded ones; "<...>" like ``<hub>``: never placed.
CULPRIT_OTHER: Final = "<other>"
#: The per-route timing histograms (ROUTE_TIMING_BUCKETS_S) keep their own series for
#: at most this many routes per worker: the ones with the most requests when it first
#: had room; every other route's observations go to route=CULPRIT_OTHER. The RED
#: summary (ROUTE_REQUESTS) and the route CPU, network and culprit counters stay per
#: route (what `routes suggest` counts requests and CPU by).
ROUTE_TIMING_TOP_K: Final = 16
#: The RED histogram (HTTP_SERVER_DURATION, 15 buckets a series) keeps its own series
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
ROUTE_REQUESTS: Final = "pricing_route_request_duration_seconds"
#: Counts the label sets a worker folded into CULPRIT_OTHER, per family: (culprit,
#: victim) pairs of the culprit family, routes of the timing histograms, (method,
#: route) of the RED histogram.
SERIES_FOLDED: Final = "pricing_metric_series_folded_total"

__all__ = ["CONTENT_TYPE", "ENDPOINT", "PoolMetrics", "flush", "pool_metrics", "render"]


class LocalCounter:
    """A counter the request path increments: a float addition, no lock (the hub runs
    one greenlet at a time; threads' counts come in through ``PoolMetrics.sync``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Family:
    """One metric family as the request path sees it: an in-process child per label
    values (``LocalCounter`` or ``Histogram``), created on first use and looked up by
    a dict lookup (``labels()`` validates and takes a lock on every call). ``flush``
    adds what each child gained since the last flush to the prometheus_client metric."""

    __slots__ = ("_bounds", "_by", "_flushed", "_metric", "_targets")

    def __init__(self, metric: Any, bounds: Sequence[float] | None = None) -> None:
        self._metric = metric
        #: A histogram's bounds (without ``+Inf``); None: a counter.
        self._bounds = tuple(bounds) if bounds is not None else None
        self._by: dict[tuple[str, ...], Any] = {}
        # Per label values: what the prometheus_client child has already been given.
        self._flushed: dict[tuple[str, ...], Any] = {}
        self._targets: dict[tuple[str, ...], Any] = {}

    @property
    def metric(self) -> Any:
        """The prometheus_client metric behind the family."""
        return self._metric

    def __call__(self, *values: str) -> Any:
        child = self._by.get(values)
        if child is None:
            child = LocalCounter() if self._bounds is None else new_histogram(self._bounds)
            self._by[values] = child
        return child

    def _target(self, values: tuple[str, ...]) -> Any:
        target = self._targets.get(values)
        if target is None:
            target = self._metric.labels(*values) if values else self._metric
            self._targets[values] = target
        return target

    def flush(self) -> None:
        """Fold what every child gained since the last flush into prometheus_client.
        What is taken is recorded before it is written: a flush that ran again
        meanwhile would add only what is new."""
        for values, child in list(self._by.items()):
            if self._bounds is not None:
                counts, total = list(child.counts), child.sum
                before = self._flushed.get(values)
                if before is None:
                    before = ([0] * len(counts), 0.0)
                gained = [now - then for now, then in zip(counts, before[0], strict=True)]
                if not any(gained):
                    continue
                self._flushed[values] = (counts, total)
                self._add(values, gained, total - before[1])
            else:
                now = child.value
                gained = now - self._flushed.get(values, 0.0)
                if not gained:
                    continue
                self._flushed[values] = now
                self._target(self._exposed(values)).inc(gained)

    def _add(self, values: tuple[str, ...], gained: Sequence[int], sum_delta: float) -> None:
        """Fold a histogram child's gains (per bucket, and their sum) into the exposed
        series."""
        prometheus_adapter.add_to_histogram(self._target(self._exposed(values)), gained, sum_delta)

    def _exposed(self, values: tuple[str, ...]) -> tuple[str, ...]:
        """The label values *values*' gains are exposed under (their own here)."""
        return values


class _TopRoutesFamily(_Family):
    """A per-route histogram that exposes at most *top_k* routes per worker by name.

    The route is the label values up to *route_at* included (``("GET /x",)`` for the
    timing histograms; ``(method, http_route)`` for the RED one, whose status and pool
    follow). The request path is the plain family's. At each flush, while there is
    room, the unnamed routes with the most observations so far are named, for good (a
    series never moves), every series of a named route with it; every other route's
    gains go to its label values with the route label (*route_at*) set to
    CULPRIT_OTHER, so the family's count and sum stay the worker's whole, and each
    route folded for the first time counts once in *folded*."""

    __slots__ = ("_folded", "_folded_routes", "_named", "_route_at", "_top_k")

    def __init__(
        self,
        metric: Any,
        bounds: Sequence[float],
        top_k: int,
        folded: LocalCounter,
        *,
        route_at: int = 0,
    ) -> None:
        super().__init__(metric, bounds)
        self._top_k = top_k
        self._route_at = route_at
        self._named: set[tuple[str, ...]] = set()
        self._folded = folded
        self._folded_routes: set[tuple[str, ...]] = set()

    def flush(self) -> None:
        if len(self._named) < self._top_k:
            unnamed: dict[tuple[str, ...], int] = {}
            for values, child in list(self._by.items()):
                route = values[: self._route_at + 1]
                if route not in self._named:
                    unnamed[route] = unnamed.get(route, 0) + sum(child.counts)
            ranked = sorted(unnamed.items(), key=lambda pair: (-pair[1], pair[0]))
            for route, _ in ranked[: self._top_k - len(self._named)]:
                self._named.add(route)
        super().flush()

    def _exposed(self, values: tuple[str, ...]) -> tuple[str, ...]:
        at = self._route_at
        route = values[: at + 1]
        if route in self._named:
            return values
        if route not in self._folded_routes:
            self._folded_routes.add(route)
            self._folded.inc()
        return (*values[:at], CULPRIT_OTHER, *values[at + 1 :])


class _RedFamily(_TopRoutesFamily):
    """The RED histogram (``HTTP_SERVER_DURATION``: method, route, status, pool), named
    for the top *top_k* (method, route) only, whose every label set's count and sum
    also go, unfolded, to the summary *totals* (``ROUTE_REQUESTS``): one observation on
    the request path, exact requests per route in the scrape."""

    __slots__ = ("_totals", "_totals_targets")

    def __init__(
        self,
        metric: Any,
        bounds: Sequence[float],
        top_k: int,
        folded: LocalCounter,
        totals: Any,
    ) -> None:
        super().__init__(metric, bounds, top_k, folded, route_at=1)
        self._totals = totals
        self._totals_targets: dict[tuple[str, ...], Any] = {}

    def _add(self, values: tuple[str, ...], gained: Sequence[int], sum_delta: float) -> None:
        super()._add(values, gained, sum_delta)
        target = self._totals_targets.get(values)
        if target is None:
            target = self._totals_targets[values] = self._totals.labels(*values)
        prometheus_adapter.add_to_summary(target, sum(gained), sum_delta)


class _TopKFamily(_Family):
    """A (culprit, victim) counter that exposes at most *top_k* culprits per victim.

    The request path is the plain family's (an in-process counter per pair, created on
    first use). At each flush, a victim with room for more named culprits takes the
    unnamed ones with the most seconds so far; a named culprit keeps its series for
    good (a counter never moves). Every other culprit's gain goes to ``(CULPRIT_OTHER,
    victim)``, so a victim's culprit seconds still sum to what was measured, and each
    pair folded for the first time counts once in *folded*."""

    __slots__ = ("_folded", "_folded_pairs", "_named", "_top_k")

    def __init__(self, metric: Any, top_k: int, folded: LocalCounter) -> None:
        super().__init__(metric)
        self._top_k = top_k
        self._named: dict[str, set[str]] = {}
        self._folded = folded
        self._folded_pairs: set[tuple[str, ...]] = set()

    def flush(self) -> None:
        by_victim: dict[str, list[tuple[float, str]]] = {}
        for (culprit, victim), child in list(self._by.items()):
            by_victim.setdefault(victim, []).append((child.value, culprit))
        for victim, totals in by_victim.items():
            named = self._named.setdefault(victim, set())
            totals.sort(reverse=True)
            for _, culprit in totals:
                if len(named) >= self._top_k:
                    break
                named.add(culprit)
            for total, culprit in totals:
                pair = (culprit, victim)
                gained = total - self._flushed.get(pair, 0.0)
                if not gained:
                    continue
                self._flushed[pair] = total
                if culprit in named:
                    self._target(pair).inc(gained)
                    continue
                self._target((CULPRIT_OTHER, victim)).inc(gained)
                if pair not in self._folded_pairs:
                    self._folded_pairs.add(pair)
                    self._folded.inc()


class PoolMetrics:
    """Every metric family of a pool worker, and how each is observed."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        pool: str | None = None,
        *,
        culprit_top_k: int = CULPRIT_TOP_K,
        route_timing_top_k: int = ROUTE_TIMING_TOP_K,
        red_top_k: int = RED_TOP_K,
    ) -> None:
        self.families: list[_Family] = []
        #: Called on the hub before every flush: bring in counts kept elsewhere
        #: (``sync``), e.g. by the span exporter's thread.
        self.before_flush: list[Callable[[], None]] = []
        #: A hub timer that already ticks (the loop-lag gauge, with the timing core on):
        #: the periodic flush then runs on its ticks rather than on a timer of its own,
        #: which would wake an idle worker once more a second (~60-130 us of CPU each).
        #: Set before :meth:`start_flushing`.
        self.ticker: Ticker | None = None

        def histogram(
            name: str, text: str, labels: Sequence[str], buckets: Sequence[float]
        ) -> _Family:
            metric = PromHistogram(name, text, labels, registry=registry, buckets=buckets)
            # The in-process histogram's buckets must be prometheus_client's, +Inf aside.
            bounds = prometheus_adapter.histogram_bounds(metric)[:-1]
            self.families.append(_Family(metric, bounds))
            return self.families[-1]

        def counter(name: str, text: str, labels: Sequence[str]) -> _Family:
            self.families.append(_Family(Counter(name, text, labels, registry=registry)))
            return self.families[-1]

        # Folded series, by family. Flushed after every family that folds (appended
        # last but the loop lag's), so a flush carries a fold and its count together.
        self.series_folded = _Family(
            Counter(
                SERIES_FOLDED.removesuffix("_total"),
                "Label sets a worker folded into an '<other>' series to keep the family "
                "bounded, by family.",
                ("family",),
                registry=registry,
            )
        )

        def per_route(name: str, text: str) -> _Family:
            metric = PromHistogram(
                name, text, ("route",), registry=registry, buckets=ROUTE_TIMING_BUCKETS_S
            )
            bounds = prometheus_adapter.histogram_bounds(metric)[:-1]
            folded = self.series_folded(name)
            self.families.append(_TopRoutesFamily(metric, bounds, route_timing_top_k, folded))
            return self.families[-1]

        buckets = DURATION_BUCKETS_S
        self.pool = pool if pool is not None else (os.environ.get(POOL_ENV) or "")
        # RED per route, as OpenTelemetry's http.server.request.duration: the route is
        # the template ("/v1/offers/bike", "" when no rule matched), never a raw URL.
        # The histogram names the busiest (method, route) of each worker (RED_TOP_K),
        # the summary keeps every one's count and sum (RED_TOP_K's comment says why).
        red = PromHistogram(
            HTTP_SERVER_DURATION,
            "Duration of HTTP server requests: from the app receiving a request until "
            f"its response; per worker, the {red_top_k} busiest routes by name, the rest "
            f"as http_route={CULPRIT_OTHER!r} ({ROUTE_REQUESTS} has every route).",
            HTTP_SERVER_LABELS,
            registry=registry,
            buckets=buckets,
        )
        self.route_requests = Summary(
            ROUTE_REQUESTS,
            "Duration of HTTP server requests per route, every route: count and sum "
            f"({HTTP_SERVER_DURATION} has the buckets of the busiest).",
            HTTP_SERVER_LABELS,
            registry=registry,
        )
        self.request_duration = _RedFamily(
            red,
            prometheus_adapter.histogram_bounds(red)[:-1],
            red_top_k,
            self.series_folded(HTTP_SERVER_DURATION),
            self.route_requests,
        )
        self.families.append(self.request_duration)
        # Answered 503 without being worked on, by reason (SHED_REASONS).
        self.shed = counter(
            "pricing_shed",
            "Requests the pool refused at once instead of working on them, by route and reason.",
            ("route", "reason"),
        )
        # Per upstream: every call, its failures by reason, its duration.
        self.upstream_calls = counter(
            "pricing_upstream_calls",
            "Upstream calls made (bulkhead refusals included).",
            ("upstream",),
        )
        self.upstream_failures = counter(
            "pricing_upstream_failures",
            "Upstream calls that produced no usable answer, by reason.",
            ("upstream", "reason"),
        )
        self.upstream_duration = histogram(
            "pricing_upstream_duration_seconds",
            "From an upstream call's start until its answer or failure (seconds).",
            ("upstream",),
            buckets,
        )
        # The gevent timing (PRICING_TRACING=full): every request and call, whatever
        # the span sampling.
        self.inbound_delay = per_route(
            INBOUND_DELAY,
            "From a request's first bytes in the pool's kernel until its handler started.",
        )
        self.inbound_cpu_wait = per_route(
            "pricing_inbound_cpu_wait_seconds",
            "Of the inbound delay, time the process waited for a CPU.",
        )
        self.handler = per_route(
            HANDLER,
            "From the handler's start until its end (the server span's time).",
        )
        self.network = histogram(
            "pricing_upstream_network_seconds",
            "Time an upstream call waited for the network (send until reply in kernel).",
            ("upstream",),
            buckets,
        )
        self.delay = histogram(
            "pricing_upstream_scheduling_delay_seconds",
            "Time an upstream call's greenlet was ready but waited for the hub.",
            ("upstream",),
            buckets,
        )
        self.cpu_wait = histogram(
            "pricing_upstream_cpu_wait_seconds",
            "Of the scheduling delay, time the process waited for a CPU.",
            ("upstream",),
            buckets,
        )
        # What each route costs the hub and suffers from it (routes suggest).
        self.hub_wait = per_route(
            ROUTE_HUB_WAIT,
            "Time a request was ready but waited for the hub along its critical path "
            "(inbound delay, the critical call's pre-send wait, scheduling delay, wake).",
        )
        self.route_cpu = counter(
            ROUTE_CPU.removesuffix("_total"),
            "Time greenlets working for the route ran on the hub: its CPU time (runs "
            "over 1 ms less the thread's run-queue wait).",
            ("route",),
        )
        self.route_network = counter(
            ROUTE_NETWORK.removesuffix("_total"),
            "Time the route's requests waited on the network (their critical upstream "
            "call's network time).",
            ("route",),
        )
        self.route_culprit = _TopKFamily(
            Counter(
                ROUTE_CULPRIT.removesuffix("_total"),
                f"Of the victim route's hub wait, seconds during which greenlets of the "
                f"route ran (delay pieces over 1 ms); per victim and worker, the top "
                f"{culprit_top_k} routes by name, the rest as {CULPRIT_OTHER!r}.",
                ("route", "victim"),
                registry=registry,
            ),
            culprit_top_k,
            self.series_folded(ROUTE_CULPRIT.removesuffix("_total")),
        )
        self.families += [self.route_culprit, self.series_folded]
        self.loop_lag = histogram(
            "pricing_loop_lag_seconds",
            "How late the hub ran its periodic loop-lag timer (every second), per tick.",
            (),
            LOOP_LAG_BUCKETS_S,
        )
        self.hub_blocks = counter(
            "pricing_hub_blocks",
            "Greenlet runs that held the hub for the hub-block threshold or longer, as they end.",
            ("route",),
        )
        self.spans_exported = counter(
            "pricing_spans_exported", "Spans handed to the exporter successfully.", ()
        )
        self.spans_dropped = counter(
            "pricing_spans_dropped", "Spans dropped (queue full or export failed).", ()
        )
        self.slow_traces = counter(
            "pricing_slow_traces",
            "Slow requests not sampled by Envoy: exported, or skipped past the per-worker "
            "export budget.",
            ("outcome",),
        )
        # Live: one per running worker, gone when gunicorn reaps it.
        self.workers = Gauge(
            "pricing_workers",
            "Worker processes serving this pool.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        # What the pool runs (value 1): which build a series came from.
        self.build_info = Gauge(
            BUILD_INFO,
            "The running build: the service's version, Python's and the main libraries'.",
            ("version", "python_version", "gevent_version", "opentelemetry_sdk_version"),
            registry=registry,
            multiprocess_mode="max",
        )
        self.build_info.labels(*_build_labels()).set(1)
        # prometheus_client's process collector reports the scraping process only in
        # multiprocess mode; these are the pool's workers' own, sampled by each worker
        # before its flush. CPU is a counter in the pool's files (a replaced worker's
        # seconds stay in the total); the gauges are the live workers' sum (memory,
        # descriptors), the smallest limit, the oldest start.
        self.process_cpu = counter(
            "process_cpu_seconds", "User and system CPU time of the pool's workers.", ()
        )
        self.process_gauges = {
            "process_resident_memory_bytes": Gauge(
                "process_resident_memory_bytes",
                "Resident memory of the pool's live workers.",
                registry=registry,
                multiprocess_mode="livesum",
            ),
            "process_virtual_memory_bytes": Gauge(
                "process_virtual_memory_bytes",
                "Virtual memory of the pool's live workers.",
                registry=registry,
                multiprocess_mode="livesum",
            ),
            "process_open_fds": Gauge(
                "process_open_fds",
                "Open file descriptors of the pool's live workers.",
                registry=registry,
                multiprocess_mode="livesum",
            ),
            "process_max_fds": Gauge(
                "process_max_fds",
                "The smallest descriptor limit of the pool's live workers.",
                registry=registry,
                multiprocess_mode="livemin",
            ),
            "process_start_time_seconds": Gauge(
                "process_start_time_seconds",
                "Start of the pool's oldest live worker (Unix seconds).",
                registry=registry,
                multiprocess_mode="livemin",
            ),
        }
        self._process_seen: dict[Any, float] = {}
        self._call_children: dict[str, tuple[Histogram, Histogram, Histogram]] = {}
        self._route_children: dict[
            str, tuple[Histogram, Histogram, Histogram, Histogram, LocalCounter]
        ] = {}
        # victim -> culprit -> its counter (the culprits of a route's delays recur).
        self._blamed: dict[str, dict[str, LocalCounter]] = {}
        self.before_flush.append(self.sample_process)
        # At once too: a gauge file starts at 0, which "livemin" would report meanwhile.
        self.sample_process()
        self._flushing_pid: int | None = None

    # --- the request path (the hub; keep it cheap) ---------------------------------

    def observe_request(self, method: str, route: str, status: int, duration_s: float) -> None:
        """*route*: the URL rule's template ("/v1/offers/bike"), "" when none matched."""
        if method not in KNOWN_METHODS:
            method = "_OTHER"
        self.request_duration(method, route, str(status), self.pool).observe(duration_s)

    def observe_shed(self, route: str, reason: str) -> None:
        self.shed(route, reason).inc()

    def observe_upstream(self, upstream: str, duration_s: float, failure: str | None) -> None:
        self.upstream_calls(upstream).inc()
        self.upstream_duration(upstream).observe(duration_s)
        if failure is not None:
            self.upstream_failures(upstream, failure).inc()

    def call_histograms(self, upstream: str) -> tuple[Histogram, Histogram, Histogram]:
        """The (network, delay, CPU wait) histograms of calls to *upstream*: what
        ``observe_call`` feeds (the compiled observer keeps them per upstream, and feeds
        them itself)."""
        children = self._call_children.get(upstream)
        if children is None:
            children = (self.network(upstream), self.delay(upstream), self.cpu_wait(upstream))
            self._call_children[upstream] = children
        return children

    def observe_call(self, upstream: str, timing: CallTiming) -> None:
        # Runs for every upstream call: the three children are looked up once per upstream
        # (a family keeps its children for the process's life).
        network, delay, cpu_wait = self._call_children.get(upstream) or self.call_histograms(
            upstream
        )
        network.observe(timing.network_s)
        delay.observe(timing.scheduling_delay_s)
        cpu_wait.observe(timing.cpu_wait_s)

    def observe_timing(self, route: str, timing: RequestTiming) -> None:
        # Runs for every request: the route's children are looked up once (a family keeps
        # its children for the process's life).
        children = self._route_children.get(route)
        if children is None:
            children = (
                self.handler(route),
                self.inbound_delay(route),
                self.inbound_cpu_wait(route),
                self.hub_wait(route),
                self.route_network(route),
            )
            self._route_children[route] = children
        handler, inbound_delay, inbound_cpu_wait, hub_wait, network = children
        handler.observe(timing.duration_s)
        if timing.inbound_delay_s is not None:
            inbound_delay.observe(timing.inbound_delay_s)
            inbound_cpu_wait.observe(timing.inbound_cpu_wait_s)
        critical = timing.critical
        wait = timing.inbound_delay_s or 0.0
        if critical is not None:
            wait += timing.presend_delay_s + critical.scheduling_delay_s + timing.wake_delay_s
            if critical.network_s:
                network.inc(critical.network_s)
            if critical.culprits:
                self._blame(route, critical.culprits)
        # = timing.hub_wait_s, inlined.
        hub_wait.observe(wait)
        if timing.inbound_culprits:
            self._blame(route, timing.inbound_culprits)

    def _blame(self, victim: str, culprits: Mapping[str, float]) -> None:
        counters = self._blamed.get(victim)
        if counters is None:
            counters = self._blamed[victim] = {}
        for culprit, seconds in culprits.items():
            counter = counters.get(culprit)
            if counter is None:
                counter = counters[culprit] = self.route_culprit(culprit, victim)
            counter.inc(seconds)

    def observe_loop_lag(self, lag_s: float) -> None:
        self.loop_lag().observe(lag_s)

    def sample_process(self) -> None:
        """This worker's CPU, memory and descriptors into the pool's process_* metrics
        (before each flush: once a second; ~0.1 ms, /proc reads)."""
        for family in _PROCESS.collect():
            for sample in family.samples:
                if sample.name == "process_cpu_seconds_total":
                    self.sync(self.process_cpu, (), sample.value, self._process_seen)
                elif sample.name in self.process_gauges:
                    self.process_gauges[sample.name].set(sample.value)

    # --- counts kept elsewhere, brought in by ``sync`` on the hub --------------------

    @staticmethod
    def sync(
        counter: _Family, labels: tuple[str, ...], total: float, seen: dict[Any, float]
    ) -> None:
        """Add to a counter what a plain running total (kept by a real OS thread: the
        span exporter, the hub-block detector) gained since the last sync; *seen* holds,
        per source, the totals already added. Those threads never touch
        prometheus_client's lock themselves."""
        key = (id(counter), labels)
        gained = total - seen.get(key, 0)
        if gained > 0:
            counter(*labels).inc(gained)
            seen[key] = total

    # --- into prometheus_client ------------------------------------------------------

    def flush(self) -> None:
        """Bring the counts kept elsewhere in (``before_flush``), then add what every
        family gained since the last flush to the prometheus_client values, where a
        scrape of any worker reads them. On the hub (or at worker exit)."""
        for hook in list(self.before_flush):
            try:
                hook()
            except Exception as exc:
                swallow("metrics flush hook", exc)
        for family in self.families:
            family.flush()

    def start_flushing(self, interval_s: float = FLUSH_INTERVAL_S) -> Any:
        """Flush every *interval_s* on a greenlet of this process's hub (idempotent): on
        the ``ticker``'s ticks when it has one. Only needed in multiprocess mode: other
        workers answer scrapes too. Returns the greenlet (None when already started)."""
        if self._flushing_pid == os.getpid():
            return None
        self._flushing_pid = os.getpid()
        import gevent

        from tracing.timing.labels import set_greenlet_label

        wait = self._wait_on_ticker(interval_s)

        def run() -> None:
            while True:
                if wait is None:
                    gevent.sleep(interval_s)
                else:
                    wait()
                try:
                    self.flush()
                except Exception as exc:
                    swallow("metrics flush", exc)

        flusher = gevent.spawn(run)
        set_greenlet_label("<metrics flush>", flusher)
        return flusher

    def _wait_on_ticker(self, interval_s: float) -> Callable[[], None] | None:
        """A wait that ends on the ticker's tick closest to every *interval_s* (it ends
        by itself after two intervals: a ticker that stopped does not stop the flush);
        None without a ticker that ticks at least that often."""
        ticker = self.ticker
        if ticker is None or not 0 < ticker.interval_s <= interval_s:
            return None
        import gevent.event

        every = max(1, round(interval_s / ticker.interval_s))
        due = gevent.event.Event()
        ticks = [0]

        def on_tick(_lag_s: float) -> None:
            ticks[0] += 1
            if ticks[0] >= every:
                ticks[0] = 0
                due.set()  # the flush greenlet runs in this same loop iteration

        def wait() -> None:
            due.wait(2 * interval_s)
            due.clear()

        ticker.observers.append(on_tick)
        return wait


#: Reads /proc/self; not registered anywhere (``sample_process`` copies its values).
_PROCESS: Final = ProcessCollector(registry=None)


def _build_labels() -> tuple[str, str, str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "unknown"

    python = ".".join(str(part) for part in sys.version_info[:3])
    return of("pricingservice"), python, of("gevent"), of("opentelemetry-sdk")


_metrics: PoolMetrics | None = None
_registry: CollectorRegistry | None = None


def pool_metrics() -> PoolMetrics:
    """This process's metrics (created on first use, after the fork)."""
    global _metrics, _registry
    if _metrics is None:
        prometheus_adapter.check_pid_from_cache()
        _registry = CollectorRegistry()
        _metrics = PoolMetrics(_registry)
        _metrics.workers.set(1)
    return _metrics


def flush() -> None:
    """Fold this process's counts into prometheus_client now (gunicorn's
    ``worker_exit``: a graceful stop loses nothing)."""
    if _metrics is not None:
        _metrics.flush()


def render() -> bytes:
    """The exposition text: the whole pool's in multiprocess mode, else this process's.
    This worker's own counts are flushed first; the others' are at most one flush
    interval old."""
    pool_metrics().flush()
    if os.environ.get(MULTIPROC_DIR_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    assert _registry is not None
    return generate_latest(_registry)


def init_app(app: Any, *, metrics_path: str) -> PoolMetrics:
    """Serve the pool's metrics at *metrics_path* and count every request (RED per route
    template). Works without tracing: the app calls it whatever the mode."""
    from flask import Response, g, request

    metrics = pool_metrics()
    if os.environ.get(MULTIPROC_DIR_ENV):
        metrics.start_flushing()  # the app is built in the worker, after gevent's fork

    @app.before_request
    def _start() -> None:
        g.pricing_started_s = time.perf_counter()

    @app.after_request
    def _count(response: Any) -> Any:
        started = g.get("pricing_started_s")
        if started is not None:
            rule = request.url_rule
            metrics.observe_request(
                request.method,
                rule.rule if rule is not None else "",
                response.status_code,
                time.perf_counter() - started,
            )
        return response

    def _metrics() -> Response:
        return Response(render(), mimetype=None, content_type=CONTENT_TYPE)

    app.add_url_rule(metrics_path, endpoint=ENDPOINT, view_func=_metrics)
    return metrics
