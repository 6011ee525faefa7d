"""`pricingctl up`: serves, stops everything on SIGTERM, refuses a taken port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.write import write_routes
from stack.procs import free_port
from tests.integration.conftest import http

pytestmark = pytest.mark.integration


def routes_on_free_ports(tmp_path: Path) -> tuple[Path, int]:
    """The route config with every port free, written as a file `up --config` reads."""
    config = load_routes().with_ports(
        listener_port=free_port(),
        admin_port=free_port(),
        pool_ports={name: free_port() for name in ("cpu", "io", "shared")},
    )
    written = write_routes(config, tmp_path / "routes.toml")
    return Path(written.source), written.listener.address.port


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries `marker` (everything `up` started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_up_serves_then_sigterm_leaves_no_process(tmp_path: Path) -> None:
    config, port = routes_on_free_ports(tmp_path)
    marker = f"PRICINGCTL_TEST_{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pricingctl",
            "up",
            "--config",
            str(config),
            "--simulator-port",
            str(free_port()),
            "--run-dir",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, marker: "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until up (or dead)
        assert f"pricingservice is up at http://127.0.0.1:{port}" in line, (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        reply = http(
            "GET",
            f"http://127.0.0.1:{port}/v1/offers/bike?origin=37.7749,-122.4194&destination=37.7849,-122.4094&user_id=u1",
        )
        assert reply.status == 200
        started = marked_pids(marker)
        # pricingctl, simulator, 2 gunicorn masters + 4 workers, Envoy
        assert len(started) >= 9, started
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while marked_pids(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marked_pids(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_up_refuses_a_taken_port_with_one_line(tmp_path: Path) -> None:
    config, _ = routes_on_free_ports(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pricingctl",
                "up",
                "--config",
                str(config),
                "--port",
                str(port),
                "--run-dir",
                str(tmp_path / "run"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"pricingctl: port {port} on 127.0.0.1 (Envoy listener) is already in use"
    )
    assert "Traceback" not in result.stderr


def test_bad_route_config_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "routes.toml"
    bad.write_text(DEFAULT_ROUTES_PATH.read_text().replace('pool = "io"', 'pool = "gpu"', 1))
    result = subprocess.run(
        [sys.executable, "-m", "pricingctl", "up", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1  # a bad config, not a bad flag (that is 2)
    assert len(result.stderr.strip().splitlines()) == 1
    assert "route 'offers.bike': pool 'gpu' is not declared" in result.stderr
