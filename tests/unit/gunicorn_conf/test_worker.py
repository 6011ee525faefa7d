"""gunicorn_conf.worker: a worker whose master died serves on, then leaves by itself."""

from __future__ import annotations

import os
from typing import Any

import pytest
from gunicorn.workers.ggevent import GeventWorker

from gunicorn_conf import worker as pool_worker
from gunicorn_conf.worker import PoolWorker
from routing.gunicorn import ORPHAN_SERVE_S
from stack.supervise import BACKOFF_MAX_S, RESTART_TIMEOUT_S


class Heartbeat:
    def __init__(self) -> None:
        self.beats = 0

    def notify(self) -> None:
        self.beats += 1


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: str, *args: Any) -> None:
        self.warnings.append(msg % args)

    info = warning


def bare_worker(ppid: int) -> PoolWorker:
    """A PoolWorker with only what its heartbeat reads (no fork, no sockets)."""
    worker = PoolWorker.__new__(PoolWorker)
    worker.ppid, worker.pid, worker.alive = ppid, os.getpid(), True
    worker.tmp, worker.log = Heartbeat(), Log()
    worker._orphaned_at = None
    return worker


def test_a_worker_with_its_master_beats_and_serves() -> None:
    worker = bare_worker(os.getppid())
    worker.notify()
    assert worker.alive and worker.tmp.beats == 1 and worker.log.warnings == []


def test_an_orphan_serves_on_then_leaves_gracefully(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(pool_worker.time, "monotonic", lambda: now[0])
    worker = bare_worker(os.getppid() + 1)  # its master is gone
    worker.notify()  # gevent's own notify would sys.exit here, cutting its requests
    now[0] += ORPHAN_SERVE_S - 1
    worker.notify()
    assert worker.alive and worker.tmp.beats == 2
    assert len(worker.log.warnings) == 1 and "gone; serving on" in worker.log.warnings[0]
    now[0] += 1
    worker.notify()
    assert not worker.alive  # gunicorn's loop then stops accepting and finishes what it holds
    assert "stopping" in worker.log.warnings[-1]


def test_gevents_own_worker_still_exits_on_a_lost_master() -> None:
    """What PoolWorker.notify replaces (docs/private-apis.md): if gunicorn stops exiting
    here, the override can go."""
    worker = GeventWorker.__new__(GeventWorker)
    worker.ppid, worker.pid, worker.tmp, worker.log = os.getppid() + 1, 0, Heartbeat(), Log()
    with pytest.raises(SystemExit):
        worker.notify()


def test_an_orphan_outlasts_a_supervised_restart() -> None:
    """A supervisor restarts a master after at most BACKOFF_MAX_S and gives it
    RESTART_TIMEOUT_S to serve: the orphans must still serve until then."""
    assert ORPHAN_SERVE_S > BACKOFF_MAX_S + RESTART_TIMEOUT_S
