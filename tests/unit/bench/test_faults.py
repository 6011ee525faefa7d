"""The fault matrix's arithmetic (failures by method, recovery, the telemetry counters'
increases, the processes before and after) and its slow collector, on localhost."""

from __future__ import annotations

import socket
import threading
import time

from bench.faults import (
    FAULT_SLUGS,
    MATRIX,
    _telemetry_lost,
    failure_timeline,
    failures,
    process_change,
)
from bench.loadgen import Samples
from bench.throttle import ThrottleProxy

KINDS = ("offers.bike", "offers.rideshare")


def samples(rows: list[tuple[str, float, float, int]]) -> Samples:
    """(kind, due s, latency s, status) rows as the generator's columns."""
    out = Samples(kinds=KINDS)
    for kind, sent, latency, status in rows:
        out.kind.append(KINDS.index(kind))
        out.scheduled_s.append(sent)
        out.lag_s.append(0.0)
        out.latency_s.append(latency)
        out.status.append(status)
    return out


def test_every_fault_has_its_own_flag_name() -> None:
    assert len(set(FAULT_SLUGS)) == len(MATRIX) == 15
    assert {"sigkill-io-worker", "sigstop-envoy", "disk-full-span-file", "slow-collector"} <= set(
        FAULT_SLUGS
    )


def test_failures_split_by_method_and_the_posts_in_flight_at_a_kill() -> None:
    got = failures(
        samples(
            [
                ("offers.bike", 1.0, 0.1, 200),
                ("offers.bike", 10.2, 0.5, 503),  # a GET lost: never excused
                ("offers.rideshare", 9.0, 0.1, 0),  # sent within the CPU timeout before
                ("offers.rideshare", 2.0, 0.1, 503),  # long before the kill: not in flight
                ("offers.rideshare", 12.0, 0.1, 200),
            ]
        ),
        10.0,
        10.0,
        cpu_timeout_s=3.0,
        kill=True,
        total_s=20.0,
    )
    assert got["requests"] == {"get": 2, "post": 3}
    assert got["failed"] == {"get": 1, "post": 2, "post_in_flight": 1}
    assert got["failed_before"] == {"get": 0, "post": 2}  # the noise the fault adds to
    assert got["statuses"] == {"503": 2, "0": 1}
    assert got["recovery_s"] == 0.7  # the last failure ended at 10.7 s


def test_recovery_is_none_while_requests_still_fail_at_the_end() -> None:
    rows = [("offers.bike", 5.0, 0.1, 503), ("offers.bike", 19.5, 0.1, 503)]
    got = failures(samples(rows), 4.0, 6.0, cpu_timeout_s=3.0, kill=False, total_s=20.0)
    assert got["recovery_s"] is None
    quiet = failures(samples(rows[:1]), 4.0, 6.0, cpu_timeout_s=3.0, kill=False, total_s=20.0)
    assert quiet["recovery_s"] == 0.0  # failed during the fault only
    assert quiet["failed"]["post_in_flight"] == 0


def test_failure_timeline_counts_failures_per_bin() -> None:
    rows = [("offers.bike", 0.1, 0.1, 200), ("offers.bike", 1.2, 0.1, 0)]
    rows.append(("offers.bike", 1.4, 0.1, 503))
    assert failure_timeline(samples(rows), 0.5) == [0, 0, 2]


def test_telemetry_lost_is_the_increase_over_the_pools_that_answered_both_times() -> None:
    before = {"io": {"spans_dropped": 2.0, "spans_exported": 10.0}, "cpu": None}
    after = {"io": {"spans_exported": 30.0}, "cpu": {"spans_dropped": 1.0, "spans_exported": 5.0}}
    got = _telemetry_lost(before, after)
    assert got["spans_exported"] == 20.0
    assert got["spans_dropped"] is None  # no pool said it both times: unknown, not 0


def test_process_change_keeps_the_killed_and_the_new() -> None:
    before = {
        1: {"label": "envoy", "rss_kib": 100, "fds": 9},
        2: {"label": "w", "rss_kib": 5, "fds": 3},
    }
    after = {
        1: {"label": "envoy", "rss_kib": 110, "fds": 9},
        3: {"label": "w", "rss_kib": 4, "fds": 2},
    }
    rows = {r["pid"]: r for r in process_change(before, after)}
    assert rows[1]["rss_kib"] == [100, 110]
    assert rows[2]["rss_kib"] == [5, None] and rows[3]["fds"] == [None, 2]


def _sink() -> tuple[socket.socket, list[int]]:
    """A server that counts the bytes it receives."""
    server = socket.create_server(("127.0.0.1", 0))
    got = [0]

    def serve() -> None:
        conn, _ = server.accept()
        while data := conn.recv(65536):
            got[0] += len(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, got


def test_the_throttle_proxy_passes_everything_and_throttled_only_a_trickle() -> None:
    server, got = _sink()
    with ThrottleProxy(server.getsockname()) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        client.sendall(b"x" * 100_000)
        deadline = time.monotonic() + 5
        while got[0] < 100_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got[0] == 100_000  # unthrottled: all of it, at once
        proxy.rate_bps = 1000.0
        client.sendall(b"y" * 100_000)
        time.sleep(0.5)
        # Throttled: the chunk the pump was already waiting for (it then sleeps as long
        # as that chunk takes at the rate), and about 1000 B/s.
        assert got[0] - 100_000 < 16384 + 2000
        client.close()
    server.close()
