"""Per-greenlet state of the server side, hung off a greenlet's tag (see ``labels``):
a connection's inbound watch, and the request its greenlet is handling. Fed by the socket
hooks and the switch tracer; read by ``server_timing``.
"""

from __future__ import annotations

from typing import Any, Final

#: Waits of the handler greenlet remembered per request; a handler that switches out
#: more often than this keeps only the first ones (its critical wait is then unexplained).
MAX_WAITS: Final = 64


class InboundWatch:
    """Per-connection state: waiting for a request's first bytes, or holding their arrival."""

    __slots__ = ("armed", "arrival_unix_ns", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.armed = True
        self.arrival_unix_ns: int | None = None


class RequestState:
    """Fed by the switch tracer while the request's handler greenlet runs."""

    __slots__ = ("in_ns", "out_ns", "running_ns", "waits")

    def __init__(self, now_ns: int) -> None:
        self.in_ns = now_ns
        self.out_ns = now_ns
        self.running_ns = 0
        self.waits: list[tuple[int, int]] = []

    def on_switch_out(self, now_ns: int) -> None:
        self.running_ns += now_ns - self.in_ns
        self.out_ns = now_ns

    def on_switch_in(self, now_ns: int) -> None:
        if len(self.waits) < MAX_WAITS:
            self.waits.append((self.out_ns, now_ns))
        self.in_ns = now_ns
