"""A pool worker's tracing: what ``tracing.server.setup_worker`` builds once per process
and hands to whatever needs it (the Flask instrumentation, the request's spans, the
metrics sync), and which requests get spans (``Sampling``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from tracing.export import ThreadedSpanProcessor
from tracing.metrics import PoolMetrics, pool_metrics
from tracing.settings import TracingSettings
from tracing.span_records import SpanBuilder
from tracing.timing.hub_block import HubBlockLog
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import UNKNOWN_LABEL

log = logging.getLogger("tracing.server")

#: The instrumentation scope of the pools' spans (the service name is the resource's).
SCOPE: Final = "pricingservice"


@dataclass(frozen=True)
class Sampling:
    """Which requests get spans. Envoy decides (pools follow ``traceparent``'s sampled
    flag, so a trace is whole or absent); ``ratio`` is used only for requests that
    arrive without a decision (sent to a pool directly). A request slower than its
    route's threshold is exported in full whatever the decision."""

    ratio: float = 0.01
    #: route template (``"GET /v1/offers/bike"``) -> seconds.
    slow_s: Mapping[str, float] = field(default_factory=dict)
    default_slow_s: float = 1.0
    #: Slow requests exported per second and worker, at most. An overloaded worker
    #: finds every request slow: exporting them all would add the spans' CPU exactly
    #: when there is none to spare (measured: one io worker at 600 offers/s went from
    #: slow to serving nothing). The rest are counted, not exported.
    slow_per_s: float = 5.0

    def slow_threshold_s(self, route: str) -> float:
        return self.slow_s.get(route, self.default_slow_s)


class SlowBudget:
    """A token bucket for slow-request exports: ``take()`` says whether one may go."""

    __slots__ = ("_last", "_per_s", "_tokens", "dropped", "exported")

    def __init__(self, per_s: float) -> None:
        self._per_s = per_s
        self._tokens = per_s  # a burst of one second's worth
        self._last = time.monotonic()
        self.exported = 0
        self.dropped = 0

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._per_s, self._tokens + (now - self._last) * self._per_s)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.exported += 1
            return True
        self.dropped += 1
        return False


@dataclass
class WorkerTracing:
    """One worker's tracing, made by ``tracing.server.setup_worker``."""

    pool: str
    settings: TracingSettings
    provider: TracerProvider
    processor: ThreadedSpanProcessor
    instrumentor: GeventTimingInstrumentor | None  # when mode is FULL
    # Hub blocks per route, counted for /metrics (stays empty without the instrumentor).
    hub_blocks: HubBlockLog = field(default_factory=lambda: HubBlockLog(log))
    sampling: Sampling = field(default_factory=Sampling)
    # Request header in which the proxy in front sends when it got the request (Unix
    # seconds with decimals; routing.envoy sets it); None: not measured.
    envoy_start_header: str | None = None
    metrics: PoolMetrics = field(default_factory=pool_metrics)
    # The running totals above already added to the metrics (sync_metrics).
    synced: dict[Any, float] = field(default_factory=dict)
    slow_budget: SlowBudget = field(default_factory=lambda: SlowBudget(Sampling().slow_per_s))
    #: Builds the spans of slow unsampled requests, and of sampled ones when
    #: ``build_sampled`` (``tracing.span_records``).
    spans: SpanBuilder | None = None
    #: Requests Envoy sampled get their spans built at their end, not live: the sampler
    #: keeps every sampled parent (parent-based, as ours and OTEL_TRACES_SAMPLER's are).
    build_sampled: bool = False

    @property
    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer(SCOPE)

    def sync_metrics(self) -> None:
        """Bring the counts that real OS threads keep (span exporter, hub-block detector)
        and the slow-export budget's into the pool's metrics. Runs on the hub, before each
        metrics flush (``PoolMetrics.before_flush``: once a second and before a scrape)."""
        metrics, seen = self.metrics, self.synced
        metrics.sync(metrics.spans_exported, (), self.processor.exported_spans, seen)
        metrics.sync(metrics.spans_dropped, (), self.processor.dropped_spans, seen)
        metrics.sync(metrics.slow_traces, ("exported",), self.slow_budget.exported, seen)
        metrics.sync(metrics.slow_traces, ("skipped",), self.slow_budget.dropped, seen)
        for route, count in list(self.hub_blocks.counts.items()):
            metrics.sync(metrics.hub_blocks, (route or UNKNOWN_LABEL,), count, seen)
        # CPU per route (routes suggest): the switch tracer keeps it, per greenlet label.
        route_cpu = self.instrumentor.route_cpu if self.instrumentor is not None else None
        if route_cpu is not None:
            for label, ns in list(route_cpu.current().items()):
                metrics.sync(metrics.route_cpu, (label or UNKNOWN_LABEL,), ns / 1e9, seen)
