"""A hung worker of a pool whose every route Envoy retries is killed at once, not after
gunicorn's timeout: its GETs are then retried on another worker within their route's
timeout, instead of being answered 504 when it expires.

Each worker of such a pool runs a heartbeat thread (a real OS thread) that touches a file
of its own (``Heartbeat``, made by the master before the fork) every ``BEAT_FRACTION`` of
the limit (``routing.gunicorn.hung_after_s``). Between the turns of its loop the master
looks at those files and SIGKILLs a worker whose file is older than the limit. The
thread needs only the GIL, which a hub busy with requests hands over every switch
interval, so a loaded worker keeps beating; a worker that is stopped (SIGSTOP, a frozen
cgroup) or stuck in C code that holds the GIL (the seeds' blocking C library) does not.
Killed, its connections close, and Envoy retries their GETs (``retry_on: reset``).

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


def start_heartbeat(beat: Heartbeat, hung_after_s: float) -> None:
    """In the worker: a thread that beats every BEAT_FRACTION of the limit until the
    process ends."""
    period = hung_after_s * BEAT_FRACTION

    def run() -> None:
        with contextlib.suppress(OSError, ValueError):  # the file closed at exit
            while True:
                beat.notify()
                _sleep(period)

    beat.notify()
    _start_new_thread(run, ())


def kill_hung_workers(server: Any, hung_after_s: float) -> list[int]:
    """In the master: SIGKILL each worker whose heartbeat is older than the limit (once:
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
        if age is None or age <= hung_after_s:
            continue
        server.log.warning(
            "worker %s hung: no heartbeat for %.0f ms (limit %.0f ms); killed, its GETs "
            "retried by Envoy",
            pid,
            age * 1000,
            hung_after_s * 1000,
        )
        worker.aborted = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    return killed


def watch_for_hung_workers(server: Any, hung_after_s: float) -> None:
    """In the master: its loop waits for signals up to a second a turn
    (``Arbiter.wait_for_signals``); that wait now looks for hung workers every
    BEAT_FRACTION of the limit (docs/private-apis.md)."""
    period = hung_after_s * BEAT_FRACTION
    wait: Callable[..., list[int]] = server.wait_for_signals

    def wait_for_signals(timeout: float = 1.0) -> list[int]:
        end = time.monotonic() + timeout
        while True:
            kill_hung_workers(server, hung_after_s)
            left = end - time.monotonic()
            if left <= 0:
                return []
            step = min(period, left)
            started = time.monotonic()
            signals = wait(timeout=step)
            if signals or time.monotonic() - started < step / 2:
                return signals  # a signal, or a wake-up the loop asked for

    server.wait_for_signals = wait_for_signals
