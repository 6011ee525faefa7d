"""CPU time per label: charged by the switch tracer to whichever label ran, long runs
less the thread's run-queue wait (fake clock), and on real greenlets."""

from __future__ import annotations

import time

import gevent
import pytest

from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import HUB_LABEL, set_greenlet_label
from tracing.timing.route_cpu import RouteCpu

HOG = RIDE_ROUTE
OFFER = BIKE_ROUTE
MS = 1_000_000


class FakeRunQueue:
    """Says the thread waited for a CPU `waited_ns` in every interval asked about."""

    def __init__(self, waited_ns: int) -> None:
        self.waited_ns = waited_ns
        self.asked: list[tuple[int, int]] = []

    def wait_between(self, start_ns: int, end_ns: int, wait_at_end: int | None = None) -> int:
        self.asked.append((start_ns, end_ns))
        return min(self.waited_ns, end_ns - start_ns)


def test_each_run_is_charged_to_the_label_that_ran() -> None:
    cpu = RouteCpu(long_ns=10 * MS)
    cpu.since[:] = [0, HOG]
    cpu.switch(5 * MS, OFFER)
    cpu.switch(6 * MS, None)
    cpu.switch(8 * MS, HOG)
    cpu.switch(9 * MS, OFFER)
    assert cpu.by_label_ns == {HOG: 6 * MS, OFFER: 1 * MS, None: 2 * MS}


def test_a_long_run_has_the_run_queue_wait_inside_it_taken_off() -> None:
    runqueue = FakeRunQueue(waited_ns=15 * MS)
    cpu = RouteCpu(runqueue, long_ns=1 * MS)
    cpu.since[:] = [0, HOG]
    cpu.switch(40 * MS, OFFER)  # 40 ms on the hub, 15 of them preempted
    cpu.switch(40 * MS + 500_000, HOG)  # short: not asked
    assert cpu.by_label_ns[HOG] == 25 * MS
    assert cpu.by_label_ns[OFFER] == 500_000
    assert runqueue.asked == [(0, 40 * MS)]


def test_the_hubs_long_runs_cost_no_read() -> None:
    """The hub idles in epoll for long runs: off every run queue, not worth a pread."""
    runqueue = FakeRunQueue(waited_ns=0)
    cpu = RouteCpu(runqueue, long_ns=1 * MS)
    cpu.since[:] = [0, HUB_LABEL]
    cpu.switch(50 * MS, OFFER)
    assert runqueue.asked == []
    assert cpu.seconds() == {HUB_LABEL: 0.05}


def test_a_greenlets_run_of_the_block_length_is_a_hub_block_and_the_hubs_never() -> None:
    """Counted as the run ends, by wall time (whatever kept the thread off the CPU, the
    hub was held), per label; the hub's own long runs are its idle waits in epoll."""
    cpu = RouteCpu(FakeRunQueue(waited_ns=90 * MS), long_ns=1 * MS, block_ns=100 * MS)
    cpu.since[:] = [0, HOG]
    cpu.switch(120 * MS, HUB_LABEL)  # 120 ms, 90 of them preempted: still a block
    cpu.switch(620 * MS, OFFER)  # the hub idle for 500 ms: not a block
    cpu.switch(680 * MS, None)  # 60 ms: under the threshold
    cpu.switch(800 * MS, HOG)  # an unlabelled greenlet's 120 ms
    cpu.switch(900 * MS, HUB_LABEL)  # exactly the threshold
    assert cpu.blocks == {HOG: 2, None: 1}
    assert cpu.by_label_ns[HOG] == 30 * MS + 10 * MS  # less the run-queue wait, as before


def test_no_blocks_are_counted_unless_asked_and_the_threshold_is_a_long_run() -> None:
    cpu = RouteCpu(long_ns=1 * MS)
    cpu.since[:] = [0, HOG]
    cpu.switch(10_000 * MS, OFFER)
    assert cpu.blocks == {}
    with pytest.raises(ValueError, match="block_ns"):
        RouteCpu(long_ns=10 * MS, block_ns=5 * MS)


def burn(seconds: float) -> None:
    """Burn *seconds* of this thread's CPU (not wall time: the machine may be busy)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_cpu_heavy_greenlet_is_charged_its_cpu_and_its_fan_out_inherits_the_label(
    instrumentor: GeventTimingInstrumentor,
) -> None:
    def handler(label: str, seconds: float) -> None:
        set_greenlet_label(label)  # after it was switched in, as a request handler does
        burn(seconds / 2)
        gevent.spawn(burn, seconds / 2).join()  # fan-out: a greenlet it spawned
        gevent.sleep(0.01)
        set_greenlet_label(None)

    cpu = instrumentor.route_cpu
    assert cpu is not None
    gevent.joinall([gevent.spawn(handler, HOG, 0.060), gevent.spawn(handler, OFFER, 0.004)])
    seconds = cpu.seconds()
    assert 0.050 <= seconds[HOG] < 0.075, seconds
    assert 0.003 <= seconds[OFFER] < 0.015, seconds
    # The 10 ms sleeps were the hub's (waiting in epoll), not the routes'.
    assert seconds[HUB_LABEL] >= 0.008
