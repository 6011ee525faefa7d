"""The open-loop generator against a fake server on socketpairs (no network).

The point of an open loop: a server that stalls shows up as latency counted from
each request's scheduled time, while requests keep leaving on schedule; the rate
never drops to what the stalled server takes. The checks here are lower bounds
(a stall cannot make a request faster) or generous upper bounds on the
generator's own lateness, so a slow or busy machine cannot fail them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from bench.loadgen import CONNECTION_ERROR, TIMEOUT, Plan, plan_schedule, run_open_loop
from bench.schedule import Arrival, Polls, poll_schedule
from bench.traffic import PreparedRequest, Target, build_request

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
OK_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


def _request(path: str) -> PreparedRequest:
    raw = build_request("GET", path, "fake")
    head, _, body = raw.partition(b"\r\n\r\n")
    return PreparedRequest(head + b"\r\n", body)


def target(kind: str = "k", path: str = "/x") -> Target:
    return Target(kind, "fake", 1, (_request(path),))


def every(step_s: float, until_s: float, kind: str = "k") -> list[Arrival]:
    n = int(until_s / step_s)
    return [Arrival(i * step_s, kind, 0) for i in range(n)]


class FakeServer:
    """Serves each connection on its own thread. Requests for `hang_path` are never
    answered; every answer waits until `stall_until` (monotonic); `close_after`
    closes the connection after each answer (with or without saying so)."""

    def __init__(
        self,
        *,
        stall_until: float = 0.0,
        hang_path: bytes = b"/hang",
        close_after: bool = False,
        announce_close: bool = True,
    ) -> None:
        self.stall_until = stall_until
        self.hang_path = hang_path
        self.close_after = close_after
        self.announce_close = announce_close
        self.received: list[tuple[float, bytes]] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []

    def connect(self, _target: Target) -> socket.socket:
        client, server = socket.socketpair()
        client.setblocking(False)
        with self._lock:
            self.connections += 1
            self._socks.append(server)
        threading.Thread(target=self._serve, args=(server,), daemon=True).start()
        return client

    def _serve(self, sock: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                with self._lock:
                    self.received.append((time.monotonic(), head))
                if head.split(b" ")[1] == self.hang_path:
                    while sock.recv(65536):  # until the client gives up and closes
                        pass
                    return
                wait = self.stall_until - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if self.close_after:
                    sock.sendall(OK_CLOSE if self.announce_close else OK)
                    return
                sock.sendall(OK)
        except OSError:
            return
        finally:
            sock.close()

    def close(self) -> None:
        with self._lock:
            for s in self._socks:
                s.close()


@pytest.fixture
def server_factory() -> Iterator[list[FakeServer]]:
    made: list[FakeServer] = []
    yield made
    for s in made:
        s.close()


def test_a_stalled_server_shows_as_latency_not_as_a_lower_rate(
    server_factory: list[FakeServer],
) -> None:
    start_at = time.monotonic() + 0.05
    stall_s = 0.6
    server = FakeServer(stall_until=start_at + stall_s)
    server_factory.append(server)
    schedule = every(0.02, 1.2)  # 60 requests, 50/s
    samples, opened = run_open_loop(
        schedule, [target()], start_at, timeout_s=5.0, connect=server.connect
    )
    assert len(samples) == len(schedule)
    assert set(samples.status) == {200}
    # Latency is counted from the scheduled time: a request due at t waited at least
    # until the stall ended.
    for a, latency in zip(schedule, samples.latency_s, strict=True):
        if a.at_s < stall_s:
            assert latency >= stall_s - a.at_s - 0.005
    # ...and requests kept leaving on schedule while the server stalled: every one
    # reached the server close to its due time (a closed loop would have sent one).
    received = sorted(t for t, _ in server.received)
    assert len(received) == len(schedule)
    during_stall = [t for t in received if t < start_at + stall_s]
    assert len(during_stall) >= 0.8 * stall_s / 0.02
    # The generator never waited for the stalled server: its own lateness stays well
    # below the stall (a closed loop is late by the whole stall). How late it is on a
    # quiet machine is a figure (the benchmark reports the generator's lag), not this.
    assert max(samples.lag_s) < stall_s / 2, max(samples.lag_s)
    # One connection per request in flight: the stall forced new connections.
    assert opened >= len(during_stall)


def test_a_late_generator_counts_its_own_lateness_as_latency(
    server_factory: list[FakeServer],
) -> None:
    server = FakeServer()
    server_factory.append(server)
    # The run "started" half a second ago: everything due before now is late.
    start_at = time.monotonic() - 0.5
    schedule = every(0.05, 0.8)
    samples, _ = run_open_loop(schedule, [target()], start_at, 5.0, connect=server.connect)
    for a, lag, latency in zip(schedule, samples.lag_s, samples.latency_s, strict=True):
        if a.at_s < 0.45:
            assert lag >= 0.5 - a.at_s - 0.01
            assert latency >= lag


def test_an_unanswered_request_times_out_at_its_deadline(
    server_factory: list[FakeServer],
) -> None:
    server = FakeServer()
    server_factory.append(server)
    targets = [target("hang", "/hang"), target("ok", "/ok")]
    schedule = [Arrival(0.0, "hang", 0), Arrival(0.01, "ok", 0)]
    samples, _ = run_open_loop(
        schedule, targets, time.monotonic(), timeout_s=0.3, connect=server.connect
    )
    by_kind = {
        samples.kinds[k]: (s, lat)
        for k, s, lat in zip(samples.kind, samples.status, samples.latency_s, strict=True)
    }
    status, latency = by_kind["hang"]
    assert status == TIMEOUT
    assert latency >= 0.3
    assert by_kind["ok"][0] == 200


def test_keep_alive_connections_are_reused(server_factory: list[FakeServer]) -> None:
    server = FakeServer()
    server_factory.append(server)
    schedule = every(0.03, 0.3)
    samples, opened = run_open_loop(
        schedule, [target()], time.monotonic(), 5.0, connect=server.connect
    )
    assert set(samples.status) == {200}
    assert opened == 1


@pytest.mark.parametrize("announce", [True, False])
def test_a_connection_the_server_closes_is_not_reused(
    server_factory: list[FakeServer], announce: bool
) -> None:
    server = FakeServer(close_after=True, announce_close=announce)
    server_factory.append(server)
    schedule = every(0.03, 0.3)
    samples, opened = run_open_loop(
        schedule, [target()], time.monotonic(), 5.0, connect=server.connect
    )
    assert set(samples.status) == {200}
    assert opened == len(schedule)


def test_connect_failure_is_counted_not_raised() -> None:
    def refuse(_t: Target) -> socket.socket:
        raise ConnectionRefusedError(111, "refused")

    samples, _ = run_open_loop(every(0.01, 0.05), [target()], time.monotonic(), 1.0, connect=refuse)
    assert set(samples.status) == {CONNECTION_ERROR}


def test_tracing_sends_one_fresh_traceparent_per_request(
    server_factory: list[FakeServer],
) -> None:
    server = FakeServer()
    server_factory.append(server)
    schedule = every(0.01, 0.1)
    samples, _ = run_open_loop(
        schedule, [target()], time.monotonic(), 5.0, trace=True, connect=server.connect
    )
    sent = set()
    for _, head in server.received:
        line = next(x for x in head.split(b"\r\n") if x.startswith(b"traceparent:"))
        sent.add(line.split(b"-")[1].decode())
    assert sent == set(samples.trace_id)
    assert len(sent) == len(schedule)


def test_a_run_asked_to_end_sends_nothing_more_and_keeps_what_it_sent(
    server_factory: list[FakeServer],
) -> None:
    server = FakeServer()
    server_factory.append(server)
    start_at = time.monotonic()
    schedule = every(0.02, 2.0)  # 100 requests over 2 s
    samples, _ = run_open_loop(
        schedule,
        [target()],
        start_at,
        5.0,
        connect=server.connect,
        ending=lambda: time.monotonic() > start_at + 0.3,
    )
    # About 0.3 s of the 2 s schedule went out (generous bounds: a busy machine).
    assert 5 <= len(samples) <= 60, len(samples)
    assert len(server.received) == len(samples)
    assert set(samples.status) == {200}
    assert samples.scheduled_s == [a.at_s for a in schedule[: len(samples)]]


def test_a_plan_with_polls_goes_through_json_and_schedules_them() -> None:
    plan = Plan(
        targets=(target("offers.bike"),),
        rates_rps={},
        duration_s=10.0,
        seed=2,
        timeout_s=1.0,
        polls=Polls(4, 2.0, ("offers.bike",)),
    )
    again = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    assert plan_schedule(again) == poll_schedule(Polls(4, 2.0, ("offers.bike",)), 10.0, 2)
