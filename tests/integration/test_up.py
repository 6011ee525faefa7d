"""`pricingctl up` and `down`: serves, stops everything on SIGTERM, leaves nothing behind
when it is SIGKILLed, names a stack still running from its run dir, drains under load
(every accepted request answered), refuses a taken port; restarts a killed Envoy under
load (the pools untouched) and stops the stack on a crash loop, with the reason."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from routing.load import DEFAULT_ROUTES_PATH, load_routes
from routing.model import Layout
from routing.write import write_routes
from stack.launch import Stack, config_on_free_ports
from stack.procfs import tree
from stack.procs import StartError, port_in_use
from stack.state import Running, read_state
from stack.supervise import CRASH_LOOP
from tests.integration.support.cli import pricingctl
from tests.integration.support.http import http
from tests.integration.support.load import (
    Background,
    Tally,
    assert_nothing_lost,
    failed,
    offer_request,
    open_loop,
)
from toolkit.wait import wait_for, wait_until

pytestmark = pytest.mark.integration


class Ports(NamedTuple):
    config: Path  # the route config, written as a file `up --config` reads
    listener: int
    simulator: int


def routes_on_free_ports(tmp_path: Path) -> Ports:
    """The route config with every port free, and a free port for the simulator: all
    different, picked at once."""
    config, simulator = config_on_free_ports(load_routes())
    written = write_routes(config, tmp_path / "routes.toml")
    return Ports(Path(written.source), written.listener.address.port, simulator)


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


class Up:
    """`pricingctl up` in a subprocess, every process it starts marked by an environment
    variable; killed (with whatever it left) when the test ends."""

    def __init__(self, ports: Ports, run_dir: Path) -> None:
        self.marker = f"PRICINGCTL_TEST_{uuid.uuid4().hex}"
        self.run_dir = run_dir
        self.simulator_port = ports.simulator
        config = ports.config
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pricingctl",
                "up",
                "--config",
                str(config),
                "--simulator-port",
                str(self.simulator_port),
                "--run-dir",
                str(run_dir),
                "--jaeger",
                "off",
                "--prometheus",
                "off",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, self.marker: "1"},
        )

    def wait_up(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until up (or dead)
        assert "pricingservice is up at" in line, (line, self._stderr())
        return line

    def _stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""

    def pids(self) -> list[int]:
        return marked_pids(self.marker)

    def gone(self, timeout_s: float = 15) -> bool:
        return wait_until(lambda: self.pids() == [], timeout_s, 0.1)

    def __enter__(self) -> Up:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_sigkilled_up_leaves_no_process_and_a_second_up_names_the_first(
    tmp_path: Path,
) -> None:
    ports = routes_on_free_ports(tmp_path)
    config, port = ports.config, ports.listener
    run_dir = tmp_path / "run"
    with Up(ports, run_dir) as first:
        first.wait_up()
        # A second `up` from the same run dir: one line, pointing at `down`.
        second = pricingctl("up", "--config", str(config), "--run-dir", str(run_dir), timeout_s=60)
        assert second.returncode == 1
        assert second.stderr.count("\n") == 1, second.stderr
        assert "a stack from an earlier `pricingctl up` is still running" in second.stderr
        assert f"pricingctl down --run-dir {run_dir}" in second.stderr
        started = first.pids()
        assert len(started) >= 9, started  # pricingctl, simulator, 2 masters + 4 workers, Envoy
        first.proc.kill()  # SIGKILL: no handler runs
        assert first.gone(), [Path(f"/proc/{p}/cmdline").read_bytes() for p in first.pids()]
    assert not port_in_use("127.0.0.1", port)
    # Its pid file is stale now: the next `up` starts, and `down` stops it.
    with Up(ports, run_dir) as again:
        again.wait_up()
        down = pricingctl("down", "--run-dir", str(run_dir), timeout_s=60)
        assert down.returncode == 0, down.stderr
        assert again.proc.wait(timeout=30) == 0
        assert again.gone()
    assert not (run_dir / "stack.json").exists()


SLOW_UPSTREAM_MS = 300


def test_down_under_load_answers_every_accepted_request(tmp_path: Path) -> None:
    """Envoy stops accepting, the requests it accepted finish, then the pools stop: a
    request either gets its answer or finds nothing listening, never a reset."""
    ports = routes_on_free_ports(tmp_path)
    run_dir = tmp_path / "run"
    url = f"http://127.0.0.1:{ports.listener}"
    with Up(ports, run_dir) as up:
        up.wait_up()
        # Slow upstreams: a dozen requests are in flight when `down` comes.
        reply = http(
            "PUT",
            f"http://127.0.0.1:{up.simulator_port}/_control/upstreams/vehicles",
            {"latency": {"dist": "fixed", "ms": SLOW_UPSTREAM_MS}},
        )
        assert reply.status == 200, reply.body
        with Background(url, offer_request, rate_per_s=40, count=4000, timeout_s=10) as load:
            time.sleep(2.0)
            down = pricingctl("down", "--run-dir", str(run_dir), timeout_s=60)
            time.sleep(0.5)
            load.stop()
        assert down.returncode == 0, down.stderr
        assert up.proc.wait(timeout=30) == 0
        assert up.gone()
    tally = Tally(load.outcomes)
    refused = [o for o in tally.outcomes if "ConnectionRefused" in o.error]
    answered = [o for o in tally.outcomes if o.status == 200]
    print(f"\n{tally.summary('bike offers across `pricingctl down`')}; refused {len(refused)}")
    assert len(answered) > 40
    assert [o for o in answered if o.elapsed_s > SLOW_UPSTREAM_MS / 1000]  # slow ones, too
    assert refused, "the load ran past the stop"
    others = [o for o in tally.outcomes if o not in answered and o not in refused]
    assert others == [], others[:5]


def test_up_serves_then_sigterm_leaves_no_process(tmp_path: Path) -> None:
    config, port, simulator_port = routes_on_free_ports(tmp_path)
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
            str(simulator_port),
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
        assert wait_for(lambda: marked_pids(marker), 10, 0.1, until=lambda pids: pids == []) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_up_refuses_a_taken_port_with_one_line(tmp_path: Path) -> None:
    config = routes_on_free_ports(tmp_path).config
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


def test_a_listener_envoy_cannot_bind_fails_the_start_with_envoys_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Envoy rejects a listener whose port was taken after the ports were checked, logs
    it and serves on with no listener: the start must fail, not report a stack up
    whose port answers for someone else (once, a free-port pick gave the simulator the
    listener's port and every offer was the simulator's 404)."""
    stack = Stack.on_free_ports(load_routes(), Layout.SHARED, tmp_path, with_jaeger=False)
    monkeypatch.setattr(stack, "check_ports", lambda: None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", stack.config.listener.address.port))
        taken.listen()
        with pytest.raises(StartError, match=r"Envoy refused its listener on 127\.0\.0\.1:"):
            stack.start(timeout_s=60)
    assert stack.procs == {}  # what it started is stopped


# --- supervision: what crashes is restarted; a crash loop stops the stack ----------------


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """One `pricingctl up` for the supervision tests; the last one ends it."""
    tmp_path = tmp_path_factory.mktemp("supervised")
    with Up(routes_on_free_ports(tmp_path), tmp_path / "run") as up:
        up.wait_up()
        yield up


def _state(up: Up) -> Running:
    running = read_state(up.run_dir)
    assert running is not None
    return running


def _restarted(up: Up, name: str, count: int) -> Running:
    """The pid file once it counts `count` restarts of `name`."""
    return wait_for(lambda: _state(up), 60, 0.1, until=lambda r: r.restarts.get(name, 0) >= count)


def test_a_killed_envoy_is_restarted_and_the_pools_are_untouched(supervised: Up) -> None:
    up = supervised
    before = _state(up)
    pools = {name: tree(pid) for name, pid in before.pids.items() if name.startswith("pool-")}
    with Background(before.url, offer_request, rate_per_s=20, count=2000, timeout_s=10) as load:
        try:
            time.sleep(1.0)
            os.kill(before.pids["envoy"], signal.SIGKILL)
            after = _restarted(up, "envoy", 1)
        finally:
            load.stop()
    around = Tally(load.outcomes)
    # Served again, on the same address, by the same pools.
    served = Tally(open_loop(after.url, offer_request, rate_per_s=20, count=40))
    print(f"\n{around.summary('offers around the kill')}\n{served.summary('offers after')}")
    assert after.url == before.url and after.pids["envoy"] != before.pids["envoy"]
    assert {name: tree(after.pids[name]) for name in pools} == pools
    assert after.restarts == {"envoy": 1}
    assert_nothing_lost(served)
    # What failed around the kill failed at the connection (Envoy's own, or refused
    # while it was down): no pool answered an error.
    assert [o for o in failed(around.outcomes) if o.status != 0] == [], around.summary("lost")


def test_a_crash_loop_stops_the_stack_with_its_reason(supervised: Up) -> None:
    up = supervised
    loop = CRASH_LOOP
    for restarts in range(1, loop.crashes):
        os.kill(_state(up).pids["simulator"], signal.SIGKILL)
        _restarted(up, "simulator", restarts)
    os.kill(_state(up).pids["simulator"], signal.SIGKILL)
    assert up.proc.wait(timeout=60) == 1
    assert up.gone()
    assert up.proc.stderr is not None
    lines = up.proc.stderr.read().splitlines()
    print("\n" + "\n".join(lines))
    said = [line for line in lines if "exited with signal 9 (SIGKILL); restarted as pid" in line]
    assert [line.split(" ")[1] for line in said] == ["envoy"] + ["simulator"] * (loop.crashes - 1)
    assert lines[-1] == (
        f"pricingctl: simulator exited {loop.crashes} times within {loop.window_s:.0f} s "
        "(last: signal 9 (SIGKILL)), a crash loop; stopping the stack "
        f"(see {up.run_dir / 'logs' / 'simulator.log'})"
    )
    assert not (up.run_dir / "stack.json").exists()
