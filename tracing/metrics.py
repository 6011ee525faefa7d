"""`GET /metrics` on every pool: Prometheus metrics of the whole pool, whatever the
tracing mode (``PRICING_TRACING=off`` included).

prometheus_client in multiprocess mode: every worker writes its values to mmap'ed
files in the pool's ``PROMETHEUS_MULTIPROC_DIR`` (set and emptied by the pool's
master, ``gunicorn_conf.common``), and a scrape, whichever worker answers it, sums the
files of every worker, dead ones included, so counters never go backwards when a
worker is replaced. No ``pid`` label: live gauges (``pricing_workers``) are kept per
process and dropped when gunicorn reaps a worker (``mark_process_dead``). Without the
variable (unit tests, a bare ``flask run``) the same metrics live in this process.

Every family is a row of ``tracing.metric_families.FAMILIES`` (with its name, which
readers import from there); a later family is one more row. Observing is on the request
path of 100 % of requests, so it never touches prometheus_client: an observation goes
into a plain in-process counter or histogram (``tracing.metric_folding``), and
``PoolMetrics.flush`` folds what they gained into the prometheus_client values once a
second on the hub (``tracing.metric_flush``), before every scrape this worker answers,
and at worker exit (gunicorn's ``worker_exit``). A scrape therefore sees the other
workers' counts up to one flush interval late, and a SIGKILLed worker loses at most its
last interval's counts; a graceful stop loses nothing. The cost of both paths:
``pricingctl bench metrics-cost``.

Not routed through Envoy: like /healthz it is for whoever runs the pools.

With the gevent timing on, also what each route costs the hub and suffers from it
(CPU, network, hub wait, culprit seconds): what ``pricingctl routes suggest`` reads
(``tracing.readback.usage``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Summary,
    generate_latest,
)
from prometheus_client import Histogram as PromHistogram

from routing.model import RouteConfig
from toolkit.contract import MULTIPROC_DIR_ENV, POOL_ENV
from tracing import metric_flush, prometheus_adapter
from tracing.metric_families import (
    CULPRIT_TOP_K,
    FAMILIES,
    KNOWN_METHODS,
    RED_TOP_K,
    ROUTE_TIMING_TOP_K,
    Kind,
    Spec,
)
from tracing.metric_flush import FLUSH_INTERVAL_S, Ticker
from tracing.metric_folding import (
    Family,
    LocalCounter,
    RedFamily,
    TopCulpritsFamily,
    TopRoutesFamily,
)
from tracing.process_sample import ProcessSampler, build_labels
from tracing.timing.call_state import CallTiming
from tracing.timing.histogram import Histogram
from tracing.timing.hook_errors import swallow
from tracing.timing.server_timing import RequestTiming

#: The endpoint name; its path is [meta].metrics in routes.toml.
ENDPOINT: Final = "meta.metrics"

__all__ = [
    "CONTENT_TYPE",
    "ENDPOINT",
    "FLUSH_INTERVAL_S",
    "PoolMetrics",
    "flush",
    "pool_metrics",
    "render",
]


class PoolMetrics:
    """Every metric family of a pool worker (``FAMILIES``, each an attribute named by
    its row), and how each is observed."""

    # The families, each set from its row of FAMILIES.
    route_requests: Summary
    request_duration: RedFamily
    shed: Family
    upstream_calls: Family
    upstream_failures: Family
    upstream_duration: Family
    inbound_delay: TopRoutesFamily
    inbound_cpu_wait: TopRoutesFamily
    handler: TopRoutesFamily
    network: Family
    delay: Family
    cpu_wait: Family
    hub_wait: TopRoutesFamily
    route_cpu: Family
    route_network: Family
    route_culprit: TopCulpritsFamily
    series_folded: Family
    loop_lag: Family
    hub_blocks: Family
    spans_exported: Family
    spans_dropped: Family
    slow_traces: Family
    workers: Gauge
    build_info: Gauge
    process_cpu: Family

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        pool: str | None = None,
        *,
        culprit_top_k: int = CULPRIT_TOP_K,
        route_timing_top_k: int = ROUTE_TIMING_TOP_K,
        red_top_k: int = RED_TOP_K,
        config: RouteConfig | None = None,
    ) -> None:
        #: Where the families are registered (None: nowhere, as in prometheus_client).
        self.registry = registry
        #: The RED histogram's bounds: *config*'s, which hold every route's timeout (the
        #: alert rules read it); without one, its row's (DURATION_BUCKETS_S).
        self._red_bounds = config.request_duration_bounds_s() if config is not None else None
        self.pool = pool if pool is not None else (os.environ.get(POOL_ENV) or "")
        self._top_k = {
            Kind.RED: red_top_k,
            Kind.TOP_ROUTES: route_timing_top_k,
            Kind.TOP_CULPRITS: culprit_top_k,
        }
        #: What ``flush`` folds into prometheus_client, in FAMILIES' order.
        self.families: list[Family] = []
        #: Called on the hub before every flush: bring in counts kept elsewhere
        #: (``sync``), e.g. by the span exporter's thread.
        self.before_flush: list[Callable[[], None]] = []
        #: A hub timer that already ticks (``tracing.metric_flush``). Set before
        #: :meth:`start_flushing`.
        self.ticker: Ticker | None = None
        # Every family that folds counts its folds here: made before them.
        folded = next(spec for spec in FAMILIES if spec.kind is Kind.FOLDED)
        self.series_folded = Family(
            Counter(folded.name, folded.help, folded.labels, registry=registry)
        )
        self.process_gauges: dict[str, Gauge] = {}
        for spec in FAMILIES:
            built = self._build(spec)
            if isinstance(built, Family):
                self.families.append(built)
            if spec.attr is not None:
                setattr(self, spec.attr, built)
            elif spec.kind is Kind.GAUGE:
                self.process_gauges[spec.name] = built
        self.build_info.labels(*build_labels()).set(1)
        self._call_children: dict[str, tuple[Histogram, Histogram, Histogram]] = {}
        self._route_children: dict[
            str, tuple[Histogram, Histogram, Histogram, Histogram, LocalCounter]
        ] = {}
        # victim -> culprit -> its counter (the culprits of a route's delays recur).
        self._blamed: dict[str, dict[str, LocalCounter]] = {}
        self.sample_process = ProcessSampler(self.process_cpu, self.process_gauges, self.sync)
        self.before_flush.append(self.sample_process)
        # At once too: a gauge file starts at 0, which "livemin" would report meanwhile.
        self.sample_process()
        self._flushing_pid: int | None = None

    def _build(self, spec: Spec) -> Any:
        """The family (or gauge, or summary) of one row of FAMILIES."""
        registry, kind = self.registry, spec.kind
        top_k = self._top_k.get(kind, 0)
        text = spec.help.format(top_k=top_k) if kind in self._top_k else spec.help
        if kind is Kind.FOLDED:
            return self.series_folded
        if kind is Kind.GAUGE:
            return Gauge(
                spec.name,
                text,
                spec.labels,
                registry=registry,
                multiprocess_mode=spec.mode or "all",
            )
        if kind is Kind.SUMMARY:
            return Summary(spec.name, text, spec.labels, registry=registry)
        if kind is Kind.COUNTER:
            return Family(Counter(spec.name, text, spec.labels, registry=registry))
        if kind is Kind.TOP_CULPRITS:
            metric = Counter(spec.name, text, spec.labels, registry=registry)
            return TopCulpritsFamily(metric, top_k, self.series_folded(spec.name))
        buckets = self._red_bounds if kind is Kind.RED and self._red_bounds else spec.buckets
        histogram = PromHistogram(
            spec.name, text, spec.labels, registry=registry, buckets=buckets or ()
        )
        # The in-process histogram's buckets must be prometheus_client's, +Inf aside.
        bounds = prometheus_adapter.histogram_bounds(histogram)[:-1]
        if kind is Kind.TOP_ROUTES:
            return TopRoutesFamily(histogram, bounds, top_k, self.series_folded(spec.name))
        if kind is Kind.RED:
            folded = self.series_folded(spec.name)
            return RedFamily(histogram, bounds, top_k, folded, self.route_requests)
        return Family(histogram, bounds)

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

    # --- counts kept elsewhere, brought in by ``sync`` on the hub --------------------

    @staticmethod
    def sync(
        counter: Family, labels: tuple[str, ...], total: float, seen: dict[Any, float]
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
        the ``ticker``'s ticks when it has one (``tracing.metric_flush``). Only needed in
        multiprocess mode: other workers answer scrapes too. Returns the greenlet (None
        when already started)."""
        if self._flushing_pid == os.getpid():
            return None
        self._flushing_pid = os.getpid()
        return metric_flush.start_flushing(self.flush, self.ticker, interval_s)


#: This process's metrics: one set per worker, made after the fork (``pool_metrics``).
_process: PoolMetrics | None = None


def pool_metrics(config: RouteConfig | None = None) -> PoolMetrics:
    """This process's metrics (created on first use, after the fork). The app factory,
    gunicorn's hooks and the admission check each ask for it once, at their start, and
    hand it on. The RED histogram's bounds come from *config* (default: the route
    config file, the one the pool's app loads) when they are created."""
    global _process
    if _process is None:
        from routing.load import load_routes

        prometheus_adapter.check_pid_from_cache()
        prometheus_adapter.reserve_metric_files()
        _process = PoolMetrics(CollectorRegistry(), config=config or load_routes())
        _process.workers.set(1)
    return _process


def flush() -> None:
    """Fold this process's counts into prometheus_client now, if it has any (gunicorn's
    ``worker_exit``: a graceful stop loses nothing)."""
    if _process is not None:
        _process.flush()


def render(metrics: PoolMetrics) -> bytes:
    """The exposition text: the whole pool's in multiprocess mode, else *metrics*'
    registry's. This worker's own counts are flushed first; the others' are at most one
    flush interval old."""
    metrics.flush()
    if os.environ.get(MULTIPROC_DIR_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(metrics.registry or CollectorRegistry())


def init_app(app: Any, *, metrics_path: str, config: RouteConfig | None = None) -> PoolMetrics:
    """Serve the pool's metrics at *metrics_path* and count every request (RED per route
    template; its bounds from *config*, ``pool_metrics``). Works without tracing: the
    app calls it whatever the mode."""
    from flask import Response, g, request

    metrics = pool_metrics(config)
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

    def _serve() -> Response:
        return Response(render(metrics), mimetype=None, content_type=CONTENT_TYPE)

    app.add_url_rule(metrics_path, endpoint=ENDPOINT, view_func=_serve)
    return metrics
