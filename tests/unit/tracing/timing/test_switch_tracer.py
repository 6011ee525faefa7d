"""Switch-outs that are not socket waits, on real greenlets: yields, timers, events, the
thread pool; and the switch log the tracer keeps."""

from __future__ import annotations

import time

import gevent
import gevent.event
import greenlet
import pytest

from tests.samples import RIDE_ROUTE
from tracing.timing.call_timing import CallTiming, measure_call
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import HUB_LABEL, set_greenlet_label
from tracing.timing.switch_tracer import SwitchTracer
from tracing.timing.switchlog import SwitchLog

HOG = RIDE_ROUTE


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def hog_once(seconds: float) -> None:
    # Labels itself after it was switched in, like a request handler: the CPU it burns
    # must still be blamed on the new label.
    set_greenlet_label(HOG)
    burn(seconds)


def test_a_zero_timeout_yield_is_delay_blamed_on_whoever_ran(
    instrumentor: GeventTimingInstrumentor,
) -> None:
    """urllib3's pre-send poll(0) is this case: the greenlet was ready all along."""

    def caller() -> CallTiming:
        gevent.spawn(hog_once, 0.040)
        with measure_call() as measurement:
            gevent.sleep(0)
        assert measurement.timing is not None
        return measurement.timing

    timing = gevent.spawn(caller).get(timeout=5)
    assert timing.scheduling_delay_s >= 0.040
    assert timing.blocked_s < 0.1 * timing.scheduling_delay_s  # ready all along: delay
    assert timing.top_culprits(1)[0][0] == HOG
    assert timing.culprits[HOG] >= 0.9 * timing.scheduling_delay_s


def test_a_timer_is_blocked_until_due_and_delay_after(
    instrumentor: GeventTimingInstrumentor,
) -> None:
    def caller() -> CallTiming:
        # The hog starts after our timer is armed and runs 60 ms past its 20 ms.
        gevent.spawn_later(0.005, hog_once, 0.075)
        with measure_call() as measurement:
            gevent.sleep(0.020)
        assert measurement.timing is not None
        return measurement.timing

    timing = gevent.spawn(caller).get(timeout=5)
    assert timing.blocked_s == pytest.approx(0.020, abs=0.002)  # the timer, exactly
    assert timing.scheduling_delay_s >= 0.050  # the hog's 75 ms minus the 20 ms
    assert timing.top_culprits(1)[0][0] == HOG


def test_waiting_for_an_event_is_blocked_not_delay(
    instrumentor: GeventTimingInstrumentor,
) -> None:
    event = gevent.event.Event()

    def caller() -> CallTiming:
        with measure_call() as measurement:
            event.wait()
        assert measurement.timing is not None
        return measurement.timing

    waiting = gevent.spawn(caller)
    gevent.sleep(0.030)
    event.set()
    timing = waiting.get(timeout=5)
    assert timing.blocked_s >= 0.9 * timing.duration_s
    assert timing.scheduling_delay_s == 0


def test_thread_pool_work_that_finished_while_the_hub_was_busy_is_delay(
    instrumentor: GeventTimingInstrumentor,
) -> None:
    """Like DNS on gevent's default resolver: done on a thread, then waiting for the hub."""
    pool = gevent.get_hub().threadpool
    pool.apply(lambda: None)  # its thread started before the measurement, not during it
    hog_s = 0.200

    def caller() -> CallTiming:
        with measure_call() as measurement:
            pool.apply(time.sleep, (0.010,))  # a real sleep on a worker thread
        assert measurement.timing is not None
        return measurement.timing

    def hog() -> None:
        gevent.sleep(0.002)
        hog_once(hog_s)

    hogging = gevent.spawn(hog)
    timing = gevent.spawn(caller).get(timeout=5)
    hogging.join()
    # The worker needs the GIL back from the hog to return: "done" is a few switch
    # intervals (5 ms) late, more when the machine is busy, and that part stays
    # blocked. The order of magnitude is the point: counted as blocked, the hog's
    # time would make blocked ~200 ms and delay ~0.
    assert 0.009 <= timing.blocked_s <= hog_s / 2
    assert timing.scheduling_delay_s >= hog_s / 2
    assert timing.top_culprits(1)[0][0] == HOG


def test_the_log_records_labels_and_the_hub() -> None:
    log = SwitchLog(64)
    tracer = SwitchTracer(log)
    tracer.install()
    try:

        def work() -> None:
            set_greenlet_label(HOG)
            gevent.sleep(0)

        gevent.spawn(work).join()
    finally:
        assert tracer.uninstall()
    labels = [label for _, label in list(log._entries)]
    assert HUB_LABEL in labels and HOG in labels
    times = [t for t, _ in list(log._entries)]
    assert times == sorted(times)


def test_an_error_in_the_tracer_does_not_fail_the_switch(
    python_reference: None, instrumentor: GeventTimingInstrumentor, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("log full of bees")

    monkeypatch.setattr(instrumentor.switch_log, "append", broken)
    # The closure bound the old append; rebuild the trace function around the broken one.
    instrumentor._tracer.uninstall()
    instrumentor._tracer.install()
    assert gevent.spawn(lambda: gevent.sleep(0) or 42).get(timeout=5) == 42
    assert greenlet.gettrace() is not None
