"""`GET /metrics` on every pool: Prometheus metrics of the whole pool, whatever the
tracing mode (``PRICING_TRACING=off`` included). With the gevent timing on, also what
each route costs the hub and suffers from it (CPU, network, hub wait, culprit
seconds): what ``pricingctl routes suggest`` reads (``tracing.usage``).

prometheus_client in multiprocess mode: every worker writes its values to mmap'ed
files in the pool's ``PROMETHEUS_MULTIPROC_DIR`` (set and emptied by the pool's
master, ``gunicorn_conf.common``), and a scrape, whichever worker answers it, sums the
files of every worker, dead ones included, so counters never go backwards when a
worker is replaced. No ``pid`` label: live gauges (``pricing_workers``) are kept per
process and dropped when gunicorn reaps a worker (``mark_process_dead``). Without the
variable (unit tests, a bare ``flask run``) the same metrics live in this process.

Every family is declared in ``PoolMetrics``; a later family goes there too.
Observing is on the request path of 100 % of requests: children are looked up once
per label value and cached (``_Children``), so an observation is the value's own
mmap write (a few microseconds, measured in docs/metrics.md).

Not routed through Envoy: like /healthz it is for whoever runs the pools.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tracing.timing.call_state import CallTiming
from tracing.timing.histogram import DEFAULT_BUCKETS_S
from tracing.timing.loop_lag import LAG_BUCKETS_S
from tracing.timing.server_timing import RequestTiming

#: The endpoint name; its path is [meta].metrics in routes.toml.
ENDPOINT: Final = "meta.metrics"
#: prometheus_client's own variable: the directory its multiprocess mode writes to.
MULTIPROC_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"

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

#: Names `pricingctl routes suggest` reads back (``tracing.usage``), as exposed.
HANDLER: Final = "pricing_handler_duration_seconds"
INBOUND_DELAY: Final = "pricing_inbound_delay_seconds"
ROUTE_HUB_WAIT: Final = "pricing_route_hub_wait_seconds"
ROUTE_CPU: Final = "pricing_route_cpu_seconds_total"
ROUTE_NETWORK: Final = "pricing_route_network_seconds_total"
ROUTE_CULPRIT: Final = "pricing_route_culprit_seconds_total"

__all__ = ["CONTENT_TYPE", "ENDPOINT", "PoolMetrics", "pool_metrics", "render"]


class _Children:
    """One metric's children by label values, looked up once: ``labels()`` validates and
    takes a lock on every call, a dict lookup does not."""

    __slots__ = ("_by", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._by: dict[tuple[str, ...], Any] = {}
        if not metric._labelnames:
            self._by[()] = metric  # an unlabelled metric is its own only child

    def __call__(self, *values: str) -> Any:
        child = self._by.get(values)
        if child is None:
            child = self._by[values] = self._metric.labels(*values)
        return child


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


class PoolMetrics:
    """Every metric family of a pool worker, and how each is observed."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        def histogram(
            name: str, text: str, labels: Sequence[str], buckets: Sequence[float]
        ) -> _Children:
            return _Children(Histogram(name, text, labels, registry=registry, buckets=buckets))

        def counter(name: str, text: str, labels: Sequence[str]) -> _Children:
            return _Children(Counter(name, text, labels, registry=registry))

        buckets = DEFAULT_BUCKETS_S
        # RED per route: route is the template ("GET /v1/offers/bike"), never a raw URL.
        self.requests = counter(
            "pricing_requests", "Requests answered, by route and status class.", ("route", "class")
        )
        self.request_duration = histogram(
            "pricing_request_duration_seconds",
            "From the app receiving a request until its response (seconds).",
            ("route",),
            buckets,
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
        self.inbound_delay = histogram(
            INBOUND_DELAY,
            "From a request's first bytes in the pool's kernel until its handler started.",
            ("route",),
            buckets,
        )
        self.inbound_cpu_wait = histogram(
            "pricing_inbound_cpu_wait_seconds",
            "Of the inbound delay, time the process waited for a CPU.",
            ("route",),
            buckets,
        )
        self.handler = histogram(
            HANDLER,
            "From the handler's start until its end (the server span's time).",
            ("route",),
            buckets,
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
        # What each route costs the hub and suffers from it (routes suggest). The hub
        # wait is observed per request; the counters are kept as plain totals on the
        # request path and synced in once a second (a plain dict update is ~0.1 us, a
        # multiprocess counter's inc a few us).
        self.hub_wait = histogram(
            ROUTE_HUB_WAIT,
            "Time a request was ready but waited for the hub along its critical path "
            "(inbound delay, the critical call's pre-send wait, scheduling delay, wake).",
            ("route",),
            buckets,
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
        self.route_culprit = counter(
            ROUTE_CULPRIT.removesuffix("_total"),
            "Of the victim route's hub wait, seconds during which greenlets of the route "
            "ran (delay pieces over 1 ms).",
            ("route", "victim"),
        )
        #: Plain running totals of the counters above, synced in by ``sync``.
        self.route_network_s: dict[str, float] = {}
        self.culprit_s: dict[tuple[str, str], float] = {}
        self.loop_lag = histogram(
            "pricing_loop_lag_seconds",
            "How late the hub ran a periodic 50 ms timer, per tick.",
            (),
            LAG_BUCKETS_S,
        )
        self.hub_blocks = counter(
            "pricing_hub_blocks", "Hub blocks longer than the detector's threshold.", ("route",)
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

    # --- the request path (the hub; keep it cheap) ---------------------------------

    def observe_request(self, route: str, status: int, duration_s: float) -> None:
        self.requests(route, status_class(status)).inc()
        self.request_duration(route).observe(duration_s)

    def observe_upstream(self, upstream: str, duration_s: float, failure: str | None) -> None:
        self.upstream_calls(upstream).inc()
        self.upstream_duration(upstream).observe(duration_s)
        if failure is not None:
            self.upstream_failures(upstream, failure).inc()

    def observe_call(self, upstream: str, timing: CallTiming) -> None:
        self.network(upstream).observe(timing.network_s)
        self.delay(upstream).observe(timing.scheduling_delay_s)
        self.cpu_wait(upstream).observe(timing.cpu_wait_s)

    def observe_timing(self, route: str, timing: RequestTiming) -> None:
        self.handler(route).observe(timing.duration_s)
        if timing.inbound_delay_s is not None:
            self.inbound_delay(route).observe(timing.inbound_delay_s)
            self.inbound_cpu_wait(route).observe(timing.inbound_cpu_wait_s)
        critical = timing.critical
        wait = timing.inbound_delay_s or 0.0
        if critical is not None:
            wait += timing.presend_delay_s + critical.scheduling_delay_s + timing.wake_delay_s
            if critical.network_s:
                network = self.route_network_s
                network[route] = network.get(route, 0.0) + critical.network_s
            if critical.culprits:
                self._blame(route, critical.culprits)
        # = timing.hub_wait_s, inlined: this runs for every request.
        self.hub_wait(route).observe(wait)
        if timing.inbound_culprits:
            self._blame(route, timing.inbound_culprits)

    def _blame(self, victim: str, culprits: Mapping[str, float]) -> None:
        totals = self.culprit_s
        for culprit, seconds in culprits.items():
            key = (culprit, victim)
            totals[key] = totals.get(key, 0.0) + seconds

    def observe_loop_lag(self, lag_s: float) -> None:
        self.loop_lag().observe(lag_s)

    # --- counts kept elsewhere, brought in by ``sync`` on the hub --------------------

    @staticmethod
    def sync(
        counter: _Children, labels: tuple[str, ...], total: float, seen: dict[Any, float]
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


_metrics: PoolMetrics | None = None
_registry: CollectorRegistry | None = None


def pool_metrics() -> PoolMetrics:
    """This process's metrics (created on first use, after the fork)."""
    global _metrics, _registry
    if _metrics is None:
        _registry = CollectorRegistry()
        _metrics = PoolMetrics(_registry)
        _metrics.workers.set(1)
    return _metrics


def render() -> bytes:
    """The exposition text: the whole pool's in multiprocess mode, else this process's."""
    pool_metrics()
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

    from tracing.route import route_of

    metrics = pool_metrics()

    @app.before_request
    def _start() -> None:
        g.pricing_started_s = time.perf_counter()

    @app.after_request
    def _count(response: Any) -> Any:
        started = g.get("pricing_started_s")
        if started is not None:
            metrics.observe_request(
                route_of(request), response.status_code, time.perf_counter() - started
            )
        return response

    def _metrics() -> Response:
        return Response(render(), mimetype=None, content_type=CONTENT_TYPE)

    app.add_url_rule(metrics_path, endpoint=ENDPOINT, view_func=_metrics)
    return metrics
