"""A pool on several hosts: routes.toml lists its replicas, Envoy balances over them,
checks and ejects each on its own, and sizes its breakers to the whole pool."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from routing.envoy import envoy_config, render_static_envoy
from routing.errors import RouteConfigError
from routing.gunicorn import gunicorn_settings
from routing.load import DEFAULT_ROUTES_PATH, parse_routes
from routing.model import Layout, RouteConfig
from routing.sizing import envoy_limits
from routing.write import write_routes

SHIPPED = DEFAULT_ROUTES_PATH.read_text()
IO_BIND = 'bind = "127.0.0.1:8102"'
THREE_IO = 'bind = ["127.0.0.2:8102", "127.0.0.3:8102", "127.0.0.4:8102"]'


def with_io_bind(bind_line: str) -> RouteConfig:
    assert IO_BIND in SHIPPED
    return parse_routes(SHIPPED.replace(IO_BIND, bind_line, 1))


def clusters(config: RouteConfig) -> dict[str, dict[str, Any]]:
    doc = envoy_config(config)
    return {c["name"]: c for c in doc["static_resources"]["clusters"]}


def routes_by_name(config: RouteConfig) -> dict[str, dict[str, Any]]:
    doc = envoy_config(config)
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    vhost = hcm["typed_config"]["route_config"]["virtual_hosts"][0]
    return {r["name"]: r for r in vhost["routes"]}


def test_a_pool_lists_its_replicas_and_its_capacity_is_the_sum() -> None:
    config = with_io_bind(THREE_IO)
    io = config.pool("io")
    assert io.replicas == 3
    assert [b.host for b in io.binds] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert io.capacity == 3 * io.workers * io.worker_connections
    # Each replica's gunicorn backlog is sized to the replica, not the pool.
    assert gunicorn_settings(config, "io")["backlog"] == max(64, io.replica_capacity)
    # The shared layout keeps the same total number of processes.
    assert config.shared.workers == config.pool("cpu").workers + 3 * io.workers


def test_envoy_lists_every_replica_with_least_request_and_pool_sized_breakers() -> None:
    config = with_io_bind(THREE_IO)
    io = clusters(config)["io_pool"]
    hosts = [
        e["endpoint"]["address"]["socket_address"]
        for e in io["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ]
    assert hosts == [{"address": f"127.0.0.{i}", "port_value": 8102} for i in (2, 3, 4)]
    assert io["lb_policy"] == "LEAST_REQUEST"
    assert io["type"] == "STATIC"
    breaker = io["circuit_breakers"]["thresholds"][0]
    # Three replicas: three times one replica's share, and three times the queue.
    one = envoy_limits(replace(config.pool("io"), binds=config.pool("io").binds[:1]))
    assert breaker["max_requests"] == breaker["max_connections"] == 3 * one.in_flight
    assert breaker["max_pending_requests"] == 3 * one.pending
    # Several replicas: a failing one is ejected; never more than half of them.
    outlier = io["outlier_detection"]
    assert outlier["enforcing_consecutive_local_origin_failure"] == 100
    assert outlier["max_ejection_percent"] == 50
    # One host (cpu): counted, never ejected (it is the whole pool).
    cpu = clusters(config)["cpu_pool"]["outlier_detection"]
    assert cpu["enforcing_consecutive_local_origin_failure"] == 0


def test_idempotent_routes_to_replicas_hedge_on_another_host() -> None:
    config = with_io_bind(THREE_IO)
    bike = routes_by_name(config)["offers.bike"]["route"]
    assert bike["hedge_policy"] == {"hedge_on_per_try_timeout": True}
    retry = bike["retry_policy"]
    assert retry["per_try_timeout"] == "0.25s"  # half the 500 ms timeout
    assert retry["retry_host_predicate"][0]["name"].endswith("previous_hosts")
    # POST routes are never retried, replicas or not; single-host pools do not hedge.
    assert "retry_policy" not in routes_by_name(with_io_bind(THREE_IO))["quotes.batch"]["route"]
    single = routes_by_name(parse_routes(SHIPPED))["offers.bike"]["route"]
    assert "hedge_policy" not in single and "per_try_timeout" not in single["retry_policy"]


def test_hosts_named_by_dns_make_a_strict_dns_cluster() -> None:
    from dataclasses import replace

    from routing.model import Address

    config = parse_routes(SHIPPED)
    io = replace(config.pool("io"), binds=(Address("pool-io", 8102),))
    named = replace(config, pools=(config.pool("cpu"), io))
    assert clusters(named)["io_pool"]["type"] == "STRICT_DNS"


@pytest.mark.parametrize(
    ("bind", "message"),
    [
        ('bind = ["127.0.0.2:8102", "127.0.0.2:8102"]', "each replica needs its own host"),
        ('bind = ["127.0.0.2:8102", "10.0.0.3:8102"]', "must be a loopback address"),
        ("bind = []", "bind must be a non-empty string or a non-empty list"),
    ],
)
def test_bad_replica_lists_are_named(bind: str, message: str) -> None:
    with pytest.raises(RouteConfigError, match=r"\[pools\.io\]"):
        with_io_bind(bind)
    with pytest.raises(RouteConfigError, match=message):
        with_io_bind(bind)


def test_a_replicated_config_writes_and_reads_back(tmp_path: Path) -> None:
    config = with_io_bind(THREE_IO)
    written = write_routes(config, tmp_path / "routes.toml")
    assert written.pool("io").binds == config.pool("io").binds


def test_envoy_validates_a_replicated_config(tmp_path: Path) -> None:
    from stack.envoy import validate

    assert validate(render_static_envoy(with_io_bind(THREE_IO), Layout.SPLIT)) is None
