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
