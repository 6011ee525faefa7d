"""`GET /metrics` on every pool (Prometheus text format): the hub's loop lag, hub
blocks per route, span export counters, and what each route costs the hub and
suffers from it (CPU, network, hub wait, culprit seconds: what `pricingctl routes
suggest` reads) of the worker that answers.

Each gunicorn worker is its own process; the series carry `pool` and `pid`
labels, so a scraper (or a person with curl) sees which worker it reached.
Not routed through Envoy: like /healthz it is for whoever runs the pools.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tracing.timing.call_state import CallTiming
from tracing.timing.histogram import HistogramFamily
from tracing.timing.labels import UNKNOWN_LABEL
from tracing.timing.loop_lag import LAG_BUCKETS_S
from tracing.timing.server_timing import RequestTiming

#: The endpoint name; its path is [meta].metrics in routes.toml.
ENDPOINT = "meta.metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class WorkerMetrics:
    """Histograms of every request's and every upstream call's timings (100 %, whatever
    the span sampling): cheap (~0.3 us an observation), per worker process."""

    def __init__(self) -> None:
        self.inbound_delay = HistogramFamily(
            "pricing_inbound_delay_seconds",
            "From a request's first bytes in the pool's kernel until its handler started.",
            "route",
        )
        self.inbound_cpu_wait = HistogramFamily(
            "pricing_inbound_cpu_wait_seconds",
            "Of the inbound delay, time the process waited for a CPU.",
            "route",
        )
        self.handler = HistogramFamily(
            "pricing_handler_duration_seconds",
            "From the handler's start until its end (the server span's time).",
            "route",
        )
        self.network = HistogramFamily(
            "pricing_upstream_network_seconds",
            "Time an upstream call waited for the network (send until reply in kernel).",
            "upstream",
        )
        self.delay = HistogramFamily(
            "pricing_upstream_scheduling_delay_seconds",
            "Time an upstream call's greenlet was ready but waited for the hub.",
            "upstream",
        )
        self.cpu_wait = HistogramFamily(
            "pricing_upstream_cpu_wait_seconds",
            "Of the scheduling delay, time the process waited for a CPU.",
            "upstream",
        )
        self.hub_wait = HistogramFamily(
            ROUTE_HUB_WAIT,
            "Time a request was ready but waited for the hub along its critical path "
            "(inbound delay, the critical call's pre-send wait, scheduling delay, wake).",
            "route",
        )
        #: route -> seconds the requests' critical calls waited for the network.
        self.route_network_s: dict[str, float] = {}
        #: (culprit route, victim route) -> seconds of the victim's hub wait during which
        #: the culprit's greenlets ran.
        self.culprit_s: dict[tuple[str, str], float] = {}

    @property
    def families(self) -> tuple[HistogramFamily, ...]:
        return (
            self.inbound_delay,
            self.inbound_cpu_wait,
            self.handler,
            self.network,
            self.delay,
            self.cpu_wait,
            self.hub_wait,
        )

    def observe_call(self, upstream: str, timing: CallTiming) -> None:
        self.network.observe(upstream, timing.network_s)
        self.delay.observe(upstream, timing.scheduling_delay_s)
        self.cpu_wait.observe(upstream, timing.cpu_wait_s)

    def observe_request(self, route: str, timing: RequestTiming) -> None:
        self.handler.observe(route, timing.duration_s)
        if timing.inbound_delay_s is not None:
            self.inbound_delay.observe(route, timing.inbound_delay_s)
            self.inbound_cpu_wait.observe(route, timing.inbound_cpu_wait_s)
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
        self.hub_wait.observe(route, wait)
        if timing.inbound_culprits:
            self._blame(route, timing.inbound_culprits)

    def _blame(self, victim: str, culprits: Mapping[str, float]) -> None:
        totals = self.culprit_s
        for culprit, seconds in culprits.items():
            key = (culprit, victim)
            totals[key] = totals.get(key, 0.0) + seconds


#: Metric names `pricingctl routes suggest` reads back (tracing.usage).
ROUTE_CPU = "pricing_route_cpu_seconds_total"
ROUTE_NETWORK = "pricing_route_network_seconds_total"
ROUTE_HUB_WAIT = "pricing_route_hub_wait_seconds"
ROUTE_CULPRIT = "pricing_route_culprit_seconds_total"
HANDLER = "pricing_handler_duration_seconds"
INBOUND_DELAY = "pricing_inbound_delay_seconds"


def _family_lines(family: HistogramFamily, base: str) -> list[str]:
    lines = [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} histogram"]
    for value, histogram in sorted(family.by_label.items()):
        labels = f'{base},{family.label}="{_escape(value)}"'
        for bound, count in histogram.cumulative():
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            lines.append(f'{family.name}_bucket{{{labels},le="{le}"}} {count}')
        lines.append(f"{family.name}_sum{{{labels}}} {histogram.sum:.6f}")
        lines.append(f"{family.name}_count{{{labels}}} {histogram.count}")
    return lines


def _route_lines(worker: Any, base: str) -> list[str]:
    metrics: WorkerMetrics = worker.metrics
    route_cpu = worker.instrumentor.route_cpu if worker.instrumentor is not None else None
    lines = [
        f"# HELP {ROUTE_CPU} Time greenlets working for the route ran on the hub: its "
        "CPU time (runs over 1 ms less the thread's run-queue wait).",
        f"# TYPE {ROUTE_CPU} counter",
    ]
    if route_cpu is not None:
        for label, seconds in sorted(
            route_cpu.seconds().items(), key=lambda item: item[0] or UNKNOWN_LABEL
        ):
            route = _escape(label or UNKNOWN_LABEL)
            lines.append(f'{ROUTE_CPU}{{{base},route="{route}"}} {seconds:.6f}')
    lines += [
        f"# HELP {ROUTE_NETWORK} Time the route's requests waited on the network "
        "(their critical upstream call's network time).",
        f"# TYPE {ROUTE_NETWORK} counter",
    ]
    for route, seconds in sorted(metrics.route_network_s.items()):
        lines.append(f'{ROUTE_NETWORK}{{{base},route="{_escape(route)}"}} {seconds:.6f}')
    lines += [
        f"# HELP {ROUTE_CULPRIT} Of the victim route's hub wait, seconds during which "
        "greenlets of the route ran (delay pieces over 1 ms).",
        f"# TYPE {ROUTE_CULPRIT} counter",
    ]
    for (culprit, victim), seconds in sorted(metrics.culprit_s.items()):
        lines.append(
            f'{ROUTE_CULPRIT}{{{base},route="{_escape(culprit)}",victim="{_escape(victim)}"}} '
            f"{seconds:.6f}"
        )
    return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(worker: Any) -> str:
    """The exposition text for one worker (a `tracing.server.WorkerTracing`)."""
    base = f'pool="{_escape(worker.pool)}",pid="{os.getpid()}"'
    lines: list[str] = []
    gauge = worker.instrumentor.loop_lag if worker.instrumentor is not None else None
    if gauge is not None:
        histogram = gauge.histogram
        lines += [
            "# HELP pricing_loop_lag_seconds How late the hub ran a periodic timer, per tick.",
            "# TYPE pricing_loop_lag_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip((*LAG_BUCKETS_S, float("inf")), histogram.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            lines.append(f'pricing_loop_lag_seconds_bucket{{{base},le="{le}"}} {cumulative}')
        lines += [
            f"pricing_loop_lag_seconds_sum{{{base}}} {histogram.sum_s:.6f}",
            f"pricing_loop_lag_seconds_count{{{base}}} {cumulative}",
            "# HELP pricing_loop_lag_max_seconds Largest tick lag since the previous scrape.",
            "# TYPE pricing_loop_lag_max_seconds gauge",
            f"pricing_loop_lag_max_seconds{{{base}}} {gauge.take_max_lag_s():.6f}",
        ]
    lines += [
        "# HELP pricing_hub_blocks_total Hub blocks longer than the detector's threshold.",
        "# TYPE pricing_hub_blocks_total counter",
    ]
    for route, count in sorted(worker.hub_blocks.counts.items()):
        lines.append(f'pricing_hub_blocks_total{{{base},route="{_escape(route)}"}} {count}')
    for family in worker.metrics.families:
        lines += _family_lines(family, base)
    lines += _route_lines(worker, base)
    processor = worker.processor
    lines += [
        "# HELP pricing_spans_exported_total Spans handed to the exporter successfully.",
        "# TYPE pricing_spans_exported_total counter",
        f"pricing_spans_exported_total{{{base}}} {processor.exported_spans}",
        "# HELP pricing_spans_dropped_total Spans dropped (queue full or export failed).",
        "# TYPE pricing_spans_dropped_total counter",
        f"pricing_spans_dropped_total{{{base}}} {processor.dropped_spans}",
        "# HELP pricing_slow_traces_total Slow requests not sampled by Envoy: exported, or "
        "skipped past the per-worker export budget.",
        "# TYPE pricing_slow_traces_total counter",
        f'pricing_slow_traces_total{{{base},outcome="exported"}} {worker.slow_budget.exported}',
        f'pricing_slow_traces_total{{{base},outcome="skipped"}} {worker.slow_budget.dropped}',
    ]
    return "\n".join(lines) + "\n"
