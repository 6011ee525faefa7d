"""The route config as frozen data: pools, routes, listener, layouts."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from toolkit.contract import DURATION_BUCKETS_S

SHARED_POOL = "shared"

# Envoy `retry_on` conditions that are safe for idempotent requests: the
# request never reached the app, or the connection died under it.
SAFE_RETRY_CONDITIONS = frozenset({"connect-failure", "reset", "refused-stream"})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A route's default minimum budget, as a fraction of its timeout: a request that has
# already spent 80 % of its time in queues is unlikely to make the rest.
MIN_BUDGET_FRACTION = 0.2


class Layout(StrEnum):
    """How endpoints are spread over processes."""

    SPLIT = "split"  # each route in the pool the config names
    SHARED = "shared"  # one pool serves every route (the "before")


def layout_of(pool_name: str) -> Layout:
    """The layout a pool of this name runs in: the shared pool's, or split."""
    return Layout.SHARED if pool_name == SHARED_POOL else Layout.SPLIT


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Pool:
    """One gunicorn + gevent process group per replica: a gunicorn master on each of
    `binds` (one address per host), all serving the same routes."""

    name: str
    binds: tuple[Address, ...]
    workers: int
    worker_connections: int
    keepalive_s: int
    max_pending: int
    nice: int = 0
    # Requests per second one worker process serves within its routes' deadlines,
    # measured (BENCHMARKS.md); None: not measured. Sizes replicas for a target rate.
    worker_rps: int | None = None
    # The time a request may spend in the pool when it serves worker_rps (Little's law's
    # W): with worker_rps it bounds what Envoy lets in at once (routing.sizing).
    latency_ms: int | None = None

    @property
    def bind(self) -> Address:
        """The first replica's address (the only one, for a pool on one host)."""
        return self.binds[0]

    @property
    def replicas(self) -> int:
        return len(self.binds)

    @property
    def replica_capacity(self) -> int:
        """Requests one replica serves at once: worker processes x greenlets each."""
        return self.workers * self.worker_connections

    @property
    def capacity(self) -> int:
        """Requests the whole pool serves at once, over every replica."""
        return self.replicas * self.replica_capacity


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int
    on: tuple[str, ...]


def route_label(method: str, path: str) -> str:
    """A request's route as every label, span and report names it: the method and the
    path's template, ``"GET /v1/offers/bike"`` (never the raw URL: low cardinality)."""
    return f"{method} {path}"


@dataclass(frozen=True)
class Route:
    endpoint: str
    path: str
    methods: tuple[str, ...]
    pool: str
    timeout_ms: int
    retry: RetryPolicy | None = None
    # A request slower than this is traced whatever the sampling (None: the route's
    # timeout x [tracing].slow_fraction).
    slow_ms: int | None = None
    # Less budget than this left when the handler starts (the request waited in queues
    # since Envoy received it): answered 503 at once, no upstream called. None: the
    # route's timeout x MIN_BUDGET_FRACTION.
    min_budget_ms: int | None = None
    # The share of its requests (percent) the route answers, without a 5xx, within
    # timeout_ms over routing.alerts.SLO_PERIOD: its objective, which the alert rules
    # (routing.alerts) page and ticket on. None: no objective, no SLO alert.
    objective_percent: float | None = None

    @property
    def min_budget(self) -> int:
        """Milliseconds of budget the route needs to be worth starting."""
        if self.min_budget_ms is not None:
            return self.min_budget_ms
        return max(1, round(self.timeout_ms * MIN_BUDGET_FRACTION))

    @property
    def answered_methods(self) -> tuple[str, ...]:
        """The methods its pool answers on this path, sorted as in an `Allow` header: the
        declared ones, HEAD with GET, and OPTIONS (the app answers those two itself)."""
        methods = {*self.methods, "OPTIONS"}
        if "GET" in methods:
            methods.add("HEAD")
        return tuple(sorted(methods))

    def labels(self, methods: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """Its `route_label` for each of `methods` (default: the declared methods)."""
        return tuple(route_label(m, self.path) for m in methods or self.methods)


@dataclass(frozen=True)
class MetaRoutes:
    """Paths every pool serves on its own address, whatever its routes (GET only).

    Envoy health-checks each pool on ``readyz``; the stack waits for it too. Envoy
    routes a meta path only when [[routes]] also lists its endpoint (``meta.<name>``).
    """

    healthz: str  # alive: the process answers
    readyz: str  # ready: app built, upstream clients built, tracing set up
    openapi: str  # the API description
    metrics: str  # Prometheus text, whatever the tracing mode

    def endpoints(self) -> dict[str, str]:
        """Endpoint name (``meta.readyz``) -> path."""
        return {f"{META_PREFIX}{name}": getattr(self, name) for name in META_NAMES}


#: Endpoint names of meta routes start with this; the rest is a key of [meta].
META_PREFIX = "meta."
META_NAMES = ("healthz", "readyz", "openapi", "metrics")


@dataclass(frozen=True)
class TracingPolicy:
    """Which requests get spans. Envoy samples ``sample_percent`` of requests at the edge
    and the pools follow its decision (a trace is whole or absent); a request slower
    than its route's threshold is exported by its pool whatever the decision."""

    sample_percent: float = 1.0
    # A route's slow threshold, as a fraction of its timeout, unless it sets slow_ms.
    slow_fraction: float = 0.5
    # Where Envoy sends its spans (OTLP gRPC) when the stack does not say otherwise.
    collector: Address = field(default_factory=lambda: Address("127.0.0.1", 4317))
    # Whether Envoy honours a client's trace context (traceparent, x-client-trace-id,
    # x-envoy-force-trace): off at a public edge, so no client chooses, joins or forces
    # a trace; on behind another proxy that is itself the edge, or for a load generator.
    trust_incoming: bool = False

    def slow_ms(self, route: Route) -> int:
        if route.slow_ms is not None:
            return route.slow_ms
        return max(1, round(route.timeout_ms * self.slow_fraction))


@dataclass(frozen=True)
class Listener:
    address: Address
    max_request_bytes: int
    max_request_headers_kb: int
    max_downstream_connections: int
    # A downstream connection with no request in flight is closed after this long
    # (Envoy's own default is an hour).
    idle_timeout_s: int = 60


@dataclass(frozen=True)
class RouteConfig:
    listener: Listener
    admin: Address
    upstream_base_url: str
    pools: tuple[Pool, ...]
    shared: Pool
    routes: tuple[Route, ...]
    meta: MetaRoutes
    tracing: TracingPolicy = field(default_factory=TracingPolicy)
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

    def app_routes(self) -> tuple[Route, ...]:
        """The routes placed in one pool (meta routes are in every pool)."""
        return tuple(r for r in self.routes if not r.endpoint.startswith(META_PREFIX))

    def request_duration_bounds_s(self) -> tuple[float, ...]:
        """The request-duration histogram's upper bounds (seconds, +Inf aside): the fixed
        DURATION_BUCKETS_S and every route's timeout, so the requests a route answered
        within its timeout are one bucket, which the alert rules read (``routing.alerts``).
        Every route's, not only a pool's: every pool then has the same bounds (the
        rules sum a route's buckets over pools), and a `routes apply` that moves an
        endpoint changes none, so a pool's workers, old and new, write the same ones."""
        timeouts_s = (route.timeout_ms / 1000 for route in self.routes)
        return tuple(sorted({*DURATION_BUCKETS_S, *timeouts_s}))

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
            if port is None:
                return pool
            return replace(pool, binds=tuple(Address(b.host, port) for b in pool.binds))

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
