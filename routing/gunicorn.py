"""Gunicorn settings for one pool, derived from the route config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from routing.model import RouteConfig, layout_of
from toolkit.contract import POOL_ENV

# A gevent worker that does not notify the master for this long is killed.
# Our longest CPU request (a full batch) is well under a second.
WORKER_TIMEOUT_S = 30
# SIGTERM/HUP: seconds a worker gets to finish what it has accepted.
GRACEFUL_TIMEOUT_S = 10
# Seconds a worker whose master died serves on (gunicorn_conf.worker): long enough for a
# supervisor to start a new master on the same listening socket and see its workers
# serve (stack.supervise: RESTART_TIMEOUT_S, after at most BACKOFF_MAX_S), then it
# stops gracefully by itself; the supervisor stops it sooner, once the new ones serve.
ORPHAN_SERVE_S = 45
# Seconds a new client connection may take to send its first request
# (gunicorn_conf.worker): a connection that sends nothing is closed, not held.
READ_TIMEOUT_S = 10
# gunicorn's largest limit_request_line (0 would mean none: a very long line then costs
# the pool CPU quadratic in its length). Envoy lets through a longer one (up to
# max_request_headers_kb); the pool answers it 414, problem+json (gunicorn_conf.worker).
MAX_REQUEST_LINE = 8190
#: A worker of a pool whose every route Envoy retries is killed once its heartbeat thread
#: has been silent this long (gunicorn_conf.hung), as a share of the pool's shortest
#: route timeout. Stopped (SIGSTOP, a frozen cgroup): soon enough that a GET it held,
#: retried on another worker, still fits in that timeout. Still runnable (stuck in C code
#: that holds the GIL, or only starved of CPU by a busy machine): the whole timeout, by
#: when what it held has failed anyway.
HUNG_STOPPED_FRACTION = 0.3
HUNG_RUNNING_FRACTION = 1.0
#: The worker class every pool runs (gevent's, with a read timeout and problem+json errors).
WORKER_CLASS = "gunicorn_conf.worker.PoolWorker"


def gunicorn_settings(config: RouteConfig, pool_name: str) -> dict[str, Any]:
    """Top-level gunicorn settings (as a config module would set them) for a pool:
    every pool's (`server_settings`) and its own (`pool_settings`)."""
    return {**server_settings(config), **pool_settings(config, pool_name)}


def pool_settings(config: RouteConfig, pool_name: str) -> dict[str, Any]:
    """The settings that differ from pool to pool: its [pools.<name>] entry."""
    pool = config.pool(pool_name, layout_of(pool_name))
    return {
        "bind": [str(pool.bind)],
        # Envoy's circuit breakers keep connections to a replica near its capacity;
        # a backlog of the same size absorbs a burst of reconnects.
        "backlog": max(64, pool.replica_capacity),
        "workers": pool.workers,
        "worker_connections": pool.worker_connections,
        "keepalive": pool.keepalive_s,
        "wsgi_app": f"pricing:create_app(pool={pool.name!r})",
        "raw_env": [f"{POOL_ENV}={pool.name}"],
        "proc_name": f"pricing-{pool.name}",
    }


def server_settings(config: RouteConfig) -> dict[str, Any]:
    """The settings every pool shares."""
    return {
        "worker_class": WORKER_CLASS,
        "timeout": WORKER_TIMEOUT_S,
        "graceful_timeout": GRACEFUL_TIMEOUT_S,
        # Envoy bounds the headers (max_request_headers_kb) and answers problem+json;
        # the pool's own refusals are problem+json too (gunicorn_conf.worker).
        "limit_request_line": MAX_REQUEST_LINE,
        "limit_request_field_size": config.listener.max_request_headers_kb * 1024,
        # Only Envoy talks to a pool (loopback here, a NetworkPolicy in Kubernetes), and
        # Envoy sets X-Forwarded-Proto on every request, replacing the client's. The
        # other scheme headers gunicorn knows (X-Forwarded-Ssl, X-Forwarded-Protocol)
        # come from the client untouched: one that contradicts X-Forwarded-Proto made
        # gunicorn refuse the request, so they are not read at all.
        "forwarded_allow_ips": "*",
        "secure_scheme_headers": {"X-FORWARDED-PROTO": "https"},
        # One line per request from the pool too (JSON, with the trace id): the link
        # from Envoy's access log line to the app's lines and the trace.
        "accesslog": "-",
        "errorlog": "-",
        "loglevel": "info",
        # gunicorn 27's control socket defaults to one path per user: several
        # pools (and test stacks) would fight over it, and nothing here uses it.
        "control_socket_disable": True,
    }


@dataclass(frozen=True)
class HungLimits:
    """Seconds without a heartbeat after which a pool's master kills a worker."""

    stopped_s: float
    running_s: float


def hung_limits(config: RouteConfig, pool_name: str) -> HungLimits | None:
    """When the master of *pool_name* kills a worker whose heartbeat stopped
    (gunicorn_conf.hung); None when a route of the pool is not retried (a POST): its
    requests would be lost with the worker."""
    routes = config.routes_of(pool_name, layout_of(pool_name))
    if not routes or any(route.retry is None for route in routes):
        return None
    shortest_s = min(route.timeout_ms for route in routes) / 1000
    return HungLimits(shortest_s * HUNG_STOPPED_FRACTION, shortest_s * HUNG_RUNNING_FRACTION)
