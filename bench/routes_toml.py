"""The route config for `--workers N`, written as a TOML file the pools can read.

The gunicorn pools read their settings (worker count, nice, ...) from the route
config FILE named by $PRICING_ROUTES, not from the RouteConfig object the driver
holds, so a derived config has to exist on disk. This is a small writer for the
routes.toml schema (routing.load), not a general TOML writer; the written file is
read back with routing.load so a mistake here fails at once, by name.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from routing.load import load_routes
from routing.model import SHARED_POOL, Pool, Route, RouteConfig

CPU_POOL = "cpu"
IO_POOL = "io"


def with_workers(config: RouteConfig, workers: int) -> RouteConfig:
    """The same config with N processes in total: cpu N-1 + io 1 (split), shared N."""
    names = {p.name for p in config.pools}
    if names != {CPU_POOL, IO_POOL}:
        raise ValueError(
            f"--workers needs exactly the pools {CPU_POOL!r} and {IO_POOL!r}; "
            f"the route config has {', '.join(sorted(names))}"
        )
    if workers < 2:
        raise ValueError("--workers must be at least 2 (one cpu and one io process)")
    pools = tuple(
        replace(p, workers=workers - 1 if p.name == CPU_POOL else 1) for p in config.pools
    )
    return replace(config, pools=pools, shared=replace(config.shared, workers=workers))


def _value(v: object) -> str:
    # JSON strings, integers and lists of strings are valid TOML values.
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(v)


def _pool_lines(pool: Pool, *, shared: bool) -> list[str]:
    lines = [f"bind = {_value(str(pool.bind))}"]
    if not shared:
        lines.append(f"workers = {pool.workers}")
    lines += [
        f"worker_connections = {pool.worker_connections}",
        f"keepalive_s = {pool.keepalive_s}",
        f"max_pending = {pool.max_pending}",
    ]
    if not shared:
        lines.append(f"nice = {pool.nice}")
    return lines


def _route_lines(route: Route) -> list[str]:
    lines = [
        "[[routes]]",
        f"endpoint = {_value(route.endpoint)}",
        f"path = {_value(route.path)}",
        f"methods = {_value(route.methods)}",
        f"pool = {_value(route.pool)}",
        f"timeout_ms = {route.timeout_ms}",
    ]
    if route.retry is not None:
        lines.append(
            f"retry = {{ attempts = {route.retry.attempts}, on = {_value(route.retry.on)} }}"
        )
    return lines


def render_routes_toml(config: RouteConfig) -> str:
    """routes.toml text for `config`. The shared pool's worker count is not written:
    the loader always derives it as the sum of the split pools' workers."""
    listener = config.listener
    out = [
        "# Written by `pricingctl bench`: a derived route config; do not edit.",
        "[listener]",
        f"address = {_value(listener.address.host)}",
        f"port = {listener.address.port}",
        f"max_request_bytes = {listener.max_request_bytes}",
        f"max_request_headers_kb = {listener.max_request_headers_kb}",
        f"max_downstream_connections = {listener.max_downstream_connections}",
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
    for route in config.routes:
        out += [*_route_lines(route), ""]
    return "\n".join(out)


def write_routes(config: RouteConfig, path: Path) -> RouteConfig:
    """Write `config` to `path` and load it back: the result's `source` is the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_routes_toml(config), encoding="utf-8")
    written = load_routes(path)
    if written != config:
        raise ValueError(f"{path}: the written route config does not read back the same")
    return replace(written, source=str(path.resolve()))
