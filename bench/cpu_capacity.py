"""`pricingctl bench cpu-capacity`: the rideshare quotes one cpu worker serves per second.

One split stack with ONE cpu worker, no other load. `clients` closed-loop clients
(default 2: one request running, one queued in Envoy, so the worker never waits for
the next) send cross-town rideshare quotes through Envoy for `duration_s` after a
warm-up. A cpu worker runs one request at a time, so its throughput is its capacity:
1 / CPU seconds per quote, less whatever the machine takes from it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from bench.run import prepared_config, running_stack
from bench.traffic import rideshare_requests
from routing.model import Layout, RouteConfig
from stack.procfs import process_cpu_s, tree
from toolkit.fetch import fetch
from tracing.readback.report import percentile

SCHEMA = "pricingservice.bench.cpu-capacity/1"
WARMUP_S = 3.0


def run_cpu_capacity(
    config: RouteConfig, *, duration_s: float, clients: int, run_dir: Path
) -> dict[str, Any]:
    # One cpu worker and one io worker (it only has to be up: it gets no traffic).
    config = prepared_config(config, 2, run_dir)
    route = config.route_for_endpoint("offers.rideshare")
    assert route is not None
    bodies = [r.body for r in rideshare_requests(config, "pricing")]
    with running_stack(config, Layout.SPLIT, run_dir / "stack", tracing=False) as stack:
        url = f"{stack.url}{route.path}"
        pool_pid = stack.procs[stack.replica_name("cpu")].pid
        latencies: list[float] = []
        failures = 0
        lock = threading.Lock()
        stop_at = time.monotonic() + WARMUP_S + duration_s
        window_start = time.monotonic() + WARMUP_S

        def client(n: int) -> None:
            nonlocal failures
            i = n
            while (now := time.monotonic()) < stop_at:
                body = bodies[i % len(bodies)]
                i += clients
                try:
                    ok = fetch(url, method="POST", body=body, timeout_s=10).status == 200
                except OSError:
                    ok = False
                if now >= window_start:
                    with lock:
                        if ok:
                            latencies.append(time.monotonic() - now)
                        else:
                            failures += 1

        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
        for t in threads:
            t.start()
        time.sleep(max(0.0, window_start - time.monotonic()))
        cpu_before = _cpu(pool_pid)
        for t in threads:
            t.join()
        cpu_s = _cpu(pool_pid) - cpu_before
    served = len(latencies)
    return {
        "schema": SCHEMA,
        "duration_s": duration_s,
        "clients": clients,
        "quotes_per_s": round(served / duration_s, 1),
        "failed": failures,
        "p50_ms": round(percentile(latencies, 50) * 1000, 1) if latencies else None,
        "worker_cpu_ms_per_quote": round(cpu_s / served * 1000, 1) if served else None,
    }


def _cpu(root: int) -> float:
    return sum(process_cpu_s(pid) or 0.0 for pid in tree(root))
