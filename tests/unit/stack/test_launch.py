"""stack.launch: what a stack gives each pool (environment, config, readiness probe),
checked without starting anything."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from routing.load import default_routes_path
from routing.model import Layout, RouteConfig
from stack import launch
from stack.jaeger import JaegerPorts
from stack.launch import PortTaken, Stack
from tracing.settings import TracingSettings


def test_on_free_ports_moves_every_listener(routes: RouteConfig, tmp_path: Path) -> None:
    stack = Stack.on_free_ports(routes, Layout.SPLIT, tmp_path)
    ports = {
        stack.config.listener.address.port,
        stack.config.admin.port,
        stack.simulator_port,
        *(p.bind.port for p in stack.config.pools),
        stack.config.shared.bind.port,
    }
    assert len(ports) == 6  # all distinct
    assert not ports & {8080, 9901, 8200, 8101, 8102, 8103}  # none of routes.toml's
    assert stack.pool_url("io") == f"http://127.0.0.1:{stack.config.pool('io').bind.port}"


def test_pool_env_is_what_the_pool_reads(
    routes: RouteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = routes.with_ports(upstream_base_url="http://127.0.0.1:1")
    stack = Stack(written, Layout.SPLIT, tmp_path, simulator_port=8299)
    stack.with_jaeger, stack.jaeger_ports = True, JaegerPorts(1, 4999, 3, 4)
    for key, value in stack.pool_env("io").items():
        monkeypatch.setenv(key, value)
    # The pool's own copy, which `routes apply` changes for one pool at a time.
    assert default_routes_path() == tmp_path.resolve() / "routes" / "io.toml"
    settings = TracingSettings.from_env()
    assert settings.span_file == stack.span_file
    assert settings.otlp_endpoint == "http://127.0.0.1:4999/v1/traces"
    from toolkit.contract import POOL_ENV, UPSTREAM_URL_ENV

    assert stack.pool_env("io")[POOL_ENV] == "io"
    assert stack.pool_env("io")[UPSTREAM_URL_ENV] == "http://127.0.0.1:8299"


def test_extra_env_wins(routes: RouteConfig, tmp_path: Path) -> None:
    stack = Stack(routes, Layout.SPLIT, tmp_path, extra_env={"PRICING_TRACING": "off"})
    assert stack.pool_env("cpu")["PRICING_TRACING"] == "off"


class FakeProc:
    """Records what the stack would start, and the readiness check it waits for."""

    started: list[FakeProc] = []

    pid = 0

    def __init__(self, name: str, argv: list[str], log_path: Path, **kw: Any) -> None:
        self.name, self.argv, self.env = name, argv, kw.get("env")
        self.pass_fds = kw.get("pass_fds", ())
        self.ready: Callable[[], bool] | None = None

    def start(self) -> FakeProc:
        FakeProc.started.append(self)
        return self

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        self.ready = ready


def test_a_pool_is_started_from_its_gunicorn_config_and_waited_for_until_ready(
    routes: RouteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[str] = []
    monkeypatch.setattr(launch, "Proc", FakeProc)
    monkeypatch.setattr(launch, "http_ok", lambda url: probed.append(url) or True)
    serving: list[int] = []
    monkeypatch.setattr(launch, "serving_workers", lambda master, port: serving)
    stack = Stack.on_free_ports(routes, Layout.SPLIT, tmp_path)
    stack.start_replica("cpu", timeout_s=1)
    (proc,) = FakeProc.started[-1:]
    try:
        assert proc.argv[:4] == [sys.executable, "-m", "gunicorn", "--config"]
        assert proc.argv[4] == "python:gunicorn_conf.cpu"
        # It serves on the socket the stack holds, bound to the pool's address.
        held = stack.listeners["pool-cpu"]
        assert proc.argv[5:7] == ["--bind", f"fd://{held.fileno()}"]
        assert proc.pass_fds == (held.fileno(),)
        assert held.getsockname() == ("127.0.0.1", stack.config.pool("cpu").bind.port)
        # Ready once every one of its own workers serves, and as Envoy's health check
        # sees it: the path [meta].readyz names.
        assert proc.ready is not None and not proc.ready()
        serving.extend(range(stack.config.pool("cpu").workers))
        assert proc.ready()
        assert probed == [f"{stack.pool_url('cpu')}{routes.meta.readyz}"]
    finally:
        stack._close_listener("pool-cpu")


class Stopping:
    """A started process that records, in a log the test shares, how it is stopped."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name, self.log = name, log

    def terminate(self) -> None:
        self.log.append(("SIGTERM", self.name))

    def stop(self) -> None:
        self.log.append(("stopped", self.name))


def test_a_stack_stops_envoy_then_every_pool_at_once_then_what_they_call(
    routes: RouteConfig, tmp_path: Path
) -> None:
    """Nothing new reaches the pools once they are told (Envoy first), and the simulator
    they call outlives them; the pools are told together, not one after the other."""
    stack = Stack.on_free_ports(routes, Layout.SPLIT, tmp_path)
    log: list[tuple[str, str]] = []
    for name in ("jaeger", "simulator", "pool-cpu", "pool-io", "envoy"):
        stack.procs[name] = Stopping(name, log)  # type: ignore[assignment]
    for pool in ("pool-cpu", "pool-io"):
        stack.listeners[pool] = socket.socket()
    stack.stop()
    assert log == [
        ("stopped", "envoy"),
        ("SIGTERM", "pool-cpu"),
        ("SIGTERM", "pool-io"),
        ("stopped", "pool-io"),
        ("stopped", "pool-cpu"),
        ("stopped", "simulator"),
        ("stopped", "jaeger"),
    ]
    assert stack.procs == {} and stack.listeners == {}


def test_a_taken_port_is_named_before_anything_starts(
    routes: RouteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = Stack.on_free_ports(routes, Layout.SPLIT, tmp_path)
    taken = stack.config.pool("io").bind.port
    monkeypatch.setattr(launch, "port_in_use", lambda host, port: port == taken)
    with pytest.raises(PortTaken, match=rf"port {taken} on 127.0.0.1 \(pool io\) is already in"):
        stack.check_ports()


def test_envoy_config_is_rendered_per_layout(routes: RouteConfig, tmp_path: Path) -> None:
    assert Stack(routes, Layout.SHARED, tmp_path).envoy_config_path() == (
        tmp_path / "envoy.shared.yaml"
    )


def test_one_port_given_to_two_parts_is_named_before_anything_starts(
    routes: RouteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = Stack.on_free_ports(routes, Layout.SPLIT, tmp_path)
    stack.simulator_port = stack.config.listener.address.port
    monkeypatch.setattr(launch, "port_in_use", lambda host, port: False)
    with pytest.raises(
        PortTaken,
        match=rf"port {stack.simulator_port} is given to both the Envoy listener and the "
        "upstream simulator",
    ):
        stack.check_ports()
