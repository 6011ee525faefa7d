"""How many replicas of each pool a target traffic needs, from the capacities measured
per worker (`worker_rps` of each pool in routes.toml)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from routing.model import Pool, RouteConfig

# A pool is sized to run at this share of its measured capacity: room for one lost
# replica's load, bursts, and the autoscaler's reaction time.
TARGET_UTILISATION = 0.6
# Never fewer: one replica lost (a node drained, a crash) must not take the pool down.
MIN_REPLICAS = 2
# Endpoints whose rate a target names: offers go to the pool that serves bike offers,
# quotes to the pool that serves rideshare quotes.
OFFERS_ENDPOINT = "offers.bike"
QUOTES_ENDPOINT = "offers.rideshare"


@dataclass(frozen=True)
class Traffic:
    offers_per_s: float
    quotes_per_s: float


def pool_rates(config: RouteConfig, traffic: Traffic) -> dict[str, float]:
    """Requests per second each pool receives under `traffic`."""
    rates = {p.name: 0.0 for p in config.pools}
    for endpoint, rate in (
        (OFFERS_ENDPOINT, traffic.offers_per_s),
        (QUOTES_ENDPOINT, traffic.quotes_per_s),
    ):
        route = config.route_for_endpoint(endpoint)
        if route is None:
            raise ValueError(f"the route config has no endpoint {endpoint!r}")
        rates[route.pool] += rate
    return rates


def replicas_for(pool: Pool, rate_per_s: float) -> int:
    """Replicas (each `pool.workers` processes) that serve `rate_per_s` at
    TARGET_UTILISATION of the measured capacity; at least MIN_REPLICAS."""
    if pool.worker_rps is None:
        raise ValueError(f"[pools.{pool.name}] has no measured worker_rps to size it from")
    per_replica = pool.worker_rps * pool.workers * TARGET_UTILISATION
    return max(MIN_REPLICAS, math.ceil(rate_per_s / per_replica))


def size(config: RouteConfig, traffic: Traffic | None) -> dict[str, int]:
    """Pool name -> replicas: sized for `traffic`, or (None) the hosts routes.toml
    lists, at least MIN_REPLICAS."""
    if traffic is None:
        return {p.name: max(MIN_REPLICAS, p.replicas) for p in config.pools}
    rates = pool_rates(config, traffic)
    return {p.name: replicas_for(p, rates[p.name]) for p in config.pools}


@dataclass(frozen=True)
class EnvoyLimits:
    """What Envoy lets through to one pool at once; the rest it answers 503 at once."""

    # Requests in flight to the pool (and connections: HTTP/1.1 carries one at a time).
    in_flight: int
    # Requests waiting in Envoy for one of those to finish.
    pending: int
    # Requests in flight to each host (replica), where the hosts change under Envoy
    # (Kubernetes: the HPA adds and removes pods); None: no cap per host.
    per_host_in_flight: int | None = None
    # Retries Envoy lets run at once whatever the retry budget's percentage (its
    # min_retry_concurrency): what one crashed worker process held (`retries_at_once`).
    # 0: Envoy's renderer's floor.
    retries: int = 0


def in_flight_per_replica(pool: Pool) -> int:
    """Requests one replica is let have at once. Little's law: a replica serving
    `workers x worker_rps` requests a second, each taking `latency_ms`, holds
    `workers x worker_rps x latency_ms` of them; more in flight only wait longer (in
    the workers' sockets, where nobody sheds them). Without both measurements: every
    greenlet (`workers x worker_connections`). Never more than that, never fewer than
    one request per worker."""
    ceiling = pool.replica_capacity
    if pool.worker_rps is None or pool.latency_ms is None:
        return ceiling
    littles = math.ceil(pool.workers * pool.worker_rps * pool.latency_ms / 1000)
    return max(pool.workers, min(ceiling, littles))


def retries_at_once(pool: Pool) -> int:
    """Retries to let run at once: every request one worker process may hold, its share
    of a replica's admission limit. A worker that crashes resets all of them together,
    and each is an idempotent request that must be retried, not answered 503. More is
    never needed: a retry is a request Envoy admits like any other (it counts against
    the pool's in-flight limit and waits in the same queue), so retries replace the
    work a crash lost and cannot push a pool past what it serves in time."""
    return math.ceil(in_flight_per_replica(pool) / pool.workers)


def envoy_limits(pool: Pool, hosts: int | None = None) -> EnvoyLimits:
    """Envoy's limits for `pool` over `hosts` replicas (default: the hosts routes.toml
    lists). Both grow with the replicas: each adds its own share of work in flight and
    drains the queue as fast, so the queue's wait stays the same."""
    hosts = pool.replicas if hosts is None else hosts
    if hosts < 1:
        raise ValueError(f"[pools.{pool.name}]: at least one host, not {hosts}")
    return EnvoyLimits(
        hosts * in_flight_per_replica(pool),
        hosts * pool.max_pending,
        retries=retries_at_once(pool),
    )
