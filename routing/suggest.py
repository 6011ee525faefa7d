"""Where each endpoint should run, and how big each pool should be, from what was
measured: the pure half of ``pricingctl routes suggest``.

Takes the route config and, per route template (``"POST /v1/offers/rideshare"``), the
measurements of a window (anything shaped like :class:`Measured`: ``tracing.readback.usage``
reads them from the pools' /metrics or from spans). Returns a :class:`Suggestion`:
per route the evidence, its class and its pool; per pool its size; and the proposed
config. No I/O here: the command prints and writes.

The rules, each with its threshold in :class:`Thresholds`:

- **Class.** A route whose requests run on the hub for at least ``cpu_heavy_ms`` of
  CPU each is *CPU-heavy*: every greenlet sharing its process waits that long for each
  of them. Any other route is *I/O-heavy* (it spends its time waiting, mostly on the
  network) or light; both share a hub harmlessly.
- **Pool kind.** A pool with at most ``cpu_pool_max_connections`` greenlets per worker
  is a CPU pool (a request there holds nobody up but the few others in its process);
  any other pool is an I/O pool.
- **Placement.** A route stays where it is when its pool's kind fits its class.
  Otherwise it goes to the pool of the right kind that already serves most routes, or
  to a new pool when there is none. A route measured on fewer than ``min_requests``
  requests stays where it is (not enough evidence); meta routes are in every pool.
- **Size** (Little's law: busy slots = arrival rate x time each request holds one).
  CPU pool: a request holds a worker for its CPU + network time, so workers =
  ceil(sum(rate x (cpu + network)) / (worker_connections x target)). I/O pool: CPU
  bounds a process at one core, so workers = ceil(sum(rate x cpu) / target); a request
  may hold a greenlet until its route timeout, so worker_connections =
  ceil(sum(rate x timeout) / (workers x target)). Existing pools only grow (spare
  capacity costs memory, missing capacity costs requests), and keep two workers at
  least. Envoy's circuit breakers follow (``routing.sizing``): max_connections =
  max_requests = Little's law on the measured capacity, at most workers x
  worker_connections, max_pending as configured. Workers and
  worker_connections are per replica: a pool on several hosts (``binds``) shares the
  load evenly over them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from routing.model import Address, Pool, Route, RouteConfig
from routing.sizing import in_flight_per_replica
from routing.write import render_routes_toml

#: The header ``--write`` puts on the routes.toml it writes.
WRITTEN_HEADER = (
    "# Route config written by `pricingctl routes suggest --write` from measurements\n"
    "# (the comments of the file it replaced are in version control)."
)


class Measured(Protocol):
    """One route's measurements over a window (``tracing.readback.usage.RouteUsage`` is one)."""

    @property
    def route(self) -> str: ...  # "POST /v1/offers/rideshare"
    @property
    def requests(self) -> float: ...
    @property
    def window_s(self) -> float: ...
    @property
    def cpu_s(self) -> float: ...  # summed over the requests
    @property
    def wall_s(self) -> float: ...
    @property
    def network_s(self) -> float: ...
    @property
    def hub_wait_s(self) -> float: ...
    @property
    def caused_s(self) -> float: ...  # delay caused to other routes
    @property
    def hub_wait_p99_s(self) -> float | None: ...


CPU, IO = "cpu", "io"


@dataclass(frozen=True)
class Thresholds:
    #: CPU per request (ms) at or above which a route is CPU-heavy.
    cpu_heavy_ms: float = 5.0
    #: A pool with at most this many greenlets per worker is a CPU pool.
    cpu_pool_max_connections: int = 4
    #: Share of a pool's capacity (workers, greenlets) the sizing aims to keep busy.
    target_utilisation: float = 0.6
    #: Fewer requests measured than this: the route stays where it is.
    min_requests: int = 10
    #: A pool never has fewer worker processes (a crashed one must not empty it).
    min_workers: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.target_utilisation <= 1:
            raise ValueError(f"target utilisation must be in (0, 1], got {self.target_utilisation}")
        if self.cpu_heavy_ms <= 0:
            raise ValueError(f"the CPU-heavy threshold must be > 0 ms, got {self.cpu_heavy_ms}")


@dataclass(frozen=True)
class RouteEvidence:
    endpoint: str
    pool: str  # where it is
    proposed_pool: str
    kind: str | None  # CPU, IO, or None: not enough measured
    requests: float
    rate_rps: float  # what the sizing used (measured, or --rates)
    cpu_ms: float | None  # per request
    network_share: float | None  # of its time in the pool
    hub_wait_p99_ms: float | None
    caused_per_s: float  # seconds of others' delay it caused, per second
    reason: str

    @property
    def moves(self) -> bool:
        return self.pool != self.proposed_pool


@dataclass(frozen=True)
class PoolSizing:
    pool: str
    kind: str
    new: bool
    rate_rps: float
    cpu_cores: float  # sum(rate x cpu)
    busy_slots: float  # Little's law: sum(rate x time a request holds a slot)
    workers_needed: int
    connections_needed: int
    workers: int  # proposed
    worker_connections: int  # proposed
    max_pending: int
    # Envoy's max_connections and max_requests per replica for the proposed pool
    # (routing.sizing: Little's law where the pool's capacity is measured).
    max_connections: int


@dataclass(frozen=True)
class Suggestion:
    config: RouteConfig
    proposed: RouteConfig
    routes: tuple[RouteEvidence, ...]
    pools: tuple[PoolSizing, ...]
    thresholds: Thresholds

    @property
    def changed(self) -> bool:
        return self.proposed != self.config

    @property
    def moves(self) -> tuple[RouteEvidence, ...]:
        return tuple(r for r in self.routes if r.moves)


def templates(route: Route) -> tuple[str, ...]:
    """The greenlet labels a route's requests carry (``"GET /v1/offers/bike"``)."""
    return route.labels(route.answered_methods)


def pool_kind(pool: Pool, thresholds: Thresholds) -> str:
    return CPU if pool.worker_connections <= thresholds.cpu_pool_max_connections else IO


@dataclass(frozen=True)
class _Sums:
    requests: float = 0.0
    window_s: float = 0.0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    network_s: float = 0.0
    caused_s: float = 0.0
    hub_wait_p99_s: float | None = None


def _sums(route: Route, by_template: Mapping[str, Measured]) -> _Sums:
    out = _Sums()
    for template in templates(route):
        m = by_template.get(template)
        if m is None:
            continue
        p99s = [x for x in (out.hub_wait_p99_s, m.hub_wait_p99_s) if x is not None]
        out = _Sums(
            requests=out.requests + m.requests,
            window_s=max(out.window_s, m.window_s),
            cpu_s=out.cpu_s + m.cpu_s,
            wall_s=out.wall_s + m.wall_s,
            network_s=out.network_s + m.network_s,
            caused_s=out.caused_s + m.caused_s,
            hub_wait_p99_s=max(p99s) if p99s else None,
        )
    return out


def _pick_pool(
    kind: str, config: RouteConfig, placement: Mapping[str, str], thresholds: Thresholds
) -> str | None:
    fitting = [p.name for p in config.pools if pool_kind(p, thresholds) == kind]
    if not fitting:
        return None
    serving = {name: sum(1 for pool in placement.values() if pool == name) for name in fitting}
    return max(sorted(fitting), key=lambda name: serving[name])


def _new_pool(kind: str, config: RouteConfig) -> Pool:
    names = {p.name for p in config.pools}
    name = kind if kind not in names else f"{kind}2"
    host = config.pools[0].bind.host if config.pools else "127.0.0.1"
    port = max(b.port for p in (*config.pools, config.shared) for b in p.binds) + 1
    if kind == CPU:
        # As the committed cpu pool: one request per process, closed after each (health
        # checks never stuck behind an idle connection), below the io pool's priority.
        return Pool(name, (Address(host, port),), 2, 1, keepalive_s=0, max_pending=64, nice=5)
    return Pool(name, (Address(host, port),), 2, 1000, keepalive_s=30, max_pending=256)


def _ceil(value: float) -> int:
    # 2.0000001 from float sums is 2, not 3.
    return max(math.ceil(value - 1e-9), 0)


def _size(
    pool: Pool,
    kind: str,
    new: bool,
    routes: Iterable[tuple[Route, _Sums, float]],
    thresholds: Thresholds,
) -> PoolSizing:
    target = thresholds.target_utilisation
    rate = cores = busy = held_to_timeout = 0.0
    for route, sums, rps in routes:
        per_cpu = sums.cpu_s / sums.requests if sums.requests else 0.0
        per_net = sums.network_s / sums.requests if sums.requests else 0.0
        rate += rps
        cores += rps * per_cpu
        busy += rps * (per_cpu + per_net)
        held_to_timeout += rps * route.timeout_ms / 1000
    current_workers = 0 if new else pool.workers
    # Each replica (one gunicorn master per bind) takes an even share.
    replicas = 1 if new else pool.replicas
    cores, busy, held_to_timeout = cores / replicas, busy / replicas, held_to_timeout / replicas
    if kind == CPU:
        # Its greenlets per worker are a choice (one request at a time), not a size.
        connections_needed = worker_connections = pool.worker_connections
        workers_needed = _ceil(max(busy / (worker_connections * target), cores / target))
    else:
        workers_needed = _ceil(cores / target)
        spread = max(workers_needed, current_workers, thresholds.min_workers)
        connections_needed = max(_ceil(held_to_timeout / (spread * target)), 1)
        worker_connections = (
            connections_needed if new else max(pool.worker_connections, connections_needed)
        )
    workers = max(workers_needed, thresholds.min_workers, current_workers)
    return PoolSizing(
        pool=pool.name,
        kind=kind,
        new=new,
        rate_rps=rate,
        cpu_cores=cores,
        busy_slots=busy if kind == CPU else held_to_timeout,
        workers_needed=workers_needed,
        connections_needed=connections_needed,
        workers=workers,
        worker_connections=worker_connections,
        max_pending=pool.max_pending,
        max_connections=in_flight_per_replica(
            replace(pool, workers=workers, worker_connections=worker_connections)
        ),
    )


def suggest(
    config: RouteConfig,
    measured: Iterable[Measured],
    thresholds: Thresholds | None = None,
    rates_rps: Mapping[str, float] | None = None,
) -> Suggestion:
    """Place and size from *measured*; *rates_rps* (endpoint -> requests/s) replaces
    the measured rate of a route for sizing (a forecast, a peak)."""
    thresholds = thresholds or Thresholds()
    rates_rps = dict(rates_rps or {})
    unknown = sorted(set(rates_rps) - {r.endpoint for r in config.app_routes()})
    if unknown:
        raise ValueError(f"--rates names no app route: {', '.join(unknown)}")
    placed = place(config, measured, thresholds, rates_rps)
    sizing = size(config, placed, thresholds)
    return Suggestion(config, proposed(config, placed, sizing), placed.evidence, sizing, thresholds)


@dataclass(frozen=True)
class Placement:
    """Where each app route goes (endpoint -> pool), the pools made for them, and why."""

    pool_of: Mapping[str, str]
    new_pools: tuple[Pool, ...]
    evidence: tuple[RouteEvidence, ...]
    sums_of: Mapping[str, _Sums]


def place(
    config: RouteConfig,
    measured: Iterable[Measured],
    thresholds: Thresholds,
    rates_rps: Mapping[str, float],
) -> Placement:
    """Each route with enough requests measured goes to a pool of its kind (CPU- or
    I/O-heavy): the one it is in if that fits, else one that does, else a new one."""
    by_template = {m.route: m for m in measured}
    pools_by_name = {p.name: p for p in config.pools}
    placement = {r.endpoint: r.pool for r in config.app_routes()}
    new_pools: dict[str, Pool] = {}
    evidence: list[RouteEvidence] = []
    sums_of: dict[str, _Sums] = {}
    for route in config.app_routes():
        sums = sums_of[route.endpoint] = _sums(route, by_template)
        current = pools_by_name[route.pool]
        rate = sums.requests / sums.window_s if sums.window_s else 0.0
        cpu_ms = 1000 * sums.cpu_s / sums.requests if sums.requests else None
        share = sums.network_s / sums.wall_s if sums.wall_s else None
        kind: str | None = None
        goes_to = route.pool
        if sums.requests < thresholds.min_requests:
            reason = f"{sums.requests:.0f} requests measured (< {thresholds.min_requests}): stays"
        else:
            assert cpu_ms is not None
            kind = CPU if cpu_ms >= thresholds.cpu_heavy_ms else IO
            if pool_kind(current, thresholds) == kind:
                reason = f"{kind}-heavy in a {kind} pool"
            else:
                target = _pick_pool(kind, config, placement, thresholds)
                if target is None:
                    new = new_pools.get(kind) or _new_pool(kind, config)
                    new_pools[kind] = new
                    target = new.name
                    reason = f"{kind}-heavy in a {pool_kind(current, thresholds)} pool: new pool"
                else:
                    reason = f"{kind}-heavy in a {pool_kind(current, thresholds)} pool"
                goes_to = target
                placement[route.endpoint] = target
        evidence.append(
            RouteEvidence(
                endpoint=route.endpoint,
                pool=route.pool,
                proposed_pool=goes_to,
                kind=kind,
                requests=sums.requests,
                rate_rps=rates_rps.get(route.endpoint, rate),
                cpu_ms=cpu_ms,
                network_share=share,
                hub_wait_p99_ms=None if sums.hub_wait_p99_s is None else sums.hub_wait_p99_s * 1000,
                caused_per_s=sums.caused_s / sums.window_s if sums.window_s else 0.0,
                reason=reason,
            )
        )
    return Placement(placement, tuple(new_pools.values()), tuple(evidence), sums_of)


def size(config: RouteConfig, placed: Placement, thresholds: Thresholds) -> tuple[PoolSizing, ...]:
    """Workers and connections for every pool, the new ones included, from the routes
    placed in it and their rates."""
    rate_of = {e.endpoint: e.rate_rps for e in placed.evidence}
    new_names = {p.name for p in placed.new_pools}
    sizing = []
    for pool in (*config.pools, *placed.new_pools):
        served = [
            (route, placed.sums_of[route.endpoint], rate_of[route.endpoint])
            for route in config.app_routes()
            if placed.pool_of[route.endpoint] == pool.name
        ]
        sizing.append(
            _size(pool, pool_kind(pool, thresholds), pool.name in new_names, served, thresholds)
        )
    return tuple(sizing)


def proposed(config: RouteConfig, placed: Placement, sizing: Sequence[PoolSizing]) -> RouteConfig:
    """*config* with the routes placed and the pools, new ones included, sized."""
    size_of = {s.pool: s for s in sizing}
    proposed_pools = tuple(
        replace(
            p,
            workers=size_of[p.name].workers,
            worker_connections=size_of[p.name].worker_connections,
        )
        for p in (*config.pools, *placed.new_pools)
    )
    proposed_routes = tuple(
        replace(r, pool=placed.pool_of[r.endpoint]) if r.endpoint in placed.pool_of else r
        for r in config.routes
    )
    out = replace(config, pools=proposed_pools, routes=proposed_routes)
    if proposed_pools != config.pools:
        # The shared ("before") layout has as many processes as the split pools.
        out = replace(
            out, shared=replace(config.shared, workers=sum(p.workers for p in proposed_pools))
        )
    return out


# --- what the command prints -------------------------------------------------------------


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    # A histogram's +Inf bucket: beyond its largest bound.
    return "+Inf" if math.isinf(value) else format(value, spec)


def render_evidence(s: Suggestion) -> str:
    t = s.thresholds
    head = (
        f"{'route':<18} {'pool':<5} {'class':<5} {'req/s':>6} {'CPU ms/req':>10} "
        f"{'network %':>9} {'hub wait p99 ms':>15} {'delay caused/s':>14}  proposed"
    )
    lines = [
        f"class: CPU-heavy at >= {t.cpu_heavy_ms:g} ms of CPU per request, else I/O-heavy; "
        f"pools with <= {t.cpu_pool_max_connections} greenlets per worker are CPU pools; "
        f"routes with < {t.min_requests} requests measured stay",
        head,
    ]
    for e in s.routes:
        share = None if e.network_share is None else 100 * e.network_share
        proposed = f"{e.proposed_pool} (move)" if e.moves else e.proposed_pool
        lines.append(
            f"{e.endpoint:<18} {e.pool:<5} {e.kind or '-':<5} {e.rate_rps:>6.1f} "
            f"{_fmt(e.cpu_ms, '.2f'):>10} {_fmt(share, '.0f'):>9} "
            f"{_fmt(e.hub_wait_p99_ms, '.1f'):>15} {e.caused_per_s:>14.3f}  {proposed}"
        )
    return "\n".join(lines)


def render_sizing(s: Suggestion) -> str:
    u = s.thresholds.target_utilisation
    lines = [
        f"pool sizes (Little's law, target utilisation {100 * u:.0f} %; existing pools only grow):",
        f"{'pool':<5} {'class':<5} {'req/s':>6} {'CPU cores':>9} {'busy slots':>10} "
        f"{'workers':>12} {'connections':>12} {'Envoy max_conn/req':>18} {'max_pending':>11}",
    ]
    for p in s.pools:
        name = f"{p.pool} (new)" if p.new else p.pool
        lines.append(
            f"{name:<5} {p.kind:<5} {p.rate_rps:>6.1f} {p.cpu_cores:>9.2f} {p.busy_slots:>10.1f} "
            f"{f'{p.workers} (need {p.workers_needed})':>12} "
            f"{f'{p.worker_connections} (need {p.connections_needed})':>12} "
            f"{p.max_connections:>18} {p.max_pending:>11}"
        )
    lines.append(
        "busy slots: CPU pool, requests on a worker at once (rate x (CPU + network)); "
        "I/O pool, greenlets held if each request took its route timeout"
    )
    return "\n".join(lines)


def render_diff(s: Suggestion, name: str = "routes.toml") -> str:
    """The proposed change as a unified diff of routes.toml (both sides as the writer
    writes them, so only what changed shows); empty when nothing changes."""
    before = render_routes_toml(s.config, WRITTEN_HEADER).splitlines(keepends=True)
    after = render_routes_toml(s.proposed, WRITTEN_HEADER).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, f"{name} (now)", f"{name} (suggested)", n=2))
