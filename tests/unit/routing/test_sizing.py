"""Replicas per pool from a target traffic and the measured worker capacities."""

from __future__ import annotations

from dataclasses import replace

import pytest

from routing.load import load_routes
from routing.model import Address
from routing.sizing import (
    MIN_REPLICAS,
    TARGET_UTILISATION,
    Traffic,
    envoy_limits,
    in_flight_per_replica,
    pool_rates,
    retries_at_once,
    size,
)


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


def test_envoy_admits_littles_law_per_replica_bounded_by_the_greenlets() -> None:
    io = load_routes().pool("io")
    assert io.worker_rps is not None and io.latency_ms is not None
    per_replica = in_flight_per_replica(io)
    assert per_replica == -(-io.workers * io.worker_rps * io.latency_ms // 1000)
    assert per_replica < io.replica_capacity
    # Never more than the greenlets, never fewer than one request per worker.
    assert in_flight_per_replica(replace(io, latency_ms=10**6)) == io.replica_capacity
    assert in_flight_per_replica(replace(io, latency_ms=1, worker_rps=1)) == io.workers
    # Unmeasured: every greenlet, as before there was a measurement.
    assert in_flight_per_replica(replace(io, latency_ms=None)) == io.replica_capacity


@pytest.mark.parametrize("hosts", [1, 3, 40])
def test_envoy_limits_grow_with_the_hosts(hosts: int) -> None:
    io = load_routes().pool("io")
    limits = envoy_limits(io, hosts)
    assert limits.in_flight == hosts * in_flight_per_replica(io)
    assert limits.pending == hosts * io.max_pending
    binds = tuple(Address(f"127.0.0.{i + 2}", 8102) for i in range(hosts))
    assert envoy_limits(replace(io, binds=binds)) == limits


def test_envoy_limits_need_a_host() -> None:
    with pytest.raises(ValueError, match="at least one host"):
        envoy_limits(load_routes().pool("io"), 0)


def test_retries_at_once_cover_what_one_crashed_worker_held() -> None:
    io = load_routes().pool("io")
    # Each worker's share of the replica's admission: a crash resets all of it at once.
    assert retries_at_once(io) * io.workers >= in_flight_per_replica(io)
    assert (retries_at_once(io) - 1) * io.workers < in_flight_per_replica(io)
    # The same whatever the hosts: one worker crashes, not a share of every replica.
    assert envoy_limits(io, 1).retries == envoy_limits(io, 40).retries == retries_at_once(io)
