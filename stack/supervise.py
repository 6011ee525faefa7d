"""Keeping a started stack running: a process that exits on its own (Envoy, the
simulator, Jaeger, a pool's gunicorn master, any part the stack runs) is started again
the way it was started, on the same ports and files, after a back-off, and said in one
line; the rest of the stack serves on meanwhile. A pool's master is started again on
the listening socket the launcher holds while its orphaned workers serve on, and they
are stopped once the new workers serve (`Stack.restart`). Only a crash loop stops the
stack, with its reason.

Restarts run in the thread that calls `Supervisor.watch`: start the stack from that
thread too, as the processes die with the thread that forked them (stack.procs).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stack.launch import Stack
from stack.procs import StartError


@dataclass(frozen=True)
class CrashLoop:
    """A process that exits `crashes` times within `window_s` seconds is in a crash
    loop: restarting it again would hide a fault, so the stack stops."""

    crashes: int = 5
    window_s: float = 60.0


#: The crash loop that stops `pricingctl up` (docs/operations.md, "Supervision").
CRASH_LOOP = CrashLoop()
# Seconds before a restart: the first at once (a crashed Envoy answers nothing until it
# is back), then doubling from BACKOFF_BASE_S for each earlier crash in the window, at
# most BACKOFF_MAX_S.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
# Seconds a restarted process gets to pass its readiness check (Envoy: every pool
# healthy; a pool: its app loaded).
RESTART_TIMEOUT_S = 30.0
# Seconds between two looks at the processes.
POLL_S = 0.25

Say = Callable[[str], None]


def backoff_s(earlier_crashes: int) -> float:
    """The wait before restarting a process that crashed `earlier_crashes` times before
    this one within the crash-loop window."""
    if earlier_crashes <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (earlier_crashes - 1))


@dataclass
class Supervisor:
    stack: Stack
    say: Say
    loop: CrashLoop = CRASH_LOOP
    clock: Callable[[], float] = time.monotonic
    restart_timeout_s: float = RESTART_TIMEOUT_S
    # Process name -> when it exited, within the crash-loop window.
    crashes: dict[str, list[float]] = field(default_factory=dict)
    # Process name -> (when to restart it, how it ended, its pid).
    due: dict[str, tuple[float, str, int]] = field(default_factory=dict)

    def check(self) -> str | None:
        """Note what exited since the last look, restart what is due; the reason to stop
        the stack when a process is in a crash loop, else None."""
        now = self.clock()
        for name in self.stack.dead():
            if name in self.due:
                continue
            proc = self.stack.procs[name]
            times = [t for t in self.crashes.get(name, []) if now - t < self.loop.window_s]
            times.append(now)
            self.crashes[name] = times
            if len(times) >= self.loop.crashes:
                return (
                    f"{name} exited {len(times)} times within {self.loop.window_s:.0f} s "
                    f"(last: {proc.exit_status()}), a crash loop; stopping the stack "
                    f"(see {proc.log_path})"
                )
            self.due[name] = (now + backoff_s(len(times) - 1), proc.exit_status(), proc.pid)
        for name, (when, status, pid) in list(self.due.items()):
            if when <= self.clock():
                del self.due[name]
                self._restart(name, status, pid)
        return None

    def _restart(self, name: str, status: str, pid: int) -> None:
        started = self.clock()
        crashes = len(self.crashes[name])
        waited = started - self.crashes[name][-1]
        try:
            proc = self.stack.restart(name, self.restart_timeout_s)
        except StartError as exc:
            outcome = f"its restart failed: {str(exc).splitlines()[0]}"
        else:
            outcome = (
                f"restarted as pid {proc.pid} after {waited:.1f} s, "
                f"ready in {self.clock() - started:.1f} s"
            )
        self.say(
            f"{name} (pid {pid}) exited with {status}; {outcome} "
            f"(restart {self.stack.restarts[name]}; exits in the last "
            f"{self.loop.window_s:.0f} s: {crashes}, the stack stops at {self.loop.crashes})"
        )

    def watch(self, stopping: threading.Event) -> str | None:
        """Supervise until `stopping` is set (None) or a crash loop (its reason)."""
        while not stopping.wait(POLL_S):
            reason = self.check()
            if reason is not None:
                return reason
        return None
