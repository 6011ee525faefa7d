"""What listens where: only Envoy's listener is meant to be reachable from outside,
and its address comes from the route config. The pools, the upstream simulator,
Jaeger and Envoy's admin interface listen on loopback only.

The bind addresses are read from the kernel (`ss -ltunpH`), for every process of a
running stack and its children, not from the configs.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from routing.errors import RouteConfigError
from routing.load import DEFAULT_ROUTES_PATH, parse_routes
from routing.model import Layout
from stack import jaeger
from stack.launch import Stack
from stack.procfs import tree
from stack.procs import Proc
from tests.integration.support.http import http
from tests.integration.support.stack import derived_config
from tests.samples import offer_query

pytestmark = pytest.mark.integration

OTHER_LOOPBACK = "127.0.0.2"  # a loopback address that is not 127.0.0.1


@dataclass(frozen=True)
class Listening:
    proto: str  # "tcp" | "udp"
    host: str
    port: int
    pids: frozenset[int]

    @property
    def loopback(self) -> bool:
        if self.host in ("*", ""):
            return False
        return ipaddress.ip_address(self.host).is_loopback


def listening_sockets() -> list[Listening]:
    """Every listening TCP socket and bound UDP socket on the machine, with its owners."""
    out = subprocess.run(
        ["ss", "-H", "-l", "-n", "-p", "-t", "-u"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        host, _, port = fields[4].rpartition(":")
        host = host.strip("[]").split("%")[0]
        pids = frozenset(int(p) for p in re.findall(r"pid=(\d+)", line))
        found.append(Listening(fields[0], host, int(port), pids))
    return found


def owned_by(pids: Iterable[int]) -> list[Listening]:
    wanted = set(pids)
    return [s for s in listening_sockets() if s.pids & wanted]


def binds_of(stack: Stack) -> dict[str, set[tuple[str, int]]]:
    """(host, port) of every socket each part of the stack listens on."""
    return {
        name: {(s.host, s.port) for s in owned_by(tree(proc.pid))}
        for name, proc in stack.procs.items()
    }


def test_every_process_of_the_stack_listens_on_loopback_only(split_stack: Stack) -> None:
    stack = split_stack
    every = [s for proc in stack.procs.values() for s in owned_by(tree(proc.pid))]
    binds = binds_of(stack)
    print(f"\nlistening: { {name: sorted(b) for name, b in binds.items()} }")
    assert every, "found no listening socket at all: is `ss -p` allowed here?"
    exposed = [s for s in every if not s.loopback]
    assert exposed == [], exposed
    config = stack.config
    # Each part listens exactly where the config says, and nowhere else.
    assert binds["envoy"] == {
        (config.listener.address.host, config.listener.address.port),
        (config.admin.host, config.admin.port),
    }
    assert binds["simulator"] == {("127.0.0.1", stack.simulator_port)}
    for pool in config.pools_for(stack.layout):
        assert binds[f"pool-{pool.name}"] == {(pool.bind.host, pool.bind.port)}
    assert not [s for s in every if s.proto == "udp"]


@pytest.fixture(scope="module")
def jaeger_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, object]]:
    try:
        binary = jaeger.build()  # a cached binary is reused in well under a second
    except jaeger.JaegerBuildError as exc:
        pytest.fail(f"could not build Jaeger: {exc}", pytrace=False)
    proc, ports = jaeger.start(tmp_path_factory.mktemp("jaeger"), binary=binary)
    try:
        yield proc, ports
    finally:
        proc.stop()


def test_jaeger_listens_on_loopback_only(jaeger_proc: tuple[Proc, jaeger.JaegerPorts]) -> None:
    proc, ports = jaeger_proc
    sockets = owned_by(tree(proc.pid))
    print(f"\njaeger listening: {sorted((s.proto, s.host, s.port) for s in sockets)}")
    assert [s for s in sockets if not s.loopback] == []
    # Only the ports we configured: no default Jaeger/Zipkin receivers, no metrics.
    assert {(s.proto, s.port) for s in sockets} == {
        ("tcp", ports.otlp_grpc),
        ("tcp", ports.otlp_http),
        ("tcp", ports.query_http),
        ("tcp", ports.query_grpc),
    }


@pytest.fixture(scope="module")
def moved_listener_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Envoy's listener on another address, from the route config alone."""
    tmp = tmp_path_factory.mktemp("listener")
    config = derived_config(
        tmp,
        {
            "[listener]\n# The only address meant to be reachable from outside; `pricingctl "
            'up --port`\n# overrides the port.\naddress = "127.0.0.1"': (
                f'[listener]\naddress = "{OTHER_LOOPBACK}"'
            )
        },
    )
    assert config.listener.address.host == OTHER_LOOPBACK
    with Stack.on_free_ports(config, Layout.SPLIT, tmp) as stack:
        yield stack


def test_the_listener_address_is_configurable(moved_listener_stack: Stack) -> None:
    stack = moved_listener_stack
    port = stack.config.listener.address.port
    binds = binds_of(stack)
    print(f"\nlistening with the listener moved: { {n: sorted(b) for n, b in binds.items()} }")
    assert (OTHER_LOOPBACK, port) in binds["envoy"]
    assert ("127.0.0.1", stack.config.admin.port) in binds["envoy"]  # admin stays put
    reply = http("GET", f"http://{OTHER_LOOPBACK}:{port}/v1/offers/bike?{offer_query('u-1')}")
    assert reply.status == 200
    assert reply.headers["x-pricing-pool"] == "io"
    # Nothing answers on the old address.
    with pytest.raises(OSError):
        http("GET", f"http://127.0.0.1:{port}/v1/offers/bike?{offer_query('u-1')}", timeout_s=2)


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ('address = "127.0.0.1"            # never', 'address = "0.0.0.0"  # never', "[admin]"),
        ('bind = "127.0.0.1:8102"', 'bind = "0.0.0.0:8102"', "[pools.io].bind"),
        ('bind = "127.0.0.1:8101"', 'bind = "10.1.2.3:8101"', "[pools.cpu].bind"),
    ],
)
def test_the_config_refuses_to_expose_admin_or_pools(old: str, new: str, where: str) -> None:
    text = DEFAULT_ROUTES_PATH.read_text()
    assert old in text
    with pytest.raises(RouteConfigError, match=re.escape(where)):
        parse_routes(text.replace(old, new))


def test_the_simulator_refuses_a_non_loopback_bind(tmp_path: Path) -> None:
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "simulator", "--bind", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=DEFAULT_ROUTES_PATH.parent,
    )
    assert result.returncode == 2
    assert "loopback" in result.stderr
