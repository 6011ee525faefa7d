"""Fixtures of real processes on free ports: the upstream simulator, gunicorn pools,
Envoy. They build on each other, as in Flask's tutorial: routes -> a stack -> a client
and a load generator on it (or its upstreams reset around a test).

The split and shared stacks of the committed routes are started once per session
(starting a stack is the dearest set-up here) and shared by every module that uses
them as they are; a module that kills their processes or changes their routes
starts its own, once per module. Every stack is stopped by process group. When a
process fails to start, the error carries the tail of its log. The helpers the
tests call (requests, load, derived configs) are in `support`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from routing.model import Layout, RouteConfig
from stack import jaeger
from stack.jaeger import JaegerPorts
from stack.launch import Stack
from tests.integration.support.http import Client, reset_upstreams
from tests.integration.support.load import Load

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def hogged_routes(
    all_traced_routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory
) -> RouteConfig:
    """Every request sampled, and the shared pool closing each connection after its
    reply, as the cpu pool does: every request, quote or offer, is then accepted by
    whichever worker is free, so the hogs' quotes spread over every worker and the
    offers meet them. With keep-alive, Envoy's connections may tie the quotes to some
    workers and the offers to another: in one of six measurements here (and once in
    CI) not one of ~75 calls met a quote, where closing the connection gave 70-75 of
    ~73 in six of six."""
    from dataclasses import replace

    from routing.write import write_routes

    shared = replace(all_traced_routes.shared, keepalive_s=0)
    config = replace(all_traced_routes, shared=shared)
    return write_routes(config, tmp_path_factory.mktemp("hogged") / "routes.toml")


@pytest.fixture(scope="module")
def own_jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JaegerPorts]:
    """A Jaeger of the module's own, outside any stack (skipped where none is built)."""
    if jaeger.cached_binary() is None:
        pytest.skip("no Jaeger binary cached (make jaeger)")
    proc, ports = jaeger.start(tmp_path_factory.mktemp("own-jaeger"))
    try:
        yield ports
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def split_stack(routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack.on_free_ports(routes, Layout.SPLIT, tmp_path_factory.mktemp("split")) as stack:
        yield stack


@pytest.fixture(scope="session")
def shared_stack(routes: RouteConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack.on_free_ports(routes, Layout.SHARED, tmp_path_factory.mktemp("shared")) as stack:
        yield stack


@pytest.fixture(scope="module")
def stack(split_stack: Stack) -> Stack:
    """The stack a module's tests talk to: the split one, unless the module defines a
    `stack` fixture of its own (its own config, or processes it kills)."""
    return split_stack


@pytest.fixture
def client(stack: Stack) -> Client:
    return Client(stack)


@pytest.fixture
def load(stack: Stack) -> Load:
    return Load(stack)


@pytest.fixture
def fresh_upstreams(stack: Stack) -> Iterator[Stack]:
    """The stack with the simulator's upstreams reset before and after the test."""
    reset_upstreams(stack)
    yield stack
    reset_upstreams(stack)
