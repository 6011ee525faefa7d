"""gunicorn_conf.hung: a worker of a pool whose every route Envoy retries, whose heartbeat
thread stops beating, is killed by its master: at once when the kernel has it stopped,
after the pool's whole timeout when it is still runnable (stuck in C holding the GIL, or
starved of CPU); a worker still booting, or of a pool with a POST, is not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gunicorn_conf import hung
from routing.gunicorn import HUNG_RUNNING_FRACTION, HUNG_STOPPED_FRACTION, HungLimits, hung_limits
from routing.model import RouteConfig
from toolkit.wait import wait_until

LIMITS = HungLimits(stopped_s=0.2, running_s=0.6)


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: str, *args: Any) -> None:
        self.warnings.append(msg % args)


def server_with(workers: dict[int, Any]) -> SimpleNamespace:
    return SimpleNamespace(WORKERS=workers, log=Log())


def worker_with_beat(cfg: Any) -> SimpleNamespace:
    return SimpleNamespace(hung_beat=hung.Heartbeat(cfg), aborted=False)


@pytest.fixture
def cfg(tmp_path: Any) -> SimpleNamespace:
    return SimpleNamespace(
        worker_tmp_dir=str(tmp_path), uid=os.getuid(), gid=os.getgid(), umask=0o22
    )


def test_the_io_pool_kills_a_hung_worker_within_part_of_its_shortest_timeout(
    routes: RouteConfig,
) -> None:
    io_routes = [r for r in routes.routes if r.pool == "io"]
    assert io_routes and all(r.retry is not None for r in io_routes)
    shortest_s = min(r.timeout_ms for r in io_routes) / 1000
    limits = hung_limits(routes, "io")
    assert limits is not None
    assert limits.stopped_s == pytest.approx(shortest_s * HUNG_STOPPED_FRACTION)
    assert limits.running_s == pytest.approx(shortest_s * HUNG_RUNNING_FRACTION)
    assert limits.stopped_s < limits.running_s
    # The cpu pool serves POSTs, which Envoy does not retry: its workers are never
    # killed early; nor are the shared layout's, which serves them too.
    assert hung_limits(routes, "cpu") is None
    assert hung_limits(routes, "shared") is None


def test_a_stopped_worker_is_killed_at_the_short_limit_once(cfg: Any) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        assert wait_until(lambda: hung.stopped(child.pid), 10)
        beating, silent, booting = (worker_with_beat(cfg) for _ in range(3))
        beating.hung_beat.notify()
        silent.hung_beat.notify()
        server = server_with({os.getpid(): beating, child.pid: silent, 3: booting})
        time.sleep(LIMITS.stopped_s * 1.5)
        beating.hung_beat.notify()
        assert hung.kill_hung_workers(server, LIMITS) == [child.pid]
        assert child.wait(10) == -signal.SIGKILL
        assert silent.aborted and not beating.aborted and not booting.aborted
        (line,) = server.log.warnings
        assert f"worker {child.pid} hung (stopped)" in line and "limit 200 ms" in line
        # Once: gunicorn's aborted flag says it was killed.
        assert hung.kill_hung_workers(server, LIMITS) == []
    finally:
        child.kill()
        child.wait()


def test_a_runnable_worker_is_given_the_long_limit(cfg: Any) -> None:
    """Silent but not stopped: maybe only starved of CPU; killed past the long limit."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        silent = worker_with_beat(cfg)
        silent.hung_beat.notify()
        server = server_with({child.pid: silent})
        time.sleep(LIMITS.stopped_s * 1.5)
        assert not hung.stopped(child.pid)
        assert hung.kill_hung_workers(server, LIMITS) == []
        time.sleep(LIMITS.running_s - LIMITS.stopped_s)
        assert hung.kill_hung_workers(server, LIMITS) == [child.pid]
        assert child.wait(10) == -signal.SIGKILL
        assert "hung (running)" in server.log.warnings[0]
    finally:
        child.kill()
        child.wait()


def test_the_heartbeat_thread_beats_while_the_main_thread_computes(cfg: Any) -> None:
    beat = hung.Heartbeat(cfg)
    hung.start_heartbeat(beat, LIMITS)
    end = time.monotonic() + LIMITS.stopped_s * 3
    oldest = 0.0
    while time.monotonic() < end:  # pure Python: the GIL changes hands every interval
        sum(range(1000))
        age = beat.age_s(time.monotonic())
        assert age is not None
        oldest = max(oldest, age)
    assert oldest < LIMITS.stopped_s


def test_the_masters_wait_looks_for_hung_workers_between_signals(cfg: Any) -> None:
    looks: list[float] = []
    waits: list[float] = []

    def wait_for_signals(timeout: float = 1.0) -> list[int]:
        waits.append(timeout)
        time.sleep(timeout)
        return []

    server = SimpleNamespace(WORKERS={}, log=Log(), wait_for_signals=wait_for_signals)
    original_kill = hung.kill_hung_workers
    try:
        hung.kill_hung_workers = lambda s, limit: looks.append(limit) or []  # type: ignore[assignment]
        hung.watch_for_hung_workers(server, LIMITS)
        assert server.wait_for_signals(timeout=0.2) == []
    finally:
        hung.kill_hung_workers = original_kill  # type: ignore[assignment]
    # A 0.2 s wait in steps of a quarter of the limit, a look before each.
    assert len(looks) >= 4 and all(w <= LIMITS.stopped_s * hung.BEAT_FRACTION + 1e-9 for w in waits)
