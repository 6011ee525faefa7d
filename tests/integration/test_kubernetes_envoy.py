"""The Kubernetes Envoy as rendered (deploy/kubernetes/envoy.yaml), run by the real Envoy
binary on loopback ports: its stats listener serves the admin's Prometheus text and
readiness and nothing else, and its preStop script drains it (readiness turns 503)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from routing.container import ENVOY_CONFIG_PATH, ENVOY_STATS_PORT
from routing.load import DEFAULT_ROUTES_PATH, load_routes
from stack.envoy import envoy_binary
from stack.procs import free_ports
from toolkit.fetch import fetch
from toolkit.wait import wait_until

pytestmark = pytest.mark.integration

MANIFEST = DEFAULT_ROUTES_PATH.parent / "deploy" / "kubernetes" / "envoy.yaml"


def _get(port: int, path: str) -> tuple[int, bytes]:
    reply = fetch(f"http://127.0.0.1:{port}{path}", timeout_s=2)
    return reply.status, reply.body


def _ready(port: int) -> bool:
    try:
        return _get(port, "/ready")[0] == 200
    except OSError:  # not listening yet
        return False


@pytest.fixture
def envoy(tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    """(stats port, preStop command) of the rendered Envoy, every port moved to a free
    loopback one."""
    config = load_routes()
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    text = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["envoy.yaml"]
    (container,) = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    admin, stats, listener = free_ports(3)
    moves = {
        f"port_value: {config.admin.port}\n": f"port_value: {admin}\n",
        f"port_value: {ENVOY_STATS_PORT}\n": f"port_value: {stats}\n",
        f"port_value: {config.listener.address.port}\n": f"port_value: {listener}\n",
        "address: 0.0.0.0\n": "address: 127.0.0.1\n",
    }
    for old, new in moves.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "envoy.yaml"
    path.write_text(text)
    args = [str(path) if a == ENVOY_CONFIG_PATH else a for a in container["args"]]
    log = (tmp_path / "envoy.log").open("w")
    proc = subprocess.Popen(
        [envoy_binary(), *args, "--base-id", str(os.getpid() % 60000 + 1000)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    script = command[-1].replace(
        f"{config.admin.host}/{config.admin.port}", f"{config.admin.host}/{admin}"
    )
    script = script[: script.rindex("sleep ")] + "sleep 0"
    try:
        if not wait_until(lambda: _ready(stats), timeout_s=30):
            pytest.fail("Envoy did not become ready:\n" + (tmp_path / "envoy.log").read_text())
        yield stats, [*command[:-1], script]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()


def test_stats_listener_serves_only_prometheus_and_readiness(envoy: tuple[int, list[str]]) -> None:
    stats, _ = envoy
    status, body = _get(stats, "/stats/prometheus")
    assert status == 200 and b"envoy_cluster_upstream_rq" in body
    assert _get(stats, "/ready") == (200, b"LIVE\n")
    # Nothing else of the admin: it can stop Envoy.
    assert _get(stats, "/clusters")[0] == 404
    assert _get(stats, "/quitquitquit")[0] == 404


def test_pre_stop_drains_and_fails_readiness(envoy: tuple[int, list[str]]) -> None:
    stats, command = envoy
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert _get(stats, "/ready") == (503, b"DRAINING\n")
