"""The socket hooks on real gevent sockets (no monkey patching) against a delayed upstream
in a subprocess, next to a CPU-hog greenlet.

Tolerances are loose on purpose (a noisy 2-core machine): these tests check that the
split is visible and blames the right greenlet; the benchmark (pricingctl bench timing-accuracy)
holds the precise figures.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import gevent
import pytest
from gevent import socket as gsocket

from pricing.upstream.httpclient import HostClient, Origin, tls_context
from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tracing.timing import kernel_rx, socket_hooks
from tracing.timing.call_timing import CallTiming, measure_call
from tracing.timing.instrumentor import GeventTimingInstrumentor
from tracing.timing.labels import set_greenlet_label

HOG = RIDE_ROUTE
CLIENT = BIKE_ROUTE
REPLY_MS = 50


@pytest.fixture
def conn(upstream_port: int) -> Iterator[Any]:
    sock = gsocket.create_connection(("127.0.0.1", upstream_port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    yield sock
    sock.close()


def exchange(sock: Any, reply_ms: int) -> float:
    """Send one request and read the reply; return its true network time (seconds):
    from the request landing at the upstream to the upstream sending its reply."""
    sock.sendall(b"%d\n" % reply_ms)
    return read_reply(sock)


def read_reply(sock: Any) -> float:
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(64)
        assert chunk, "upstream closed"
        reply += chunk
    landed, sent = map(int, reply.split())
    return (sent - landed) / 1e9


def measured_exchange(sock: Any, reply_ms: int) -> tuple[CallTiming, float]:
    """Return the timing of one exchange and its true network time (seconds)."""
    with measure_call() as measurement:
        true_network = exchange(sock, reply_ms)
    assert measurement.timing is not None
    return measurement.timing, true_network


def hog(stop: list[bool], slice_s: float = 0.010) -> None:
    set_greenlet_label(HOG)
    while not stop[0]:
        end = time.perf_counter() + slice_s
        while time.perf_counter() < end:
            pass
        gevent.sleep(0)


def run_client(conn: Any, calls: int, with_hog: bool) -> list[tuple[CallTiming, float]]:
    stop = [False]
    hogs = [gevent.spawn(hog, stop)] if with_hog else []

    def client() -> list[tuple[CallTiming, float]]:
        set_greenlet_label(CLIENT)
        return [measured_exchange(conn, REPLY_MS) for _ in range(calls)]

    try:
        return gevent.spawn(client).get(timeout=8)
    finally:
        stop[0] = True
        gevent.joinall(hogs)


def test_network_time_is_the_upstreams_and_the_delay_is_the_hogs(
    instrumentor: GeventTimingInstrumentor, conn: Any
) -> None:
    idle = run_client(conn, calls=2, with_hog=False)
    hogged = run_client(conn, calls=3, with_hog=True)
    for timing, true_network in idle + hogged:
        # Network: the upstream's 50 ms (plus its wake-up), whatever the hub did. Never
        # less than the truth; more only if a process was preempted around a send.
        assert true_network - 0.001 <= timing.network_s <= true_network + 0.010
        assert timing.network_s >= REPLY_MS / 1e3
        assert timing.socket_waits == 1
        assert timing.blocked_s == 0  # the wait's switches are the socket hook's, not
        # the tracer's: counted once
    for timing, _ in hogged:
        # The hog yields with sleep(0) every 10 ms; gevent runs up to 50 callbacks before
        # it polls, so the reply sits in the kernel for a long time.
        assert timing.scheduling_delay_s > 0.010
        assert timing.duration_s > timing.network_s + timing.scheduling_delay_s * 0.9
        top_label, top_s = timing.top_culprits(1)[0]
        assert top_label == HOG
        assert top_s > 0.8 * timing.scheduling_delay_s
    worst_idle = max(timing.scheduling_delay_s for timing, _ in idle)
    least_hogged = min(timing.scheduling_delay_s for timing, _ in hogged)
    assert least_hogged > worst_idle


def test_reply_already_queued_at_the_first_read(
    instrumentor: GeventTimingInstrumentor, conn: Any
) -> None:
    """The greenlet sleeps past the reply's arrival, then reads without waiting: the
    upstream's time is still network, and the sleep is not."""

    def client() -> tuple[CallTiming, float]:
        with measure_call() as measurement:
            conn.sendall(b"%d\n" % REPLY_MS)
            gevent.sleep(0.120)
            true_network = read_reply(conn)
        assert measurement.timing is not None
        return measurement.timing, true_network

    timing, true_network = gevent.spawn(client).get(timeout=5)
    assert timing.socket_waits == 0
    assert true_network - 0.001 <= timing.network_s <= true_network + 0.010
    assert timing.blocked_s == pytest.approx(0.120 - true_network, abs=0.010)


def test_connect_switches_receive_timestamps_on(
    instrumentor: GeventTimingInstrumentor, upstream_port: int
) -> None:
    sock = gsocket.create_connection(("127.0.0.1", upstream_port))
    with sock:
        assert sock.getsockopt(socket.SOL_SOCKET, kernel_rx.SO_TIMESTAMPNS) == 1


def test_connect_wait_is_measured(
    instrumentor: GeventTimingInstrumentor, upstream_port: int
) -> None:
    with measure_call() as measurement:
        sock = gsocket.create_connection(("127.0.0.1", upstream_port))
    sock.close()
    assert measurement.timing is not None
    assert measurement.timing.socket_waits == 1  # a loopback connect is EINPROGRESS too


def test_an_exception_in_the_hook_does_not_break_the_read(
    python_reference: None,
    instrumentor: GeventTimingInstrumentor,
    conn: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any) -> int:
        raise RuntimeError("stamp exploded")

    # The read's own stamp (a plain socket's read takes it; SSL reads peek for it).
    monkeypatch.setattr(kernel_rx, "stamp_of", broken)
    with caplog.at_level(logging.WARNING, logger="tracing"):
        timings = [measured_exchange(conn, 20) for _ in range(3)]
    assert len(caplog.records) == 1
    assert "stamp exploded" in caplog.text
    for timing, true_network in timings:
        # The wait is still counted, undivided, as network.
        assert timing.socket_waits == 1
        assert timing.network_s >= true_network - 0.001


def test_without_a_measurement_the_hooks_do_not_even_look_up_the_greenlet(
    instrumentor: GeventTimingInstrumentor, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups = []
    real_getcurrent = socket_hooks.getcurrent

    def counting_getcurrent() -> Any:
        lookups.append(1)
        return real_getcurrent()

    monkeypatch.setattr(socket_hooks, "getcurrent", counting_getcurrent)
    assert exchange(conn, 5) > 0
    assert lookups == []


def test_a_timeout_in_the_wait_propagates_and_counts_as_network(
    instrumentor: GeventTimingInstrumentor, conn: Any
) -> None:
    started = time.monotonic()
    with measure_call() as measurement, pytest.raises(gevent.Timeout), gevent.Timeout(0.030):
        exchange(conn, 200)
    waited_s = time.monotonic() - started
    assert measurement.timing is not None
    # The wait the timeout cut short is network: from the timeout on, not past the
    # moment the call gave up (the reply, 200 ms away, never came into it).
    assert 0.029 <= measurement.timing.network_s <= waited_s
    gevent.sleep(0.25)
    conn.recv(64)  # drain the late reply


def test_the_split_holds_over_tls(
    instrumentor: GeventTimingInstrumentor, tls_upstream_port: int, tls_cert: tuple[str, str]
) -> None:
    """The upstream client's https path: its reads go through gevent's SSL ``read`` (the
    hook that sees a reply already queued) and the same socket waits as plain TCP."""
    origin = Origin("https", "127.0.0.1", tls_upstream_port)
    client = HostClient("tls", origin, max_idle=1, ca_file=tls_cert[0])
    client.get("/1")  # the handshake, outside the measured calls

    def run(with_hog: bool) -> list[tuple[CallTiming, float]]:
        stop = [False]
        hogs = [gevent.spawn(hog, stop)] if with_hog else []

        def calls() -> list[tuple[CallTiming, float]]:
            set_greenlet_label(CLIENT)
            out = []
            for _ in range(3):
                with measure_call() as measurement:
                    response = client.get(f"/{REPLY_MS}")
                landed, sent = map(int, response.body.split())
                assert measurement.timing is not None
                out.append((measurement.timing, (sent - landed) / 1e9))
            return out

        try:
            return gevent.spawn(calls).get(timeout=8)
        finally:
            stop[0] = True
            gevent.joinall(hogs)

    idle, hogged = run(with_hog=False), run(with_hog=True)
    for timing, true_network in idle + hogged:
        assert timing.network_s >= true_network - 0.001
        assert REPLY_MS / 1e3 <= timing.network_s <= timing.duration_s
    for timing, _ in hogged:
        assert timing.scheduling_delay_s > 0.010
        assert timing.top_culprits(1)[0][0] == HOG
    assert min(t.scheduling_delay_s for t, _ in hogged) > max(t.scheduling_delay_s for t, _ in idle)
    client.close()


def test_a_tls_reply_already_queued_at_the_first_read_is_network(
    instrumentor: GeventTimingInstrumentor, tls_upstream_port: int, tls_cert: tuple[str, str]
) -> None:
    """A TLS read that never waits is only seen by the hook on gevent's SSL ``read``."""
    raw = gsocket.create_connection(("127.0.0.1", tls_upstream_port))
    sock = tls_context(tls_cert[0]).wrap_socket(raw, server_hostname="127.0.0.1")

    def exchange(pause_s: float) -> float:
        sock.sendall(b"GET /%d HTTP/1.1\r\nHost: t\r\n\r\n" % REPLY_MS)
        gevent.sleep(pause_s)
        reply = b""
        while not reply.endswith(b"\n"):
            reply += sock.recv(4096)
        landed, sent = map(int, reply.split(b"\r\n\r\n", 1)[1].split())
        return (sent - landed) / 1e9

    def client() -> tuple[CallTiming, float]:
        # A kept-alive connection: the first read also took the TLS 1.3 session tickets
        # the server sent after the handshake (queued before any send, so their kernel
        # stamp dates nothing: see CallState.on_first_read).
        exchange(0)
        with measure_call() as measurement:
            true_network = exchange(0.120)
        assert measurement.timing is not None
        return measurement.timing, true_network

    with sock:
        timing, true_network = gevent.spawn(client).get(timeout=5)
    assert timing.socket_waits == 0
    assert true_network - 0.001 <= timing.network_s <= true_network + 0.015
    assert timing.blocked_s == pytest.approx(0.120 - timing.network_s, abs=0.010)
