"""The loop-lag gauge with a fake loop and clock, then once on the real hub."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
import pytest

from tracing.timing.loop_lag import LoopLagGauge

MS = 1_000_000


class FakeTimer:
    def __init__(self, after: float) -> None:
        self.after = after
        self.callback: Callable[[], None] | None = None
        self.closed = False

    def start(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def stop(self) -> None:
        self.callback = None

    def close(self) -> None:
        self.closed = True

    def fire(self) -> None:
        callback, self.callback = self.callback, None
        assert callback is not None, "timer not armed"
        callback()


class FakeLoop:
    def __init__(self) -> None:
        self.timers: list[FakeTimer] = []
        self.refs: list[bool] = []

    def timer(self, after: float, repeat: float = 0.0, ref: bool = True) -> FakeTimer:
        self.timers.append(FakeTimer(after))
        self.refs.append(ref)
        return self.timers[-1]

    def update_now(self) -> None:
        pass


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def test_lag_is_how_late_the_tick_came() -> None:
    loop, clock, ticks = FakeLoop(), FakeClock(), []
    gauge = LoopLagGauge(0.05, loop=loop, clock_ns=clock, on_tick=lambda: ticks.append(1))
    lags: list[float] = []
    gauge.observers.append(lags.append)
    gauge.start()
    assert loop.refs == [False]  # must not keep the loop alive
    clock.now_ns = 50 * MS + 7 * MS
    loop.timers[-1].fire()
    assert gauge.last_lag_s == pytest.approx(0.007)
    # Re-armed with a fresh timer; the fired one is closed.
    assert loop.timers[-1].callback is not None and loop.timers[0].closed
    clock.now_ns += 50 * MS + 120 * MS
    loop.timers[-1].fire()
    clock.now_ns += 50 * MS
    loop.timers[-1].fire()
    assert all(ref is False for ref in loop.refs)
    assert gauge.last_lag_s == 0.0
    assert lags == pytest.approx([0.007, 0.120, 0.0])  # each tick's lag, to the observers
    assert gauge.ticks == 3 and len(ticks) == 3
    assert gauge.last_tick_ns == clock.now_ns


def test_stop_disarms_and_closes() -> None:
    loop = FakeLoop()
    gauge = LoopLagGauge(0.05, loop=loop, clock_ns=FakeClock())
    gauge.start()
    gauge.start()  # idempotent
    gauge.stop()
    assert len(loop.timers) == 1 and loop.timers[0].callback is None and loop.timers[0].closed
    assert not gauge.running


def test_a_failing_tick_listener_does_not_stop_the_gauge() -> None:
    loop, clock = FakeLoop(), FakeClock()

    def broken() -> None:
        raise RuntimeError("listener")

    gauge = LoopLagGauge(0.05, loop=loop, clock_ns=clock, on_tick=broken)
    gauge.start()
    loop.timers[-1].fire()
    assert loop.timers[-1].callback is not None


def test_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopLagGauge(0)


def test_real_hub_shows_a_blocking_greenlet() -> None:
    gauge = LoopLagGauge(0.010)
    lags: list[float] = []
    gauge.start()
    try:
        gevent.sleep(0.030)
        gauge.observers.append(lags.append)

        def block() -> None:
            time.sleep(0.100)  # not monkey-patched: blocks the hub

        gevent.spawn(block).join()
        gevent.sleep(0.030)
        assert max(lags) > 0.050
    finally:
        gauge.stop()


def test_real_hub_ticks_once_per_interval() -> None:
    # Regression: re-arming a timer from its own callback made it fire continuously.
    gauge = LoopLagGauge(0.050)
    started = time.monotonic()
    gauge.start()
    try:
        gevent.sleep(0.5)
        elapsed_s = time.monotonic() - started
        # At least once, and never more often than the interval allows in the time that
        # passed (a busy machine gives fewer ticks, the regression thousands).
        assert 1 <= gauge.ticks <= elapsed_s / 0.050 + 1, (gauge.ticks, elapsed_s)
    finally:
        gauge.stop()
