"""A lean HTTP/1.1 keep-alive client for the upstream calls of the io pool.

Why not urllib3 or requests: an offer makes three upstream calls, and the io
pool's capacity is set by CPU per offer. Profiling (py-spy) showed urllib3
spending most of an offer's CPU on header parsing through `email`, a
zero-timeout "was the connection dropped?" poll before every reuse (a full
trip through the gevent loop), and timeout bookkeeping. Our upstreams speak
plain HTTP/1.1 with small JSON bodies, so one `sendall` and a few `recv_into`
per call are enough.

It is used under gevent (sockets from `gevent.socket`, cooperative without
monkey patching); the caller bounds each call with a gevent.Timeout.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from gevent import socket

# Largest response head and body we accept from an upstream (bytes): a reply
# beyond it is a broken upstream, not something to buffer.
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
_RECV_CHUNK = 16 * 1024


class HttpClientError(Exception):
    """The exchange failed: connection refused or reset, or a malformed reply."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class Observed(Protocol):
    """What an observer hands back for one call: headers to add, and the status it
    is told once the reply arrived."""

    headers: dict[str, str]
    status: int | None


class CallObserver(Protocol):
    """Hook for tracing: wraps each call, may add headers (traceparent).

    `tracing.client.TracingCallObserver` is one; pricing does not import it.
    """

    def call(
        self, upstream: str, method: str, host: str, port: int, path: str
    ) -> AbstractContextManager[Observed]: ...


class ObservedCall:
    __slots__ = ("headers", "status")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.status: int | None = None


class NullObserver:
    """The default: no tracing, no extra headers."""

    def call(
        self, upstream: str, method: str, host: str, port: int, path: str
    ) -> AbstractContextManager[Observed]:
        return _null_call()


@contextmanager
def _null_call() -> Iterator[Observed]:
    yield ObservedCall()


class Connection:
    __slots__ = ("buffer", "reused", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.reused = False

    def close(self) -> None:
        self.sock.close()


class HostClient:
    """Keep-alive connections to one host:port, at most `max_idle` kept idle."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        max_idle: int,
        observer: CallObserver | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.max_idle = max_idle
        self.observer: CallObserver = observer or NullObserver()
        self._idle: list[Connection] = []
        self._host_header = f"{host}:{port}"

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    def get(self, path: str, connect_timeout_s: float = 1.0) -> HttpResponse:
        """GET `path`; retried once on a fresh connection when a reused one was stale."""
        with self.observer.call(self.name, "GET", self.host, self.port, path) as observed:
            extra = "".join(f"{k}: {v}\r\n" for k, v in observed.headers.items())
            request = (
                f"GET {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                f"Accept: application/json\r\n{extra}\r\n"
            ).encode("latin-1")
            response = self._exchange(request, connect_timeout_s)
            observed.status = response.status
            return response

    def _exchange(self, request: bytes, connect_timeout_s: float) -> HttpResponse:
        conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                return self._on(conn, request)
            except _StaleConnection:
                pass  # the server closed it while idle; GET is safe to send again
        return self._on(self._connect(connect_timeout_s), request)

    def _connect(self, timeout_s: float) -> Connection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        except OSError as exc:
            raise HttpClientError(
                f"connect to {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        sock.settimeout(None)  # the caller's gevent.Timeout bounds the call
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Connection(sock)

    def _on(self, conn: Connection, request: bytes) -> HttpResponse:
        clean = False
        try:
            conn.sock.sendall(request)
            response, keep_alive = _read_response(conn)
            clean = keep_alive and not conn.buffer
            return response
        except _StaleConnection:
            raise
        except OSError as exc:
            if conn.reused and not conn.buffer:
                raise _StaleConnection() from None
            raise HttpClientError(f"{type(exc).__name__}: {exc}") from None
        finally:
            if clean and len(self._idle) < self.max_idle:
                conn.reused = True
                self._idle.append(conn)
            else:
                conn.close()


class _StaleConnection(Exception):
    pass


def _read_response(conn: Connection) -> tuple[HttpResponse, bool]:
    buf = conn.buffer
    head_end = buf.find(b"\r\n\r\n")
    while head_end < 0:
        if len(buf) > MAX_HEAD_BYTES:
            raise HttpClientError("response head too large")
        chunk = conn.sock.recv(_RECV_CHUNK)
        if not chunk:
            if not buf and conn.reused:
                raise _StaleConnection()
            raise HttpClientError("connection closed before the response head")
        buf += chunk
        head_end = buf.find(b"\r\n\r\n")
    head = bytes(buf[:head_end]).decode("latin-1")
    del buf[: head_end + 4]
    lines = head.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpClientError(f"malformed status line {lines[0][:80]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpClientError(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    keep_alive = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(conn)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HttpClientError("malformed content-length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise HttpClientError(f"content-length {length} out of bounds")
        body = _read_exactly(conn, length)
    else:
        body = _read_until_close(conn)
        keep_alive = False
    return HttpResponse(status, headers, body), keep_alive


def _fill(conn: Connection, at_least: int) -> None:
    buf = conn.buffer
    while len(buf) < at_least:
        chunk = conn.sock.recv(max(_RECV_CHUNK, at_least - len(buf)))
        if not chunk:
            raise HttpClientError("connection closed in the middle of the response body")
        buf += chunk


def _read_exactly(conn: Connection, length: int) -> bytes:
    _fill(conn, length)
    body = bytes(conn.buffer[:length])
    del conn.buffer[:length]
    return body


def _read_chunked(conn: Connection) -> bytes:
    body = bytearray()
    while True:
        line_end = conn.buffer.find(b"\r\n")
        while line_end < 0:
            _fill(conn, len(conn.buffer) + 1)
            line_end = conn.buffer.find(b"\r\n")
        try:
            size = int(bytes(conn.buffer[:line_end]).split(b";")[0], 16)
        except ValueError:
            raise HttpClientError("malformed chunk size") from None
        del conn.buffer[: line_end + 2]
        if size == 0:
            _fill(conn, 2)  # no trailers expected from our upstreams
            del conn.buffer[:2]
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise HttpClientError("chunked body too large")
        _fill(conn, size + 2)
        body += conn.buffer[:size]
        del conn.buffer[: size + 2]


def _read_until_close(conn: Connection) -> bytes:
    buf = conn.buffer
    while True:
        chunk = conn.sock.recv(_RECV_CHUNK)
        if not chunk:
            body = bytes(buf)
            buf.clear()
            return body
        buf += chunk
        if len(buf) > MAX_BODY_BYTES:
            raise HttpClientError("body too large")
