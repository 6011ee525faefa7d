"""A hung worker of a pool whose every route Envoy retries is killed at once, not after
gunicorn's timeout: its GETs are then retried on another worker within their route's
timeout, instead of being answered 504 when it expires.

Each worker of such a pool runs a heartbeat thread (a real OS thread) that touches a file
of its own (``Heartbeat``, made by the master before the fork) every ``BEAT_FRACTION`` of
the shorter limit (``routing.gunicorn.hung_limits``). Between the turns of its loop the
master looks at those files and SIGKILLs a worker whose file is older than its limit:
the short one when the kernel says the process is stopped (SIGSTOP, a frozen cgroup),
the pool's whole timeout when it is still runnable (stuck in C code that holds the GIL,
the seeds' blocking C library; or only starved of CPU by a busy machine, which the long
limit leaves alone). The thread needs only the GIL, which a hub busy with requests hands
over every switch interval, so a loaded worker keeps beating. Killed, a worker's
connections close, and Envoy retries their GETs (``retry_on: reset``).

gunicorn's own heartbeat (``timeout``, beaten by the worker's loop) still kills a worker
whose loop is stuck in Python for longer. A pool with a route Envoy does not retry (a
POST) gets no heartbeat thread: killing its worker would lose that route's requests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from gevent.monkey import get_original
from gunicorn.workers.workertmp import WorkerTmp

from routing.gunicorn import HungLimits

#: The heartbeat's period and the master's look, as a share of the limit.
BEAT_FRACTION = 0.25

_start_new_thread, _sleep = (
    get_original("_thread", "start_new_thread"),
    get_original("time", "sleep"),
)


class Heartbeat(WorkerTmp):
    """gunicorn's heartbeat file (its mtime: the worker's monotonic clock at its last
    beat); a second one, beaten by a thread rather than by the worker's loop."""

    def age_s(self, now: float) -> float | None:
        """Seconds since the last beat; None before the first (the file then has the
        wall-clock time it was made at, far past any monotonic reading; a beat just now
        may read a hair after *now*: the file keeps nanoseconds, a float rounds)."""
        age = now - self.last_update()
        return None if age < -1.0 else max(age, 0.0)


def start_heartbeat(beat: Heartbeat, limits: HungLimits) -> None:
    """In the worker: a thread that beats every BEAT_FRACTION of the shorter limit until
    the process ends."""
    period = limits.stopped_s * BEAT_FRACTION

    def run() -> None:
        with contextlib.suppress(OSError, ValueError):  # the file closed at exit
            while True:
                beat.notify()
                _sleep(period)

    beat.notify()
    _start_new_thread(run, ())


def stopped(pid: int) -> bool:
    """Whether the kernel has *pid* stopped (its state in /proc: T, or t when traced)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


def kill_hung_workers(server: Any, limits: HungLimits) -> list[int]:
    """In the master: SIGKILL each worker whose heartbeat is older than its limit (once:
    gunicorn's ``aborted`` flag); the pids killed."""
    now = time.monotonic()
    killed = []
    for pid, worker in list(server.WORKERS.items()):
        beat = getattr(worker, "hung_beat", None)
        if beat is None or worker.aborted:
            continue
        try:
            age = beat.age_s(now)
        except (OSError, ValueError):  # closed: the worker was just reaped
            continue
        if age is None or age <= limits.stopped_s:
            continue
        is_stopped = stopped(pid)
        limit = limits.stopped_s if is_stopped else limits.running_s
        if age <= limit:
            continue
        server.log.warning(
            "worker %s hung (%s): no heartbeat for %.0f ms (limit %.0f ms); killed, its "
            "GETs retried by Envoy",
            pid,
            "stopped" if is_stopped else "running",
            age * 1000,
            limit * 1000,
        )
        worker.aborted = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    return killed


def watch_for_hung_workers(server: Any, limits: HungLimits) -> None:
    """In the master: its loop waits for signals up to a second a turn
    (``Arbiter.wait_for_signals``); that wait now looks for hung workers every
    BEAT_FRACTION of the shorter limit (docs/private-apis.md)."""
    period = limits.stopped_s * BEAT_FRACTION
    wait: Callable[..., list[int]] = server.wait_for_signals

    def wait_for_signals(timeout: float = 1.0) -> list[int]:
        end = time.monotonic() + timeout
        while True:
            kill_hung_workers(server, limits)
            left = end - time.monotonic()
            if left <= 0:
                return []
            step = min(period, left)
            started = time.monotonic()
            signals = wait(timeout=step)
            if signals or time.monotonic() - started < step / 2:
                return signals  # a signal, or a wake-up the loop asked for

    server.wait_for_signals = wait_for_signals
