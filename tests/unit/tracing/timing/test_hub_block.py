"""The hub-block detector: its check with a fake clock and heartbeat, then a real block
seen by the real watcher thread, and a fork."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

import gevent
import pytest

from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tests.unit.support.timing import timing_path
from toolkit.wait import wait_until
from tracing.timing import hub_block
from tracing.timing.hub_block import HubBlockDetector, HubBlocked
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import set_greenlet_label

MS = 1_000_000


class Beats:
    def __init__(self) -> None:
        self.now_ns = 1000 * MS
        self.beat_ns = 1000 * MS

    def clock(self) -> int:
        return self.now_ns

    def heartbeat(self) -> int:
        return self.beat_ns


def detector_on(beats: Beats) -> tuple[HubBlockDetector, list[HubBlocked]]:
    events: list[HubBlocked] = []
    detector = HubBlockDetector(
        beats.heartbeat, lambda: RIDE_ROUTE, threshold_s=0.1, clock_ns=beats.clock
    )
    detector.register(events.append)
    return detector, events


def test_reports_a_block_when_seen_and_again_with_its_length_when_over() -> None:
    beats = Beats()
    detector, events = detector_on(beats)
    beats.now_ns += 80 * MS
    assert detector.check() is None  # silent, but not for long enough
    beats.now_ns += 40 * MS
    seen = detector.check()
    assert seen is not None and seen.ongoing
    assert seen.blocked_s == pytest.approx(0.120)
    assert seen.label == RIDE_ROUTE
    beats.now_ns += 300 * MS
    assert detector.check() is None  # still blocked: one event per block
    beats.beat_ns += 350 * MS  # the hub is back
    over = detector.check()
    assert over is not None and not over.ongoing
    assert over.blocked_s == pytest.approx(0.350)
    assert events == [seen, over]


def test_a_steady_heartbeat_is_never_a_block() -> None:
    beats = Beats()
    detector, events = detector_on(beats)
    for _ in range(50):
        beats.now_ns += 20 * MS
        beats.beat_ns = beats.now_ns - 5 * MS
        detector.check()
    assert events == []


def test_a_failing_callback_does_not_stop_the_others() -> None:
    beats = Beats()
    detector, events = detector_on(beats)

    def broken(event: HubBlocked) -> None:
        raise RuntimeError("callback")

    detector.unregister(events.append)
    detector.register(broken)
    detector.register(events.append)
    beats.now_ns += 200 * MS
    detector.check()
    assert len(events) == 1


def test_real_block_is_caught_with_stack_and_label() -> None:
    inst = GeventTimingInstrumentor(
        loop_lag_interval_s=0.010, hub_block_threshold_s=0.050, hub_block_watch_s=None
    )
    inst.instrument()
    events: list[HubBlocked] = []
    try:
        assert inst.hub_block is not None
        inst.hub_block.register(events.append)
        gevent.sleep(0.050)

        held_ns: list[int] = []

        def block_the_hub() -> None:
            set_greenlet_label(RIDE_ROUTE)
            began = time.monotonic_ns()
            time.sleep(0.300)  # not monkey-patched: the whole hub stops
            held_ns.append(time.monotonic_ns() - began)

        spawned_ns = time.monotonic_ns()
        gevent.spawn(block_the_hub).join()
        wait_until(lambda: len(events) >= 2, 2, 0.010, sleep=gevent.sleep)
        reported_by_ns = time.monotonic_ns()
    finally:
        inst.uninstrument()
    seen, over = events[:2]
    assert seen.ongoing and seen.label == RIDE_ROUTE
    assert any("block_the_hub" in frame for frame in seen.stack)
    assert not over.ongoing
    # Its real length against the ground truth of the same clock: at least the time the
    # hub was held, at most from the spawn to the moment the end had been published
    # (however long a busy machine made either).
    assert held_ns[0] / 1e9 <= over.blocked_s <= (reported_by_ns - spawned_ns) / 1e9


def test_the_watcher_restarts_in_a_forked_child() -> None:
    """The child waits for the restarted watcher's report itself, however slow the
    machine (a sanitizer build is several times slower): only a watcher that never
    reports runs into the subprocess's generous timeout.

    The parent forks only once its own watcher has reported: under ASan a thread that is
    still starting may hold its allocator's or thread registry's lock, which a fork
    copies held into the child, where nothing releases it. The product
    never forks with a watcher starting (gunicorn workers start theirs after the fork).
    """
    script = textwrap.dedent(
        """
        import os, sys, threading
        from tracing.timing.hub_block import HubBlockDetector

        # A heartbeat that never beats: a running watcher reports a block at once.
        detector = HubBlockDetector(lambda: 0, lambda: None, threshold_s=0.05)
        up = threading.Event()
        on_up = lambda event: up.set()
        detector.register(on_up)
        detector.start()
        if not up.wait(60):
            sys.exit(3)
        detector.unregister(on_up)
        pid = os.fork()
        if pid == 0:
            reported = threading.Event()
            detector.register(lambda event: reported.set())
            before = detector.running
            detector.ensure_running()
            if before or not detector.running:
                os._exit(1)
            os._exit(0 if reported.wait(60) else 4)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status) or (0 if detector.running else 2))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], timeout=120, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()


def test_a_beating_hub_is_looked_at_once_per_threshold_and_a_block_every_interval() -> None:
    beats = Beats()
    detector, events = detector_on(beats)
    interval = detector.check_interval_s
    # Just beaten: the earliest the beat can be stale is one threshold away.
    assert detector.next_check_s() == pytest.approx(0.1 + interval)
    # Beaten 70 ms ago: 30 ms left, then one interval.
    beats.now_ns += 70 * MS
    assert detector.next_check_s() == pytest.approx(0.030 + interval)
    # Sleeping that long lands past the threshold: the block is seen on that check,
    # at most one interval after it could first be called one.
    beats.now_ns += int((0.030 + interval) * 1e9)
    seen = detector.check()
    assert seen is not None and seen.ongoing
    assert seen.blocked_s == pytest.approx(0.1 + interval)
    # While it lasts, every interval: its end is seen within one.
    assert detector.next_check_s() == pytest.approx(interval)
    beats.beat_ns = beats.now_ns + 10 * MS
    beats.now_ns += 20 * MS
    assert detector.check() is not None
    assert [event.ongoing for event in events] == [True, False]
    # A beat "from the future" (a bad heartbeat) never makes it sleep past a threshold.
    beats.beat_ns = beats.now_ns + 10_000 * MS
    assert detector.next_check_s() == pytest.approx(0.1 + interval)


def test_a_silent_hub_parked_in_its_poll_is_idle_not_blocked() -> None:
    beats = Beats()
    detector, events = detector_on(beats)
    parked = [True]
    detector.parked = lambda: parked[0]
    beats.now_ns += 500 * MS  # silent for five thresholds, but asleep in epoll_wait
    assert detector.check() is None
    # Seen parked now: that counts as a beat, so the next look is a threshold away.
    assert detector.next_check_s() == pytest.approx(0.1 + detector.check_interval_s)
    parked[0] = False  # then it runs and stays silent: a block, from when it was parked
    beats.now_ns += 150 * MS
    seen = detector.check()
    assert seen is not None and seen.ongoing
    assert seen.blocked_s == pytest.approx(0.150)
    assert events == [seen]


def test_the_kernel_says_where_a_sleeping_thread_sleeps() -> None:
    """The probe on a real thread: parked while it waits in epoll_wait, not while it
    runs or sleeps elsewhere (a lock)."""
    import select
    import threading

    probe_of: dict[str, object] = {}
    ready = threading.Event()

    def in_epoll() -> None:
        probe_of["tid"] = threading.get_native_id()
        poller = select.epoll()
        ready.set()
        poller.poll(2.0)
        poller.close()

    if hub_block.parked_probe(threading.get_native_id()) is None:
        pytest.skip("this kernel does not say where threads sleep (wchan)")
    thread = threading.Thread(target=in_epoll, daemon=True)
    thread.start()
    ready.wait(1)
    probe = hub_block.parked_probe(int(probe_of["tid"]))  # type: ignore[call-overload]
    assert probe is not None
    assert wait_until(probe, 1, 0.005)
    mine = hub_block.parked_probe(threading.get_native_id())
    assert mine is not None and not mine()  # this thread runs


def test_with_a_watch_period_the_watcher_looks_once_per_period_until_a_block_opens() -> None:
    beats = Beats()
    detector = HubBlockDetector(
        beats.heartbeat, lambda: RIDE_ROUTE, threshold_s=0.1, watch_s=1.0, clock_ns=beats.clock
    )
    assert detector.next_check_s() == pytest.approx(1.0)  # just beaten
    beats.now_ns += 70 * MS
    assert detector.next_check_s() == pytest.approx(1.0)  # not sooner for a stale beat
    beats.now_ns += 1000 * MS
    seen = detector.check()
    assert seen is not None and seen.ongoing
    # While it lasts, every interval: its end is seen within one.
    assert detector.next_check_s() == pytest.approx(detector.check_interval_s)
    with pytest.raises(ValueError, match="watch_s"):
        HubBlockDetector(beats.heartbeat, lambda: None, watch_s=0)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "reference"])
def test_every_block_is_counted_by_the_switch_tracer_even_unseen_by_the_watcher(
    compiled: bool,
) -> None:
    """The counts do not depend on the watcher's looks: with a watch period longer than
    the test, the watcher sees no block, and the tracer counts each one as it ends."""
    events: list[HubBlocked] = []
    with timing_path(compiled):
        inst = GeventTimingInstrumentor(
            loop_lag_interval_s=1.0, hub_block_threshold_s=0.050, hub_block_watch_s=60.0
        )
        inst.instrument()
        try:
            assert inst.hub_block is not None and inst.route_cpu is not None
            inst.hub_block.register(events.append)

            def hold_the_hub(label: str, seconds: float) -> None:
                set_greenlet_label(label)
                time.sleep(seconds)  # not monkey-patched: the whole hub stops
                gevent.sleep(0)
                time.sleep(seconds)
                set_greenlet_label(None)

            gevent.joinall(
                [
                    gevent.spawn(hold_the_hub, RIDE_ROUTE, 0.080),
                    gevent.spawn(hold_the_hub, BIKE_ROUTE, 0.005),
                ]
            )
            blocks = dict(inst.route_cpu.blocks)
        finally:
            inst.uninstrument()
    # (The 5 ms runs are under the threshold; on a busy machine the OS may stretch one
    # past it, which is a block by wall time too: only the hog's count is asserted.)
    assert blocks[RIDE_ROUTE] == 2
    assert events == []


def test_the_log_logs_a_block_seen_while_it_lasts_with_the_tracers_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = {RIDE_ROUTE: 3}
    now = [100.0]
    blocks = hub_block.HubBlockLog(
        logging.getLogger("test.hub"), counts=counts, interval_s=30.0, clock_s=lambda: now[0]
    )
    with caplog.at_level(logging.WARNING, logger="test.hub"):
        blocks(HubBlocked(0.4, False, RIDE_ROUTE, (), 1))  # an end: counted elsewhere
        blocks(HubBlocked(0.2, True, RIDE_ROUTE, ("  File x, in hog\n",), 1))
        now[0] += 10
        blocks(HubBlocked(0.3, True, RIDE_ROUTE, (), 1))  # within the interval: not again
    assert len(caplog.records) == 1
    assert "3 earlier blocks" in caplog.text and "in hog" in caplog.text
    assert counts == {RIDE_ROUTE: 3}  # read, never written
