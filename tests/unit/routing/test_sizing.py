"""Replicas per pool from a target traffic and the measured worker capacities."""

from __future__ import annotations

import pytest

from routing.load import load_routes
from routing.sizing import MIN_REPLICAS, TARGET_UTILISATION, Traffic, pool_rates, size


def test_rates_go_to_the_pools_that_serve_them() -> None:
    config = load_routes()
    assert pool_rates(config, Traffic(1000, 100)) == {"io": 1000, "cpu": 100}


@pytest.mark.parametrize("offers", [1_000, 10_000, 100_000])
def test_replicas_carry_the_traffic_at_the_target_utilisation(offers: int) -> None:
    config = load_routes()
    traffic = Traffic(offers, offers * 0.1)
    replicas = size(config, traffic)
    for pool in config.pools:
        assert pool.worker_rps is not None
        capacity = replicas[pool.name] * pool.workers * pool.worker_rps * TARGET_UTILISATION
        rate = pool_rates(config, traffic)[pool.name]
        assert capacity >= rate
        # ... and not one replica more than that needs (beyond the floor).
        fewer = (replicas[pool.name] - 1) * pool.workers * pool.worker_rps * TARGET_UTILISATION
        assert fewer < rate or replicas[pool.name] == MIN_REPLICAS


def test_without_a_target_the_config_hosts_count_at_least_the_floor() -> None:
    assert set(size(load_routes(), None).values()) == {MIN_REPLICAS}
