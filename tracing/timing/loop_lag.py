"""Process-wide loop-lag gauge: how late a periodic hub timer fires.

A timer that should fire every ``interval_s`` fires late by however long the hub was busy
(greenlets hogging the CPU, long callback queues). This is a gauge for the whole process,
not a per-call number: per call it was off by tens of ms in measurements; use
``tracing.timing.call_timing`` for that. Its ticks also serve as the hub heartbeat for
``tracing.timing.hub_block``. Resolution is about 1 ms (libev rounds its poll timeout).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from tracing.timing.hook_errors import swallow

#: Default period of the timer (seconds): one sample of the lag a second. Each tick of an
#: idle hub is a wake-up of the process, which costs CPU whatever the tick does
#: (docs/traces.md, "What tracing costs"), so the gauge samples rather than watches; a
#: busy hub is watched by the switch tracer, which counts every hub block and names
#: every delay's culprits.
DEFAULT_INTERVAL_S: Final = 1.0

#: The period when the ticks must also be the idle hub's heartbeat for the hub-block
#: detector (where the kernel does not say that the hub sleeps in its poll): shorter
#: than the detector's threshold.
HEARTBEAT_INTERVAL_S: Final = 0.05


class LoopLagGauge:
    """Arms a one-shot, unref'd timer on the hub's loop and re-arms it on every tick."""

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        loop: Any = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"loop lag interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self._interval_ns = int(interval_s * 1_000_000_000)
        self._loop = loop
        self._clock_ns = clock_ns
        self._on_tick = on_tick
        self._timer: Any = None
        self._due_ns = 0
        #: Lateness of the last tick (seconds).
        self.last_lag_s = 0.0
        #: Monotonic time (ns) of the last tick: the hub heartbeat.
        self.last_tick_ns = 0
        self.ticks = 0
        #: Functions called with every tick's lag (seconds), on the hub: a metrics
        #: library's histogram, for one. Their errors are swallowed like the tick's.
        self.observers: list[Callable[[float], None]] = []

    @property
    def running(self) -> bool:
        return self._timer is not None

    def start(self) -> None:
        """Start ticking on the hub of the calling thread (idempotent)."""
        if self._timer is not None:
            return
        if self._loop is None:
            import gevent

            self._loop = gevent.get_hub().loop
        self.last_tick_ns = self._clock_ns()
        self._arm()

    def stop(self) -> None:
        timer, self._timer = self._timer, None
        _dispose(timer)

    def _arm(self) -> None:
        # libev measures the timeout from its cached "now" of this loop iteration; bring it
        # up to date first, or the timer fires early by however long this iteration ran.
        update_now = getattr(self._loop, "update_now", None)
        if update_now is not None:
            update_now()
        self._due_ns = self._clock_ns() + self._interval_ns
        # A fresh one-shot timer per tick: restarting the timer from inside its own
        # callback makes gevent's libev loop fire it again at once, thousands of
        # times a second. ref=False: the gauge must not keep the loop alive
        # (gevent.wait() would never return in a process that is otherwise done).
        previous, self._timer = self._timer, self._loop.timer(self.interval_s, 0.0, ref=False)
        self._timer.start(self._tick)
        _dispose(previous)

    def _tick(self) -> None:
        try:
            now = self._clock_ns()
            lag = max(now - self._due_ns, 0)
            self.last_lag_s = lag / 1_000_000_000
            for observe in self.observers:
                observe(self.last_lag_s)
            self.last_tick_ns = now
            self.ticks += 1
            if self._on_tick is not None:
                self._on_tick()
        except Exception as exc:
            swallow("loop lag tick", exc)
        if self._timer is not None:
            self._arm()


def _dispose(timer: Any) -> None:
    """Stop a hub timer and release its watcher (fakes may have no close())."""
    if timer is None:
        return
    timer.stop()
    close = getattr(timer, "close", None)
    if close is not None:
        close()
