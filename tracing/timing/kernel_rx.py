"""When did bytes arrive in the kernel? Receive timestamps, peeked or read with the data.

With ``SO_TIMESTAMPNS`` on, Linux stamps every received segment (CLOCK_REALTIME, in ns);
``recvmsg(..., MSG_PEEK)`` of one byte returns the stamp of the first queued segment and
leaves the data for the real read; a real read done with ``recvmsg`` returns the stamp
of the newest segment it took, with no syscall more than ``recv`` (``recv_stamped``).
The option must be on BEFORE the bytes arrive: set it when the socket connects.
Segments the kernel merged report the LAST one's arrival.

Linux stamps received segments only while some socket on the host wants stamps, and turns
that on lazily (a deferred static key) when the first one asks and off when the last one
closes: a connection opened during that gap misses stamps on its first bytes (5 of 200
fresh connections here). :func:`hold_timestamping` keeps one socket asking for the life of
the process.

For connects there is no data to stamp: ``TCP_INFO``'s ``tcpi_last_ack_recv`` (ms since
the last ACK, in jiffies: 4 ms steps at HZ=250) bounds when the handshake completed.

All functions take the raw, non-blocking OS socket (``gevent_socket._sock``) and never
block. The peek returns None rather than raise: a failed connection is the real read's
business to report. The stamped reads are the real read (``recvmsg`` in place of
``recv``, its stamp beside the bytes), and raise what it raises.
"""

from __future__ import annotations

import socket
import struct
from typing import Any, Final

# Linux values; Python 3.11's socket module does not export them. 35 is
# SO_TIMESTAMPNS_OLD, whose payload is a native struct timespec (two longs on 64-bit).
SO_TIMESTAMPNS: Final = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SPACE: Final = socket.CMSG_SPACE(_TIMESPEC.size)
_PEEK_FLAGS: Final = socket.MSG_PEEK | socket.MSG_DONTWAIT
_DONTWAIT: Final = socket.MSG_DONTWAIT

# struct tcp_info: 8 bytes of u8 fields, then u32s; tcpi_last_ack_recv is the 15th u32.
_TCP_INFO_LAST_ACK_RECV_OFFSET: Final = 56
_TCP_INFO_LEN: Final = 64
_U32 = struct.Struct("=I")

#: Resolution of ``tcpi_last_ack_recv``: one jiffy at HZ=250, the coarsest common kernel
#: setting (ns). Estimates derived from it are rounded down by this much.
TCP_INFO_RESOLUTION_NS: Final = 4_000_000


_holder: socket.socket | None = None


def hold_timestamping() -> None:
    """Keep the kernel's receive stamping switched on (idempotent): one idle UDP socket."""
    global _holder
    if _holder is None:
        from gevent.monkey import get_original

        (os_socket,) = get_original("socket", ["socket"])
        holder = os_socket(socket.AF_INET, socket.SOCK_DGRAM)
        enable_rx_timestamps(holder)
        _holder = holder


def release_timestamping() -> None:
    global _holder
    holder, _holder = _holder, None
    if holder is not None:
        holder.close()


def enable_rx_timestamps(raw_sock: socket.socket) -> None:
    """Ask the kernel to stamp segments received on *raw_sock* from now on."""
    raw_sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def peek_arrival_ns(raw_sock: socket.socket) -> int | None:
    """Return the CLOCK_REALTIME arrival (ns) of the first unread byte, or None.

    None means: nothing queued (or EOF), or no stamp because the option was off when the
    data arrived; in the latter case the option is switched on for the next time.
    """
    try:
        data, ancillary, _flags, _addr = raw_sock.recvmsg(1, _ANCILLARY_SPACE, _PEEK_FLAGS)
    except OSError:
        # Nothing queued (EAGAIN), or the connection failed: the real read reports that.
        return None
    return stamp_of(raw_sock, bool(data), ancillary)


def recv_stamped(raw_sock: socket.socket, bufsize: int) -> tuple[bytes, list[Any]]:
    """``raw_sock.recv(bufsize)`` that also returns the ancillary data with the stamp the
    kernel gave the bytes read (:func:`stamp_of`), in the same syscall: no peek before the
    read. For TCP the stamp is that of the newest segment the read took: for a reply in
    one segment (or read as it arrives) the same as a peek's. Raises what the read raises
    (``BlockingIOError`` when nothing is queued)."""
    data, ancillary, _flags, _addr = raw_sock.recvmsg(bufsize, _ANCILLARY_SPACE, _DONTWAIT)
    return data, ancillary


def recv_into_stamped(
    raw_sock: socket.socket, buffer: memoryview, nbytes: int
) -> tuple[int, list[Any]]:
    """``raw_sock.recv_into(buffer, nbytes)`` with the ancillary data, as :func:`recv_stamped`."""
    count, ancillary, _flags, _addr = raw_sock.recvmsg_into(
        [buffer[:nbytes] if nbytes else buffer], _ANCILLARY_SPACE, _DONTWAIT
    )
    return count, ancillary


def stamp_of(raw_sock: socket.socket, got_data: bool, ancillary: list[Any]) -> int | None:
    """The receive stamp (CLOCK_REALTIME ns) in *ancillary*, or None; data that came
    without one switches the option on for the next time."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
            return int(seconds * 1_000_000_000 + nanoseconds)
    if got_data:
        enable_rx_timestamps(raw_sock)
    return None


def last_ack_age_ns(raw_sock: socket.socket) -> int | None:
    """Return how long ago the last TCP ACK arrived on *raw_sock* (ns, +- one jiffy)."""
    try:
        info = raw_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    except OSError:
        return None  # not a TCP socket
    if len(info) < _TCP_INFO_LAST_ACK_RECV_OFFSET + 4:
        return None
    (age_ms,) = _U32.unpack_from(info, _TCP_INFO_LAST_ACK_RECV_OFFSET)
    return age_ms * 1_000_000
