"""Settings and hooks shared by every pool's gunicorn config."""

from __future__ import annotations

import logging
import os
from typing import Any

from routing.env import DEFAULT_HTTP_CLIENT, HTTP_CLIENT_ENV, POOL_ENV
from routing.envoy import ENVOY_START_HEADER
from routing.gunicorn import gunicorn_settings, layout_of
from routing.load import load_routes
from routing.model import SHARED_POOL

log = logging.getLogger("gunicorn.error")


def settings_for(pool: str) -> dict[str, Any]:
    """The top-level settings of `pool`, read from the route config at start-up."""
    return gunicorn_settings(load_routes(), pool)


# --- server hooks ------------------------------------------------------------


def post_fork(server: Any, worker: Any) -> None:
    """Per-worker set-up. Runs in the worker after the fork, never in the master:
    threads and exporters started before the fork would not survive it."""
    pool_name = os.environ.get(POOL_ENV, SHARED_POOL)
    config = load_routes()
    pool = config.pool(pool_name, layout_of(pool_name))
    if pool.nice:
        # Lower priority for CPU pools: when the machine is busy the kernel
        # runs the I/O pool's greenlets first.
        os.nice(pool.nice)
    from tracing import server as tracing

    policy = config.tracing
    sampling = tracing.Sampling(
        ratio=policy.sample_percent / 100,
        slow_s={
            f"{method} {route.path}": policy.slow_ms(route) / 1000
            for route in config.routes
            for method in route.methods
        },
    )
    traced = tracing.setup_worker(
        pool_name, sampling=sampling, envoy_start_header=ENVOY_START_HEADER
    )
    if traced is not None and traced.instrumentor is not None:
        tracing.watch_gunicorn_worker(worker)
    worker.log.info(
        "worker %s serving pool %s (nice %s, tracing %s, upstream client %s)",
        worker.pid,
        pool_name,
        pool.nice,
        traced.settings.mode.value if traced else "off",
        os.environ.get(HTTP_CLIENT_ENV) or DEFAULT_HTTP_CLIENT,
    )


def worker_exit(server: Any, worker: Any) -> None:
    """Flush the spans this worker still holds."""
    from tracing import server as tracing

    tracing.shutdown_worker()
