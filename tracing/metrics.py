"""`GET /metrics` on every pool (Prometheus text format): the hub's loop lag, hub
blocks per route and span export counters of the worker that answers.

Each gunicorn worker is its own process; the series carry `pool` and `pid`
labels, so a scraper (or a person with curl) sees which worker it reached.
Not routed through Envoy: like /healthz it is for whoever runs the pools.
"""

from __future__ import annotations

import os
from typing import Any

from tracing.timing.loop_lag import LAG_BUCKETS_S

#: The endpoint name; its path is [meta].metrics in routes.toml.
ENDPOINT = "meta.metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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
    processor = worker.processor
    lines += [
        "# HELP pricing_spans_exported_total Spans handed to the exporter successfully.",
        "# TYPE pricing_spans_exported_total counter",
        f"pricing_spans_exported_total{{{base}}} {processor.exported_spans}",
        "# HELP pricing_spans_dropped_total Spans dropped (queue full or export failed).",
        "# TYPE pricing_spans_dropped_total counter",
        f"pricing_spans_dropped_total{{{base}}} {processor.dropped_spans}",
    ]
    return "\n".join(lines) + "\n"
