"""Fixtures of the timing core's tests: a kernel-stamped socket."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tracing.timing import kernel_rx


@pytest.fixture
def stamped_socket() -> Iterator[socket.socket]:
    """A TCP socket with one byte queued and its kernel receive stamp.

    The kernel turns receive stamping on for the whole host a moment after the first
    socket asks (deferred work): a byte that arrives in between has no stamp, and never
    gets one. So a fresh connection is tried until its byte comes stamped."""
    kernel_rx.hold_timestamping()
    for _ in range(50):
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        listener.close()
        kernel_rx.enable_rx_timestamps(client)
        server.sendall(b"x")
        client.setblocking(False)
        for _ in range(20):
            if kernel_rx.peek_arrival_ns(client) is not None:
                break
            time.sleep(0.005)
        if kernel_rx.peek_arrival_ns(client) is not None:
            break
        client.close()
        server.close()
    yield client
    client.close()
    server.close()
