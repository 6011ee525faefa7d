"""`pricingctl bench metrics-cost`: what the metrics cost a worker, in prometheus_client's
multiprocess mode (each value an mmap'ed file write, what the pools run) and in-process.

    pricingctl bench metrics-cost [--n 200000]

Prints microseconds (best of 5 runs) for: an observation on the request path
(``PoolMetrics``: an in-process counter or histogram), the same observation made
directly on prometheus_client (what the request path paid before the flush), what one
offer adds in all (RED + three upstream calls + the timing histograms: 22
observations), and the flush that folds one second of a busy worker's counts (100
offers) into prometheus_client, per flush and spread over its offers. prometheus_client
picks its mode once, at import: each mode is measured in a child interpreter of its own
(``child``); ``metrics_cost.json`` in ``--out``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from toolkit.contract import MULTIPROC_DIR_ENV


def _measure(n: int) -> dict[str, float]:
    from tracing.metrics import PoolMetrics

    metrics = PoolMetrics(registry=None)
    route, upstream = "GET /v1/offers/bike", "vehicles"
    direct_histogram = metrics.upstream_duration.metric.labels(upstream)
    direct_counter = metrics.upstream_calls.metric.labels(upstream)

    def offer() -> None:
        metrics.observe_request("GET", "/v1/offers/bike", 200, 0.12)
        for name in ("vehicles", "routing", "promotions"):
            metrics.observe_upstream(name, 0.06, None)
            metrics.network(name).observe(0.06)
            metrics.delay(name).observe(0.001)
            metrics.cpu_wait(name).observe(0.0)
        metrics.handler(route).observe(0.1)
        metrics.inbound_delay(route).observe(0.0004)
        metrics.inbound_cpu_wait(route).observe(0.0)

    def best_us(fn: object, number: int) -> float:
        return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6  # type: ignore[arg-type]

    out = {
        "histogram observe": best_us(lambda: metrics.upstream_duration(upstream).observe(0.06), n),
        "counter inc": best_us(lambda: metrics.upstream_calls(upstream).inc(), n),
        "one offer (21 observations)": best_us(offer, n // 20),
        "direct prometheus histogram": best_us(lambda: direct_histogram.observe(0.06), n // 4),
        "direct prometheus counter": best_us(lambda: direct_counter.inc(), n // 4),
    }

    def second_of_offers() -> None:
        for _ in range(OFFERS_PER_FLUSH):
            offer()

    flushes = []
    for _ in range(max(n // 5000, 20)):
        second_of_offers()
        started = time.perf_counter()
        metrics.flush()
        flushes.append(time.perf_counter() - started)
    out["flush after 100 offers"] = min(flushes) * 1e6
    out["flush, per offer"] = out["flush after 100 offers"] / OFFERS_PER_FLUSH
    return out


#: Offers a busy io worker serves between two flushes (1 s at 100 offers/s).
OFFERS_PER_FLUSH = 100


SCHEMA = "pricingservice.bench.metrics-cost/1"
MODES = ("mmap", "memory")


def child(mode: str, n: int) -> None:
    """In the child interpreter: measure, print the figures as JSON."""
    print(json.dumps(_measure(n)))


def run_metrics_cost(n: int) -> dict[str, Any]:
    """Microseconds per operation, by mode, each the best of 5 runs."""
    from bench.run import BenchError

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        for mode in MODES:
            env = dict(os.environ)
            env.pop(MULTIPROC_DIR_ENV, None)
            if mode == "mmap":
                env[MULTIPROC_DIR_ENV] = directory
            code = f"from bench.metrics_cost import child; child({mode!r}, {n})"
            done = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
                raise BenchError(f"metrics-cost, {mode} mode: {lines[-1]}")
            out[mode] = json.loads(done.stdout)
    return {"schema": SCHEMA, "settings": {"observations": n, "runs": 5}, "us": out}


def write_metrics_cost(doc: dict[str, Any], out: Path) -> str:
    """metrics_cost.json; returns the summary to print (a `<mode> <label> <value> us` line
    each)."""
    from bench.report import write_json

    write_json(out / "metrics_cost.json", doc)
    lines = [
        f"{mode:<7} {name:<32} {us:7.2f} us"
        for mode, costs in doc["us"].items()
        for name, us in costs.items()
    ]
    return "\n".join([*lines, f"wrote {out / 'metrics_cost.json'}"])
