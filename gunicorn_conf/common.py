"""Settings and hooks shared by every pool's gunicorn config: `pool_settings` gives a
pool module its values (derived from routes.toml), the hooks are imported by each."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gunicorn_conf import hung
from routing.gunicorn import HungLimits, hung_limits, server_settings
from routing.gunicorn import pool_settings as pool_settings_of
from routing.load import load_routes
from routing.model import SHARED_POOL, layout_of
from toolkit.contract import (
    ACCESS_LOG_ENV,
    ENVOY_START_HEADER,
    METRICS_DIR_ENV,
    MULTIPROC_DIR_ENV,
    POOL_ENV,
)

#: What each pool's config module takes from here: every pool's settings and its hooks.
_SETTINGS = (
    *("worker_class", "timeout", "graceful_timeout"),
    *("limit_request_line", "limit_request_field_size"),
    *("forwarded_allow_ips", "secure_scheme_headers"),
    *("logger_class", "accesslog", "errorlog", "loglevel", "control_socket_disable"),
)
_HOOKS = (
    *("on_starting", "when_ready", "pre_fork", "post_fork", "post_worker_init"),
    *("worker_exit", "child_exit"),
)
__all__ = [*_SETTINGS, *_HOOKS]

log = logging.getLogger("gunicorn.error")


def settings_for(pool: str) -> dict[str, Any]:
    """The top-level settings of `pool`, read from the route config at start-up.
    The tracing environment is checked here, in the master: a value that cannot work
    (OTEL_TRACES_SAMPLER=always_on) stops the pool with one line, before any worker."""
    from tracing.settings import TracingSettings

    try:
        TracingSettings.from_env()
    except ValueError as exc:
        sys.exit(f"pool {pool}: {exc}")
    return {**every_pool_settings(), **pool_settings_of(load_routes(), pool)}


def every_pool_settings() -> dict[str, Any]:
    """The settings every pool shares: routes.toml's [listener], $PRICING_ACCESS_LOG."""
    settings = {
        **server_settings(load_routes()),
        # JSON lines from gunicorn and the app alike (gunicorn_conf.json_logs).
        "logger_class": "gunicorn_conf.json_logs.JsonLogger",
    }
    access_log = os.environ.get(ACCESS_LOG_ENV, "on")
    if access_log not in ("on", "off"):
        sys.exit(f"{ACCESS_LOG_ENV} must be on or off, not {access_log!r}")
    if access_log == "off":
        settings["accesslog"] = None
    return settings


def pool_settings(pool: str) -> SimpleNamespace:
    """The settings of `pool` by attribute, for its config module to name each one (a
    name it misspells stops the pool at start-up, an AttributeError)."""
    return SimpleNamespace(**settings_for(pool))


# --- Every pool's settings, as plain names each pool module imports -------------------
# Read from routes.toml (and the environment) when a pool's config module loads this one.

_every = SimpleNamespace(**every_pool_settings())

# Worker processes
worker_class = _every.worker_class
timeout = _every.timeout  # seconds a silent worker lives
graceful_timeout = _every.graceful_timeout  # seconds to finish what it accepted

# Requests: limits, and the proxy in front
limit_request_line = _every.limit_request_line
limit_request_field_size = _every.limit_request_field_size
forwarded_allow_ips = _every.forwarded_allow_ips
secure_scheme_headers = _every.secure_scheme_headers

# Logging
logger_class = _every.logger_class
accesslog = _every.accesslog
errorlog = _every.errorlog
loglevel = _every.loglevel

# Server mechanics
control_socket_disable = _every.control_socket_disable


# --- metrics: prometheus_client's multiprocess mode, one directory per pool -----------

# MULTIPROC_DIR_ENV is prometheus_client's own variable: the master must not import
# prometheus_client (nor tracing.metrics) before it is set.


def metrics_dir(pool: str) -> Path:
    base = os.environ.get(METRICS_DIR_ENV) or Path(
        tempfile.gettempdir(), f"pricingservice-metrics-{os.getuid()}"
    )
    return Path(base) / pool


def on_starting(server: Any) -> None:
    """Point the pool's workers at its metrics directory, emptied: what a previous run
    of the pool left there would otherwise be summed into this one's. Set here, in the
    master before the first fork and before anything imports prometheus_client (it
    picks its mode once, at import)."""
    path = metrics_dir(os.environ.get(POOL_ENV, SHARED_POOL))
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.db"):
        old.unlink(missing_ok=True)
    os.environ[MULTIPROC_DIR_ENV] = str(path)


def child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: drop its live gauges (its counters and histograms stay in the
    pool's totals), and close its heartbeat file."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
    beat = getattr(worker, "hung_beat", None)
    if beat is not None:
        beat.close()


# --- hung workers: killed at once where every route is retried (gunicorn_conf.hung) ---


def _hung_limits() -> HungLimits | None:
    return hung_limits(load_routes(), os.environ.get(POOL_ENV, SHARED_POOL))


def when_ready(server: Any) -> None:
    """The master looks for hung workers between the turns of its loop."""
    limits = _hung_limits()
    if limits is not None:
        hung.watch_for_hung_workers(server, limits)
        server.log.info(
            "pool: a worker without a heartbeat for %.0f ms (stopped) or %.0f ms is killed",
            limits.stopped_s * 1000,
            limits.running_s * 1000,
        )


def pre_fork(server: Any, worker: Any) -> None:
    """In the master, before the fork: the worker's heartbeat file, if its pool has one."""
    if _hung_limits() is not None:
        worker.hung_beat = hung.Heartbeat(server.cfg)


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
            label: policy.slow_ms(route) / 1000
            for route in config.routes
            for label in route.labels()
        },
    )
    traced = tracing.setup_worker(
        pool_name, sampling=sampling, envoy_start_header=ENVOY_START_HEADER
    )
    if traced is not None and traced.instrumentor is not None:
        tracing.watch_gunicorn_worker(worker)
    worker.log.info(
        "worker %s serving pool %s (nice %s, tracing %s)",
        worker.pid,
        pool_name,
        pool.nice,
        traced.settings.mode.value if traced else "off",
    )


#: Net allocations of container objects between two young-generation collections
#: (CPython's default: 700). Every request in flight holds its objects for its ~100 ms,
#: so at 700 a collection found them alive and promoted them, to be walked again in the
#: older generations. One io worker at 480 offers/s (BENCHMARKS.md, "Young collections"):
#: at 700, the collector took 4.7 % of its CPU (5.3 % with tracing at its default, whose
#: per-call measurements are in flight as long), in ~1,700 collections a minute of at
#: most 2.4-4.4 ms; at 10,000, 0.5 % (0.7 %), in ~25 a minute of at most 6-8 ms.
GC_YOUNG_THRESHOLD = 10_000


def post_worker_init(worker: Any) -> None:
    """The app is loaded: freeze what start-up made (modules, the app, the OpenTelemetry
    SDK, the route config) out of the garbage collector's sight. Every full collection
    would otherwise walk all of it again, on the hub, while requests wait: tens of ms
    each, more with tracing on (its SDK is a larger heap). What requests allocate is
    collected as before, less often (``GC_YOUNG_THRESHOLD``); only the start-up objects
    are never looked at again."""
    import gc

    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    worker.log.debug("gc: %d start-up objects frozen", gc.get_freeze_count())
    # Serving from here on: the heartbeat thread starts (gunicorn_conf.hung).
    beat = getattr(worker, "hung_beat", None)
    limits = _hung_limits()
    if beat is not None and limits is not None:
        hung.start_heartbeat(beat, limits)


def worker_exit(server: Any, worker: Any) -> None:
    """Flush the spans this worker still holds, then its metrics: the counts since the
    last periodic flush (tracing.metrics) would otherwise be lost with the process.
    A SIGKILLed worker runs no hook: it loses at most one flush interval of counts."""
    from tracing import metrics
    from tracing import server as tracing

    tracing.shutdown_worker()
    metrics.flush()
