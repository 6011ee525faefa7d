"""A lean HTTP/1.1 keep-alive client for the upstream calls of the io pool.

Why not urllib3 or requests: an offer makes three upstream calls, and the io
pool's capacity is set by CPU per offer. Profiling (py-spy) showed urllib3
spending most of an offer's CPU on header parsing through `email`, a
zero-timeout "was the connection dropped?" poll before every reuse (a full
trip through the gevent loop), and timeout bookkeeping. Our upstreams speak
plain HTTP/1.1 with small JSON bodies, so one `sendall` and a few `recv`
per call are enough; `pricing.http1` frames what they return.

It is used under gevent (sockets from `gevent.socket`, cooperative without
monkey patching); the caller bounds each call with a gevent.Timeout.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from gevent import socket

from pricing.http1 import ProtocolError, ResponseParser

# Largest response head and body we accept from an upstream (bytes): a reply
# beyond it is a broken upstream, not something to buffer.
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
_RECV_CHUNK = 16 * 1024


class HttpClientError(Exception):
    """The exchange failed: connection refused or reset, or a malformed reply.

    ``reason`` names the failure in a few words (metrics labels, the client span's
    error.type): ``refused``, ``reset``, ``connect``, ``bad_response`` or ``error``.
    """

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.reason = reason


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "reset"
    return "error"


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
    __slots__ = ("reused", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
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
            reason = "refused" if isinstance(exc, ConnectionRefusedError) else "connect"
            raise HttpClientError(
                f"connect to {self.host}:{self.port}: {exc.strerror or exc}", reason
            ) from None
        sock.settimeout(None)  # the caller's gevent.Timeout bounds the call
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Connection(sock)

    def _on(self, conn: Connection, request: bytes) -> HttpResponse:
        clean = False
        try:
            try:
                conn.sock.sendall(request)
            except OSError as exc:
                if conn.reused:
                    raise _StaleConnection() from None
                raise HttpClientError(f"{type(exc).__name__}: {exc}", _os_reason(exc)) from None
            response, clean = _read_response(conn)
            return response
        finally:
            if clean and len(self._idle) < self.max_idle:
                conn.reused = True
                self._idle.append(conn)
            else:
                conn.close()


class _StaleConnection(Exception):
    pass


def _read_response(conn: Connection) -> tuple[HttpResponse, bool]:
    """The response, and whether the connection may carry another request."""
    parser = ResponseParser(max_head_bytes=MAX_HEAD_BYTES, max_body_bytes=MAX_BODY_BYTES)
    received = False
    try:
        while not parser.done:
            chunk = conn.sock.recv(_RECV_CHUNK)
            if not chunk:
                if not received and conn.reused:
                    raise _StaleConnection()
                parser.eof()
                break
            received = True
            parser.feed(chunk)
    except ProtocolError as exc:
        raise HttpClientError(str(exc), "bad_response") from None
    except OSError as exc:
        if not received and conn.reused:
            raise _StaleConnection() from None  # closed by the server while idle
        raise HttpClientError(f"{type(exc).__name__}: {exc}", _os_reason(exc)) from None
    response = HttpResponse(parser.status, parser.headers, bytes(parser.body))
    return response, parser.keep_alive and not parser.rest
