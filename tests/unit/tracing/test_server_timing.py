"""Inbound delay against ground truth: a client on a real OS thread stamps each send,
a hog greenlet blocks the hub for a known time meanwhile, and the server's measured
arrival and inbound delay must match within 1 ms; who ran must be named."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket
from gevent.monkey import get_original

from toolkit.wait import wait_until
from tracing.timing import server_timing
from tracing.timing.call_state import CallTiming
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import set_greenlet_label
from tracing.timing.request_state import RequestState
from tracing.timing.server_timing import RequestTiming

(OsThread,) = get_original("threading", ["Thread"])
(os_socket,) = get_original("socket", ["socket"])
(os_sleep,) = get_original("time", ["sleep"])

HOG = "POST /hog"


class Server:
    """One gevent listener; each connection answers lines, one request per line."""

    def __init__(self) -> None:
        self.listener = gsocket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        server_timing.enable_on_listener(self.listener._sock)
        self.port = self.listener.getsockname()[1]
        self.timings: list[RequestTiming] = []
        self._accepter = gevent.spawn(self._accept)

    def _accept(self) -> None:
        while True:
            sock, _ = self.listener.accept()
            gevent.spawn(self._serve, sock)

    def _serve(self, sock: Any) -> None:
        server_timing.watch_connection(sock)
        try:
            buf = b""
            while True:
                data = sock.recv(4096)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    _line, buf = buf.split(b"\n", 1)
                    measurement = server_timing.begin_request()
                    set_greenlet_label("GET /line")
                    self.timings.append(measurement.finish())
                    set_greenlet_label(None)
                    sock.sendall(b"ok\n")
        finally:
            server_timing.unwatch_connection()
            sock.close()

    def close(self) -> None:
        self._accepter.kill()
        self.listener.close()


@pytest.fixture
def server(instrumentor: GeventTimingInstrumentor) -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.close()


def client_thread(
    port: int, sends: list[int], go: list[threading.Event], n: int, sent: list[int] | None = None
) -> Any:
    """A real OS thread: connect, then for each go event send a line, stamping the time
    just before the send (*sends*) and just after it (*sent*)."""

    def run() -> None:
        conn = os_socket()
        conn.connect(("127.0.0.1", port))
        try:
            for i in range(n):
                go[i].wait(10)
                sends.append(time.time_ns())
                conn.sendall(b"x\n")
                if sent is not None:
                    sent.append(time.time_ns())
                conn.recv(16)
        finally:
            conn.close()

    thread = OsThread(target=run, daemon=True)
    thread.start()
    return thread


def block_hub(seconds: float) -> tuple[int, int]:
    """Hold the hub without yielding (CPU in Python, as a pricing quote does)."""
    set_greenlet_label(HOG)
    start = time.time_ns()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass
    end = time.time_ns()
    set_greenlet_label(None)
    return start, end


@pytest.mark.parametrize("block_s", [0.001, 0.01, 0.1, 1.0])
def test_inbound_delay_matches_ground_truth_while_the_hub_is_blocked(
    server: Server, block_s: float
) -> None:
    rounds = 3
    sends: list[int] = []
    sent_by: list[int] = []
    go = [threading.Event() for _ in range(rounds)]
    thread = client_thread(server.port, sends, go, rounds, sent_by)
    gevent.sleep(0.05)  # connected and accepted
    blocks = []
    for i in range(rounds):
        go[i].set()
        os_sleep(0.0005)  # the client thread stamps and sends while the hub is ours
        blocks.append(gevent.spawn(block_hub, block_s).get())
        wait_until(lambda i=i: len(server.timings) > i, 5, 0.001, sleep=gevent.sleep)
    thread.join(5)
    assert len(server.timings) == rounds
    # How far each round is past its bound (s; 0: within). The clocks are read from two
    # threads and the realtime/monotonic offset is sampled: a busy machine that preempts
    # a thread between two reads moves one round by milliseconds, so one round in three
    # may be past the tight 1 ms bound, and none past a loose one. A broken measurement
    # is off in every round.
    misses: list[float] = []
    for timing, sent, after, (_hog_start, hog_end) in zip(
        server.timings, sends, sent_by, blocks, strict=True
    ):
        assert timing.arrival_unix_ns is not None
        assert timing.inbound_delay_s is not None
        # The handler could only start once the hog let go of the hub.
        assert timing.start_unix_ns >= hog_end
        past = 0.0
        # The request reached the kernel during the client's send (loopback): between
        # the stamps taken just before and just after it (a busy machine may preempt
        # the client between a stamp and the syscall, hence the bracket).
        past = max(past, (sent - timing.arrival_unix_ns) / 1e9)
        past = max(past, (timing.arrival_unix_ns - after) / 1e9)
        # Ground truth from the client's stamps, around the bracket.
        earliest_s = (timing.start_unix_ns - after) / 1e9
        latest_s = (timing.start_unix_ns - sent) / 1e9
        past = max(past, earliest_s - timing.inbound_delay_s, timing.inbound_delay_s - latest_s)
        # The delay covers the block from the send on.
        past = max(past, (hog_end - sent) / 1e9 - timing.inbound_delay_s)
        if block_s >= 0.01:
            # Most of the wait is named: the hog held the hub from the arrival on.
            hog_part = timing.inbound_culprits.get(HOG, 0.0)
            expected = (hog_end - max(sent, timing.arrival_unix_ns)) / 1e9
            past = max(past, abs(hog_part - expected) - 0.02 * expected)
        misses.append(past)
    assert sum(miss > 0.001 for miss in misses) <= 1, misses
    assert max(misses) < 0.010 + 0.1 * block_s, misses


def test_an_idle_keep_alive_connection_is_stamped_per_request(server: Server) -> None:
    """The arrival is the request's, not the connection's: a request sent long after the
    connection opened has no inbound delay to speak of."""
    sends: list[int] = []
    go = [threading.Event() for _ in range(2)]
    thread = client_thread(server.port, sends, go, 2)
    go[0].set()
    assert wait_until(lambda: server.timings, 5, 0.001, sleep=gevent.sleep)
    gevent.sleep(0.2)  # the connection idles, armed for the next request
    go[1].set()
    assert wait_until(lambda: len(server.timings) >= 2, 5, 0.001, sleep=gevent.sleep)
    thread.join(5)
    second = server.timings[1]
    assert second.inbound_delay_s is not None
    assert second.arrival_unix_ns is not None and second.arrival_unix_ns >= sends[1]
    # No longer than since the request was sent (a connection's stamp would add the
    # 200 ms it idled), however busy the machine.
    assert second.inbound_delay_s <= (second.start_unix_ns - sends[1]) / 1e9


def test_without_a_watch_there_is_no_inbound_delay(instrumentor: GeventTimingInstrumentor) -> None:
    measurement = server_timing.begin_request()
    timing = measurement.finish()
    assert timing.arrival_unix_ns is None and timing.inbound_delay_s is None


def test_the_critical_call_explains_the_handlers_wait() -> None:
    """The call that ended last is the critical one: the wait around it splits into the
    time before it began, the call, and the time until the handler ran again."""
    measurement = server_timing.RequestMeasurement(None, start_ns=1_000, offset_ns=0)
    state: RequestState = measurement._state
    state.on_switch_out(2_000)  # handler runs 1 us, then waits for its fan-out
    state.on_switch_in(50_000)
    calls = [
        ("vehicles", CallTiming(0.00001, 0.000008, 0.0, 0.0, start_ns=3_000, end_ns=13_000)),
        ("routing", CallTiming(0.00004, 0.00003, 0.000005, 0.0, start_ns=4_000, end_ns=44_000)),
    ]
    timing = measurement.finish(calls, end_ns=60_000)
    assert timing.critical_upstream == "routing"
    assert timing.presend_delay_s == pytest.approx(2e-6)
    assert timing.wake_delay_s == pytest.approx(6e-6)
    assert timing.running_s == pytest.approx(11e-6)  # 1 us before, 10 us after the wait
    assert timing.waiting_s == pytest.approx(48e-6)
    assert timing.explained_wait_s == pytest.approx(timing.waiting_s)


@pytest.fixture
def cpu_competitor() -> Iterator[None]:
    """This process and a busy subprocess pinned to the same CPU: whenever both are
    runnable, the kernel shares that CPU between them, so our thread waits on its run
    queue for about half of any busy interval."""
    import os
    import subprocess
    import sys

    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    spinner = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    os.sched_setaffinity(0, {cpu})
    try:
        os_sleep(0.2)  # the spinner is running
        yield
    finally:
        os.sched_setaffinity(0, before)
        spinner.kill()
        spinner.wait()


def one_request_during_a_block(server: Server, block_s: float) -> RequestTiming:
    """One request sent while a hog holds the hub for *block_s*; its timing."""
    sends: list[int] = []
    go = [threading.Event()]
    thread = client_thread(server.port, sends, go, 1)
    gevent.sleep(0.05)
    go[0].set()
    os_sleep(0.002)
    gevent.spawn(block_hub, block_s).get()
    assert wait_until(lambda: server.timings, 5, 0.001, sleep=gevent.sleep)
    thread.join(5)
    return server.timings[0]


def test_cpu_wait_is_split_off_when_the_process_shares_its_cpu(
    server: Server, cpu_competitor: None
) -> None:
    timing = one_request_during_a_block(server, 0.3)
    assert timing.inbound_delay_s is not None and timing.inbound_delay_s > 0.25
    # About half of the 300 ms block our thread was runnable but the spinner (or, on a
    # busy machine, something else) had the CPU.
    share = timing.inbound_cpu_wait_s / timing.inbound_delay_s
    assert 0.25 < share < 0.9, share
    # Who held the hub meanwhile is still named: the hog.
    assert sum(timing.inbound_culprits.values()) == pytest.approx(timing.inbound_delay_s, rel=0.1)


def test_a_hog_on_the_hub_is_named_whatever_the_machine_does(server: Server) -> None:
    timing = one_request_during_a_block(server, 0.3)
    assert timing.inbound_delay_s is not None and timing.inbound_delay_s > 0.25
    # The hog held the hub for the whole block (a busy machine may have preempted it:
    # that part is CPU wait as well, but the hub was still the hog's).
    assert timing.inbound_culprits.get(HOG, 0.0) > 0.8 * 0.3
    assert timing.inbound_cpu_wait_s <= timing.inbound_delay_s


def test_a_handler_woken_by_each_finished_call_still_has_its_wait_explained() -> None:
    """joinall hands the handler each call as it finishes: three waits around the
    critical call. Its presend counts from the first, its wake to the last, and the
    handler's runs in between overlap the call instead of adding to it."""
    measurement = server_timing.RequestMeasurement(None, start_ns=0, offset_ns=0)
    state: RequestState = measurement._state
    for out, back in ((10, 30), (32, 60), (61, 100)):
        state.on_switch_out(out)
        state.on_switch_in(back)
    critical = CallTiming(80e-9, 70e-9, 5e-9, 0.0, start_ns=12, end_ns=92)
    timing = measurement.finish([("routing", critical)], end_ns=110)
    assert timing.presend_delay_s == pytest.approx(2e-9)
    assert timing.wake_delay_s == pytest.approx(8e-9)
    assert timing.overlap_s == pytest.approx(3e-9)  # 30->32 and 60->61
    assert timing.running_s == pytest.approx(23e-9)  # 10 + 2 + 1 + 10
    assert timing.waiting_s + timing.running_s == pytest.approx(110e-9)
    # Every ns of the handler's time, once: its running, and the wait the call explains;
    # or, as the trace shows it: running outside the call window, and the window.
    assert timing.running_s + timing.explained_wait_s == pytest.approx(timing.duration_s)
    window = timing.presend_delay_s + critical.duration_s + timing.wake_delay_s
    assert timing.running_s - timing.overlap_s + window == pytest.approx(timing.duration_s)
