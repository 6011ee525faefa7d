"""What one metrics observation costs on the request path, in prometheus_client's
multiprocess mode (each value an mmap'ed file write) and in-process, against the
project's former plain-Python histogram.

    python -m bench.metrics_cost [--n 200000]

Prints microseconds per observation (best of 5 runs): a histogram observe, a counter
inc, and what one offer adds in all (RED + three upstream calls + the timing
histograms).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import timeit


def _measure(n: int) -> dict[str, float]:
    from tracing.metrics import PoolMetrics
    from tracing.timing.histogram import HistogramFamily

    metrics = PoolMetrics(registry=None)
    plain = HistogramFamily("x", "x", "route")
    route, upstream = "GET /v1/offers/bike", "vehicles"

    def offer() -> None:
        metrics.observe_request(route, 200, 0.12)
        for name in ("vehicles", "routing", "promotions"):
            metrics.observe_upstream(name, 0.06, None)
            metrics.network(name).observe(0.06)
            metrics.delay(name).observe(0.001)
            metrics.cpu_wait(name).observe(0.0)
        metrics.handler(route).observe(0.1)
        metrics.inbound_delay(route).observe(0.0004)
        metrics.inbound_cpu_wait(route).observe(0.0)

    cases = {
        "histogram observe": lambda: metrics.upstream_duration(upstream).observe(0.06),
        "counter inc": lambda: metrics.upstream_calls(upstream).inc(),
        "former plain histogram observe": lambda: plain.observe(route, 0.06),
    }
    out = {name: min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6 for name, fn in cases.items()}
    out["one offer (22 observations)"] = (
        min(timeit.repeat(offer, number=n // 20, repeat=5)) / (n // 20) * 1e6
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost")
    parser.add_argument("--n", type=int, default=200_000, help="observations per run")
    parser.add_argument("--child", choices=("mmap", "memory"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        for name, us in _measure(args.n).items():
            print(f"{args.child:<7} {name:<32} {us:6.2f} us")
        return 0
    # prometheus_client picks its mode at import: one child process per mode.
    with tempfile.TemporaryDirectory() as directory:
        for mode in ("mmap", "memory"):
            env = dict(os.environ)
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
            if mode == "mmap":
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            argv_child = ["-m", "bench.metrics_cost", "--child", mode, "--n", str(args.n)]
            subprocess.run([sys.executable, *argv_child], env=env, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
