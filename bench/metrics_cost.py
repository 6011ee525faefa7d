"""What the metrics cost a worker, in prometheus_client's multiprocess mode (each
value an mmap'ed file write, what the pools run) and in-process.

    python -m bench.metrics_cost [--n 200000]

Prints microseconds (best of 5 runs) for: an observation on the request path
(``PoolMetrics``: an in-process counter or histogram), the same observation made
directly on prometheus_client (what the request path paid before the flush), what one
offer adds in all (RED + three upstream calls + the timing histograms: 22
observations), and the flush that folds one second of a busy worker's counts (100
offers) into prometheus_client, per flush and spread over its offers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import timeit

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost")
    parser.add_argument("--n", type=int, default=200_000, help="observations per run")
    parser.add_argument("--child", choices=("mmap", "memory"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        for name, us in _measure(args.n).items():
            print(f"{args.child:<7} {name:<32} {us:7.2f} us")
        return 0
    # prometheus_client picks its mode at import: one child process per mode.
    with tempfile.TemporaryDirectory() as directory:
        for mode in ("mmap", "memory"):
            env = dict(os.environ)
            env.pop(MULTIPROC_DIR_ENV, None)
            if mode == "mmap":
                env[MULTIPROC_DIR_ENV] = directory
            argv_child = ["-m", "bench.metrics_cost", "--child", mode, "--n", str(args.n)]
            subprocess.run([sys.executable, *argv_child], env=env, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
