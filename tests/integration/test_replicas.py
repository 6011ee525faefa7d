"""A pool on several hosts (127.0.0.2, 127.0.0.3 stand in for machines), through the
real Envoy: requests spread over the replicas; a replica killed (SIGKILL) or frozen
(SIGSTOP) under offer load costs no failed GET and is taken out of the cluster; it
comes back by itself once restarted (or continued).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from routing.model import Layout, RouteConfig
from stack.launch import Stack
from tests.integration.support.http import FAST_MS, fixed_latency, http, reset_upstreams
from tests.integration.support.load import (
    OFFER_COUNT,
    OFFER_RATE,
    assert_nothing_lost,
    offer_request,
    under_load,
)
from tests.integration.support.stack import derived_config
from tests.samples import offer_query
from toolkit.wait import wait_until

pytestmark = pytest.mark.integration

REPLICA_HOSTS = ("127.0.0.2", "127.0.0.3")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The io pool as two replicas of one worker each (the same two processes as the
    shipped pool), on two loopback hosts."""
    tmp = tmp_path_factory.mktemp("replicas")
    binds = ", ".join(f'"{host}:8102"' for host in REPLICA_HOSTS)
    config: RouteConfig = derived_config(
        tmp,
        {
            'bind = "127.0.0.1:8102"': f"bind = [{binds}]",
            "workers = 2                # two, so": "workers = 1                # one, so",
        },
    )
    with Stack.on_free_ports(config, Layout.SPLIT, tmp / "run") as stack:
        fixed_latency(stack, FAST_MS)
        yield stack
        reset_upstreams(stack)


def host_stats(stack: Stack) -> dict[str, dict[str, str]]:
    """Envoy's view of each io replica: host -> {rq_total, health_flags, ...}."""
    text = stack.admin.get("/clusters")
    hosts: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.split("::")
        if len(parts) == 4 and parts[0] == "io_pool" and parts[1].startswith(REPLICA_HOSTS):
            hosts.setdefault(parts[1].rsplit(":", 1)[0], {})[parts[2]] = parts[3]
    return hosts


def healthy(stack: Stack, host: str) -> bool:
    return host_stats(stack).get(host, {}).get("health_flags") == "healthy"


def served_by(stack: Stack) -> dict[str, int]:
    return {host: int(s["rq_total"]) for host, s in host_stats(stack).items()}


def test_requests_spread_over_the_replicas(stack: Stack) -> None:
    assert sorted(host_stats(stack)) == sorted(REPLICA_HOSTS)
    before = served_by(stack)
    for i in range(60):
        reply = http("GET", f"{stack.url}/v1/offers/bike?{offer_query(f'u-{i}')}")
        assert reply.status == 200
        assert reply.headers["x-pricing-pool"] == "io"
    after = served_by(stack)
    spread = {host: after[host] - before[host] for host in REPLICA_HOSTS}
    print(f"\n60 offers over two replicas: {spread}")
    assert all(n >= 10 for n in spread.values()), spread


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_a_lost_replica_fails_no_get_is_ejected_and_comes_back(stack: Stack, how: str) -> None:
    victim_host = REPLICA_HOSTS[1]
    proc = stack.procs[Stack.replica_name("io", 1)]
    assert wait_until(lambda: healthy(stack, victim_host), 30)
    sig = signal.SIGKILL if how == "SIGKILL" else signal.SIGSTOP
    hedged_before = stack.envoy_stat("cluster.io_pool.upstream_rq_retry")

    tally = under_load(
        stack, offer_request, OFFER_RATE, OFFER_COUNT, lambda: os.killpg(proc.pid, sig)
    )
    flags = host_stats(stack)[victim_host]["health_flags"]
    print(f"\n{tally.summary(f'GET offers, one io replica {how}')}; its flags: {flags}")
    assert len(tally.outcomes) == OFFER_COUNT
    assert_nothing_lost(tally)
    # Stricter than for a crashed worker: the other replica has the whole budget.
    assert sum(o.status != 200 for o in tally.outcomes) <= 1, tally.summary("lost")
    if how == "SIGSTOP":
        # The GETs the frozen replica held were hedged to the other one.
        assert stack.envoy_stat("cluster.io_pool.upstream_rq_retry") > hedged_before
    # Taken out of the cluster: failed health checks and/or ejected as an outlier.
    assert flags != "healthy", flags

    started = time.monotonic()
    if how == "SIGKILL":
        proc.stop()  # reaps what is left of it
        stack.start_replica("io", 1)
    else:
        os.killpg(proc.pid, signal.SIGCONT)
    before = served_by(stack)[victim_host]

    def serving_again() -> bool:
        for i in range(10):
            reply = http("GET", f"{stack.url}/v1/offers/bike?{offer_query(f'u-{i}')}")
            assert reply.status == 200, reply.body
        return healthy(stack, victim_host) and served_by(stack)[victim_host] - before >= 5

    assert wait_until(serving_again, 30), host_stats(stack)
    print(f"serving again {time.monotonic() - started:.1f} s after the restart")


def test_restarted_replica_is_a_new_process(stack: Stack, tmp_path: Path) -> None:
    """The stack stops every replica it started, the restarted ones included."""
    names = [name for name in stack.procs if name.startswith("pool-io")]
    assert names == ["pool-io", "pool-io-2"]
    assert all(stack.procs[name].alive() for name in names)
