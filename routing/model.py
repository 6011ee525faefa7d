"""The route config as frozen data: pools, routes, listener, layouts."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

SHARED_POOL = "shared"

# Envoy `retry_on` conditions that are safe for idempotent requests: the
# request never reached the app, or the connection died under it.
SAFE_RETRY_CONDITIONS = frozenset({"connect-failure", "reset", "refused-stream"})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Layout(StrEnum):
    """How endpoints are spread over processes."""

    SPLIT = "split"  # each route in the pool the config names
    SHARED = "shared"  # one pool serves every route (the "before")


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Pool:
    """One gunicorn + gevent process group."""

    name: str
    bind: Address
    workers: int
    worker_connections: int
    keepalive_s: int
    max_pending: int
    nice: int = 0

    @property
    def capacity(self) -> int:
        """Requests the pool serves at once: worker processes x greenlets each."""
        return self.workers * self.worker_connections


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int
    on: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    endpoint: str
    path: str
    methods: tuple[str, ...]
    pool: str
    timeout_ms: int
    retry: RetryPolicy | None = None

    @property
    def answered_methods(self) -> tuple[str, ...]:
        """The methods its pool answers on this path, sorted as in an `Allow` header: the
        declared ones, HEAD with GET, and OPTIONS (the app answers those two itself)."""
        methods = {*self.methods, "OPTIONS"}
        if "GET" in methods:
            methods.add("HEAD")
        return tuple(sorted(methods))


@dataclass(frozen=True)
class Listener:
    address: Address
    max_request_bytes: int
    max_request_headers_kb: int
    max_downstream_connections: int


@dataclass(frozen=True)
class RouteConfig:
    listener: Listener
    admin: Address
    upstream_base_url: str
    pools: tuple[Pool, ...]
    shared: Pool
    routes: tuple[Route, ...]
    source: str = field(default="routes.toml", compare=False)

    def pools_for(self, layout: Layout) -> tuple[Pool, ...]:
        """The pools that run in `layout`."""
        if layout is Layout.SHARED:
            return (self.shared,)
        return self.pools

    def pool(self, name: str, layout: Layout = Layout.SPLIT) -> Pool:
        for pool in self.pools_for(layout):
            if pool.name == name:
                return pool
        known = ", ".join(p.name for p in self.pools_for(layout))
        raise KeyError(f"no pool {name!r} in the {layout} layout (pools: {known})")

    def pool_of(self, route: Route, layout: Layout) -> str:
        """The pool that serves `route` in `layout`."""
        return SHARED_POOL if layout is Layout.SHARED else route.pool

    def routes_of(self, pool_name: str, layout: Layout) -> tuple[Route, ...]:
        return tuple(r for r in self.routes if self.pool_of(r, layout) == pool_name)

    def route_for_endpoint(self, endpoint: str) -> Route | None:
        return next((r for r in self.routes if r.endpoint == endpoint), None)

    def with_ports(
        self,
        *,
        listener_port: int | None = None,
        admin_port: int | None = None,
        pool_ports: dict[str, int] | None = None,
        upstream_base_url: str | None = None,
    ) -> RouteConfig:
        """A copy with other ports (tests and `pricingctl up --port`)."""
        from dataclasses import replace

        pool_ports = pool_ports or {}

        def moved(pool: Pool) -> Pool:
            port = pool_ports.get(pool.name)
            return pool if port is None else replace(pool, bind=Address(pool.bind.host, port))

        listener = self.listener
        if listener_port is not None:
            listener = replace(listener, address=Address(listener.address.host, listener_port))
        admin = self.admin if admin_port is None else Address(self.admin.host, admin_port)
        return replace(
            self,
            listener=listener,
            admin=admin,
            pools=tuple(moved(p) for p in self.pools),
            shared=moved(self.shared),
            upstream_base_url=upstream_base_url or self.upstream_base_url,
        )
