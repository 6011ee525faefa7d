"""Load and validate `routes.toml`.

Every problem is raised at load time as a RouteConfigError that names the
route (by endpoint) or the key, so a bad config never reaches a running pool.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from routing.errors import RouteConfigError
from routing.model import (
    IDEMPOTENT_METHODS,
    META_NAMES,
    META_PREFIX,
    SAFE_RETRY_CONDITIONS,
    SHARED_POOL,
    Address,
    Listener,
    MetaRoutes,
    Pool,
    RetryPolicy,
    Route,
    RouteConfig,
    TracingPolicy,
)
from toolkit.contract import ROUTES_ENV

DEFAULT_ROUTES_PATH = Path(__file__).resolve().parent.parent / "routes.toml"

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_ENDPOINT = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)+$|^/$")

_TOP_KEYS = {"listener", "admin", "upstreams", "pools", "shared", "meta", "tracing", "routes"}
_LISTENER_KEYS = {
    "address",
    "port",
    "max_request_bytes",
    "max_request_headers_kb",
    "max_downstream_connections",
    "idle_timeout_s",
}
_POOL_KEYS = {
    "bind",
    "workers",
    "worker_connections",
    "keepalive_s",
    "max_pending",
    "nice",
    "worker_rps",
    "latency_ms",
}
_SHARED_KEYS = _POOL_KEYS - {"workers", "nice", "worker_rps", "latency_ms"}
_ROUTE_KEYS = {
    "endpoint",
    "path",
    "methods",
    "pool",
    "timeout_ms",
    "retry",
    "slow_ms",
    "min_budget_ms",
    "objective_percent",
}
_RETRY_KEYS = {"attempts", "on"}


def default_routes_path() -> Path:
    return Path(os.environ.get(ROUTES_ENV) or DEFAULT_ROUTES_PATH)


def load_routes(path: str | os.PathLike[str] | None = None) -> RouteConfig:
    """Read and validate a route config file (default: $PRICING_ROUTES or ./routes.toml)."""
    source = Path(path) if path is not None else default_routes_path()
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RouteConfigError(f"{source}: route config not found") from None
    except OSError as exc:
        raise RouteConfigError(f"{source}: cannot read route config: {exc.strerror}") from None
    return parse_routes(text, source=str(source))


def parse_routes(text: str, *, source: str = "routes.toml") -> RouteConfig:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RouteConfigError(f"{source}: not valid TOML: {exc}") from None
    try:
        return _build(raw, source)
    except RouteConfigError as exc:
        raise RouteConfigError(f"{source}: {exc}") from None


def _build(raw: Mapping[str, Any], source: str) -> RouteConfig:
    _only(raw, _TOP_KEYS, "top level")
    listener_raw = _table(raw, "listener")
    _only(listener_raw, _LISTENER_KEYS, "[listener]")
    listener = Listener(
        address=Address(
            _str(listener_raw, "address", "[listener]"),
            _int(listener_raw, "port", "[listener]", 1, 65535),
        ),
        max_request_bytes=_int(
            listener_raw, "max_request_bytes", "[listener]", 1024, 64 << 20, default=65536
        ),
        max_request_headers_kb=_int(
            listener_raw, "max_request_headers_kb", "[listener]", 1, 8192, default=32
        ),
        max_downstream_connections=_int(
            listener_raw, "max_downstream_connections", "[listener]", 1, 1_000_000, default=4096
        ),
        idle_timeout_s=_int(listener_raw, "idle_timeout_s", "[listener]", 1, 3600, default=60),
    )
    admin_raw = _table(raw, "admin")
    _only(admin_raw, {"address", "port"}, "[admin]")
    admin = Address(
        _str(admin_raw, "address", "[admin]"), _int(admin_raw, "port", "[admin]", 1, 65535)
    )
    _require_loopback(admin.host, "[admin].address")

    upstreams_raw = _table(raw, "upstreams")
    _only(upstreams_raw, {"base_url"}, "[upstreams]")
    base_url = _str(upstreams_raw, "base_url", "[upstreams]")
    if not re.match(r"^https?://[^/\s]+$", base_url):
        raise RouteConfigError(
            f"[upstreams].base_url must look like http://host:port with no path, got {base_url!r}"
        )

    pools_raw = _table(raw, "pools")
    if not pools_raw:
        raise RouteConfigError("[pools] must declare at least one pool")
    pools = tuple(_pool(name, body) for name, body in pools_raw.items())

    shared_raw = _table(raw, "shared")
    _only(shared_raw, _SHARED_KEYS, "[shared]")
    shared = _pool(
        SHARED_POOL,
        {**shared_raw, "workers": sum(p.workers * p.replicas for p in pools), "nice": 0},
        where="[shared]",
    )

    meta = _meta(_table(raw, "meta"))

    routes_raw = raw.get("routes")
    if not isinstance(routes_raw, list) or not routes_raw:
        raise RouteConfigError("[[routes]] must list at least one route")
    pool_names = {p.name for p in pools}
    routes = tuple(_route(i, body, pool_names, meta) for i, body in enumerate(routes_raw))

    _unique(routes, pools, shared, listener, admin, meta)
    tracing = _tracing(raw.get("tracing", {}))
    return RouteConfig(
        listener=listener,
        admin=admin,
        upstream_base_url=base_url,
        pools=pools,
        shared=shared,
        routes=routes,
        meta=meta,
        tracing=tracing,
        source=source,
    )


def _tracing(raw: Any) -> TracingPolicy:
    if not isinstance(raw, Mapping):
        raise RouteConfigError("[tracing] must be a table")
    _only(raw, {"sample_percent", "slow_fraction", "collector", "trust_incoming"}, "[tracing]")
    default = TracingPolicy()
    percent = raw.get("sample_percent", default.sample_percent)
    if isinstance(percent, bool) or not isinstance(percent, int | float) or not 0 <= percent <= 100:
        raise RouteConfigError(
            f"[tracing].sample_percent must be a number from 0 to 100, got {percent!r}"
        )
    fraction = raw.get("slow_fraction", default.slow_fraction)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not fraction > 0:
        raise RouteConfigError(
            f"[tracing].slow_fraction must be a number above 0, got {fraction!r}"
        )
    collector = default.collector
    if "collector" in raw:
        collector = _address(_str(raw, "collector", "[tracing]"), "[tracing].collector")
    trust = raw.get("trust_incoming", default.trust_incoming)
    if not isinstance(trust, bool):
        raise RouteConfigError(f"[tracing].trust_incoming must be true or false, got {trust!r}")
    return TracingPolicy(float(percent), float(fraction), collector, trust)


def _meta(raw: Mapping[str, Any]) -> MetaRoutes:
    _only(raw, set(META_NAMES), "[meta]")
    paths = {}
    for name in META_NAMES:
        path = _str(raw, name, "[meta]")
        if not _PATH.match(path):
            raise RouteConfigError(f"[meta].{name} must be a literal absolute path, got {path!r}")
        paths[name] = path
    return MetaRoutes(**paths)


def _pool(name: str, body: Any, where: str | None = None) -> Pool:
    where = where or f"[pools.{name}]"
    if name == SHARED_POOL and where != "[shared]":
        raise RouteConfigError(
            f"{where}: the name {SHARED_POOL!r} is reserved for the shared layout"
        )
    if not _NAME.match(name):
        raise RouteConfigError(f"{where}: pool names are lower-case identifiers, got {name!r}")
    if not isinstance(body, Mapping):
        raise RouteConfigError(f"{where} must be a table")
    _only(body, _POOL_KEYS, where)
    binds = _binds(body, where)
    return Pool(
        name=name,
        binds=binds,
        workers=_int(body, "workers", where, 1, 64),
        worker_connections=_int(body, "worker_connections", where, 1, 100_000),
        keepalive_s=_int(body, "keepalive_s", where, 0, 3600, default=2),
        max_pending=_int(body, "max_pending", where, 1, 100_000, default=64),
        nice=_int(body, "nice", where, 0, 19, default=0),
        worker_rps=_int(body, "worker_rps", where, 1, 1_000_000) if "worker_rps" in body else None,
        latency_ms=_int(body, "latency_ms", where, 1, 300_000) if "latency_ms" in body else None,
    )


def _binds(body: Mapping[str, Any], where: str) -> tuple[Address, ...]:
    """`bind`: one "host:port", or a list of them, one per replica (each on its own
    host: 127.0.0.2, 127.0.0.3, ... stand in for machines locally)."""
    raw = body.get("bind")
    texts = raw if isinstance(raw, list) else [raw]
    if not texts or not all(isinstance(t, str) and t for t in texts):
        raise RouteConfigError(
            f"{where}: bind must be a non-empty string or a non-empty list of strings"
        )
    binds = tuple(_address(str(t), f"{where}.bind") for t in texts)
    for bind in binds:
        _require_loopback(bind.host, f"{where}.bind")
    hosts = [b.host for b in binds]
    if len(set(hosts)) != len(hosts):
        raise RouteConfigError(f"{where}.bind: each replica needs its own host, got {texts}")
    return binds


def _route(index: int, body: Any, pool_names: set[str], meta: MetaRoutes) -> Route:
    if not isinstance(body, Mapping):
        raise RouteConfigError(f"routes[{index}] must be a table")
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or not _ENDPOINT.match(endpoint):
        raise RouteConfigError(
            f"routes[{index}].endpoint must be a Flask endpoint name such as 'offers.bike', "
            f"got {endpoint!r}"
        )
    where = f"route {endpoint!r}"
    _only(body, _ROUTE_KEYS, where)
    if endpoint.startswith(META_PREFIX):
        # Every pool serves a meta route at the path [meta] gives it; a route entry
        # only asks Envoy to route it too.
        name = endpoint.removeprefix(META_PREFIX)
        if name not in META_NAMES:
            raise RouteConfigError(
                f"{where}: no such meta route (meta routes: {', '.join(META_NAMES)})"
            )
        if "path" in body:
            raise RouteConfigError(f"{where}: its path is [meta].{name}; remove `path` here")
        path = getattr(meta, name)
    else:
        path = _str(body, "path", where)
    if not _PATH.match(path):
        raise RouteConfigError(f"{where}: path must be a literal absolute path, got {path!r}")
    methods_raw = body.get("methods")
    if (
        not isinstance(methods_raw, list)
        or not methods_raw
        or not all(isinstance(m, str) for m in methods_raw)
    ):
        raise RouteConfigError(f"{where}: methods must be a non-empty list of HTTP methods")
    methods = tuple(m.upper() for m in methods_raw)
    unknown = sorted(set(methods) - HTTP_METHODS)
    if unknown:
        raise RouteConfigError(f"{where}: unknown HTTP method(s) {', '.join(unknown)}")
    pool = _str(body, "pool", where)
    if pool not in pool_names:
        raise RouteConfigError(
            f"{where}: pool {pool!r} is not declared (pools: {', '.join(sorted(pool_names))})"
        )
    timeout_ms = _int(body, "timeout_ms", where, 1, 300_000)
    retry = None
    if "retry" in body:
        retry_raw = body["retry"]
        if not isinstance(retry_raw, Mapping):
            raise RouteConfigError(f"{where}: retry must be a table")
        _only(retry_raw, _RETRY_KEYS, f"{where}.retry")
        on = retry_raw.get("on", sorted(SAFE_RETRY_CONDITIONS))
        if not isinstance(on, list) or not on or not all(isinstance(c, str) for c in on):
            raise RouteConfigError(f"{where}: retry.on must be a non-empty list of conditions")
        unsafe = sorted(set(on) - SAFE_RETRY_CONDITIONS)
        if unsafe:
            raise RouteConfigError(
                f"{where}: retry.on {', '.join(unsafe)} is not allowed; "
                f"safe conditions are {', '.join(sorted(SAFE_RETRY_CONDITIONS))}"
            )
        non_idempotent = sorted(set(methods) - IDEMPOTENT_METHODS)
        if non_idempotent:
            raise RouteConfigError(
                f"{where}: retries are only allowed for idempotent methods, "
                f"not {', '.join(non_idempotent)}"
            )
        retry = RetryPolicy(
            attempts=_int(retry_raw, "attempts", f"{where}.retry", 1, 5), on=tuple(on)
        )
    return Route(
        endpoint=endpoint,
        path=path,
        methods=methods,
        pool=pool,
        timeout_ms=timeout_ms,
        retry=retry,
        slow_ms=_int(body, "slow_ms", where, 1, 300_000) if "slow_ms" in body else None,
        min_budget_ms=_min_budget(body, where, timeout_ms),
        objective_percent=_objective(body, where),
    )


def _objective(body: Mapping[str, Any], where: str) -> float | None:
    """The share of requests (percent) the route answers within its timeout, or None."""
    if "objective_percent" not in body:
        return None
    value = body["objective_percent"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 100:
        raise RouteConfigError(
            f"{where}: objective_percent must be a number above 0 and below 100 "
            f"(such as 99.99), got {value!r}"
        )
    return float(value)


def _min_budget(body: Mapping[str, Any], where: str, timeout_ms: int) -> int | None:
    if "min_budget_ms" not in body:
        return None
    return _int(body, "min_budget_ms", where, 1, timeout_ms)


def _unique(
    routes: tuple[Route, ...],
    pools: tuple[Pool, ...],
    shared: Pool,
    listener: Listener,
    admin: Address,
    meta: MetaRoutes,
) -> None:
    seen_endpoints: set[str] = set()
    seen_paths: dict[tuple[str, str], str] = {}
    meta_paths: dict[str, str] = {}
    for endpoint, path in meta.endpoints().items():
        if path in meta_paths:
            raise RouteConfigError(f"[meta]: {path} is given twice ({meta_paths[path]})")
        meta_paths[path] = endpoint
    for route in routes:
        if route.endpoint in seen_endpoints:
            raise RouteConfigError(f"route {route.endpoint!r} is declared twice")
        seen_endpoints.add(route.endpoint)
        owner = meta_paths.get(route.path)
        if owner is not None and owner != route.endpoint:
            raise RouteConfigError(
                f"route {route.endpoint!r}: {route.path} is served by every pool as {owner!r}"
            )
        for method in route.methods:
            other = seen_paths.get((method, route.path))
            if other is not None:
                raise RouteConfigError(
                    f"route {route.endpoint!r}: {method} {route.path} is already "
                    f"served by route {other!r}"
                )
            seen_paths[(method, route.path)] = route.endpoint
    ports: dict[int, str] = {}
    for what, port in [
        ("[listener]", listener.address.port),
        ("[admin]", admin.port),
        *((f"[pools.{p.name}]", port) for p in pools for port in {b.port for b in p.binds}),
        ("[shared]", shared.bind.port),
    ]:
        if port in ports:
            raise RouteConfigError(f"{what}: port {port} is already used by {ports[port]}")
        ports[port] = what
    for pool in pools:
        if not any(r.pool == pool.name for r in routes):
            raise RouteConfigError(f"[pools.{pool.name}] serves no route")


def _only(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise RouteConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )


def _table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if not isinstance(value, Mapping):
        raise RouteConfigError(f"[{key}] table is missing")
    return value


def _str(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise RouteConfigError(f"{where}: {key} must be a non-empty string")
    return value


def _int(
    table: Mapping[str, Any],
    key: str,
    where: str,
    low: int,
    high: int,
    *,
    default: int | None = None,
) -> int:
    if key not in table and default is not None:
        return default
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RouteConfigError(f"{where}: {key} must be an integer")
    if not low <= value <= high:
        raise RouteConfigError(f"{where}: {key} must be between {low} and {high}, got {value}")
    return value


def _address(text: str, where: str) -> Address:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise RouteConfigError(f"{where} must be host:port, got {text!r}")
    return Address(host.strip("[]"), int(port))


def _require_loopback(host: str, where: str) -> None:
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise RouteConfigError(f"{where} must be a loopback address, got {host!r}")
