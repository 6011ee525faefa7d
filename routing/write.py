"""Write a route config back as routes.toml: the inverse of `routing.load`.

The gunicorn pools read their settings (worker count, nice, ...) from the route
config FILE named by $PRICING_ROUTES, so a derived config (the benchmark's
`--workers N`, a test's changed path) has to exist on disk. This is a small writer
for the routes.toml schema, not a general TOML writer; the written file is read back
with `routing.load`, so a mistake here fails at once, by name.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from routing.load import load_routes
from routing.model import META_NAMES, META_PREFIX, SHARED_POOL, Pool, Route, RouteConfig


def _value(v: object) -> str:
    # JSON strings, integers and lists of strings are valid TOML values.
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(v)


def _pool_lines(pool: Pool, *, shared: bool) -> list[str]:
    binds = tuple(str(b) for b in pool.binds)
    lines = [f"bind = {_value(binds if len(binds) > 1 else binds[0])}"]
    if not shared:
        lines.append(f"workers = {pool.workers}")
    lines += [
        f"worker_connections = {pool.worker_connections}",
        f"keepalive_s = {pool.keepalive_s}",
        f"max_pending = {pool.max_pending}",
    ]
    if not shared:
        lines.append(f"nice = {pool.nice}")
        if pool.worker_rps is not None:
            lines.append(f"worker_rps = {pool.worker_rps}")
        if pool.latency_ms is not None:
            lines.append(f"latency_ms = {pool.latency_ms}")
    return lines


def _route_lines(route: Route) -> list[str]:
    lines = [
        "[[routes]]",
        f"endpoint = {_value(route.endpoint)}",
        # A meta route's path is in [meta], written once.
        *([] if route.endpoint.startswith(META_PREFIX) else [f"path = {_value(route.path)}"]),
        f"methods = {_value(route.methods)}",
        f"pool = {_value(route.pool)}",
        f"timeout_ms = {route.timeout_ms}",
    ]
    if route.retry is not None:
        lines.append(
            f"retry = {{ attempts = {route.retry.attempts}, on = {_value(route.retry.on)} }}"
        )
    if route.slow_ms is not None:
        lines.append(f"slow_ms = {route.slow_ms}")
    if route.min_budget_ms is not None:
        lines.append(f"min_budget_ms = {route.min_budget_ms}")
    if route.objective_percent is not None:
        lines.append(f"objective_percent = {route.objective_percent!r}")
    return lines


DERIVED_HEADER = "# A derived route config, written by routing.write; do not edit."


def render_routes_toml(config: RouteConfig, header: str = DERIVED_HEADER) -> str:
    """routes.toml text for `config`, below the comment line(s) `header`. The shared
    pool's worker count is not written: the loader always derives it as the sum of the
    split pools' workers."""
    listener = config.listener
    out = [
        header,
        "[listener]",
        f"address = {_value(listener.address.host)}",
        f"port = {listener.address.port}",
        f"max_request_bytes = {listener.max_request_bytes}",
        f"max_request_headers_kb = {listener.max_request_headers_kb}",
        f"max_downstream_connections = {listener.max_downstream_connections}",
        f"idle_timeout_s = {listener.idle_timeout_s}",
        "",
        "[admin]",
        f"address = {_value(config.admin.host)}",
        f"port = {config.admin.port}",
        "",
        "[upstreams]",
        f"base_url = {_value(config.upstream_base_url)}",
        "",
    ]
    for pool in config.pools:
        out += [f"[pools.{pool.name}]", *_pool_lines(pool, shared=False), ""]
    out += [f"[{SHARED_POOL}]", *_pool_lines(config.shared, shared=True), ""]
    out += [
        "[meta]",
        *(f"{name} = {_value(getattr(config.meta, name))}" for name in META_NAMES),
        "",
    ]
    tracing = config.tracing
    out += [
        "[tracing]",
        f"sample_percent = {tracing.sample_percent!r}",
        f"slow_fraction = {tracing.slow_fraction!r}",
        f"collector = {_value(str(tracing.collector))}",
        f"trust_incoming = {_value(tracing.trust_incoming)}",
        "",
    ]
    for route in config.routes:
        out += [*_route_lines(route), ""]
    return "\n".join(out)


def write_atomic(path: Path, text: str) -> None:
    """Write `path` so that a reader (a booting worker, Envoy watching the directory)
    sees the old file or the new one, never half of one, and a crash leaves one of the
    two on disk: a temporary file in the same directory, flushed to disk, renamed.
    The file keeps its mode, or gets 0644 (not mkstemp's 0600): the compose files are
    mounted into containers whose processes are not their owner."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename itself is durable once the directory is.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_routes(config: RouteConfig, path: Path, header: str = DERIVED_HEADER) -> RouteConfig:
    """Write `config` to `path` (atomically) and load it back: the result's `source` is
    the file."""
    write_atomic(path, render_routes_toml(config, header))
    written = load_routes(path)
    if written != config:
        raise ValueError(f"{path}: the written route config does not read back the same")
    return replace(written, source=str(path.resolve()))
