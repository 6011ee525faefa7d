"""Kernel receive timestamps on a real loopback TCP connection (plain sockets)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tracing.timing import kernel_rx


@pytest.fixture(scope="module", autouse=True)
def _stamping_on() -> Iterator[None]:
    kernel_rx.hold_timestamping()
    time.sleep(0.05)  # the kernel switches stamping on from a work queue
    yield
    kernel_rx.release_timestamping()


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    client.setblocking(False)
    yield client, server
    client.close()
    server.close()


def test_peek_dates_the_arrival_without_consuming(tcp_pair: tuple[socket.socket, ...]) -> None:
    client, server = tcp_pair
    kernel_rx.enable_rx_timestamps(client)
    before = time.time_ns()
    server.sendall(b"reply")
    after = time.time_ns()
    time.sleep(0.02)  # the stamp is the arrival, not the moment we look
    arrival = kernel_rx.peek_arrival_ns(client)
    assert arrival is not None
    assert before <= arrival <= after
    assert kernel_rx.peek_arrival_ns(client) == arrival  # peeking again: same stamp
    assert client.recv(100) == b"reply"  # nothing consumed


def test_nothing_queued_is_none(tcp_pair: tuple[socket.socket, ...]) -> None:
    client, _ = tcp_pair
    kernel_rx.enable_rx_timestamps(client)
    assert kernel_rx.peek_arrival_ns(client) is None


def test_option_set_too_late_gives_no_stamp_but_is_switched_on(
    tcp_pair: tuple[socket.socket, ...],
) -> None:
    client, server = tcp_pair
    server.sendall(b"early")
    time.sleep(0.01)
    assert kernel_rx.peek_arrival_ns(client) is None
    assert client.getsockopt(socket.SOL_SOCKET, kernel_rx.SO_TIMESTAMPNS) == 1
    client.recv(100)
    server.sendall(b"later")
    time.sleep(0.01)
    assert kernel_rx.peek_arrival_ns(client) is not None


def test_closed_socket_is_none_not_an_error(tcp_pair: tuple[socket.socket, ...]) -> None:
    client, _ = tcp_pair
    client.close()
    assert kernel_rx.peek_arrival_ns(client) is None


def test_stamping_is_held_by_one_socket() -> None:
    kernel_rx.hold_timestamping()
    holder = kernel_rx._holder
    kernel_rx.hold_timestamping()
    assert kernel_rx._holder is holder is not None


def test_last_ack_age_on_tcp_only(tcp_pair: tuple[socket.socket, ...]) -> None:
    client, _ = tcp_pair
    time.sleep(0.05)
    age = kernel_rx.last_ack_age_ns(client)
    assert age is not None
    assert 0.05e9 - kernel_rx.TCP_INFO_RESOLUTION_NS <= age <= 5e9
    a, b = socket.socketpair()
    with a, b:
        assert kernel_rx.last_ack_age_ns(a) is None
