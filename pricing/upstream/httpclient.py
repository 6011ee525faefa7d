"""A lean HTTP/1.1 keep-alive client for the upstream calls of the io pool.

Why not urllib3 or requests: an offer makes three upstream calls, and the io
pool's capacity is set by CPU per offer. Profiling (py-spy) showed urllib3
spending most of an offer's CPU on header parsing through `email`, a
zero-timeout "was the connection dropped?" poll before every reuse (a full
trip through the gevent loop), and timeout bookkeeping. Our upstreams speak
plain HTTP/1.1 with small JSON bodies, so one `sendall` and a few `recv`
per call are enough; `pricing.upstream.http1` frames what they return. Measured against
geventhttpclient and urllib3 in the real stack (`pricingctl bench http-client`,
BENCHMARKS.md): 1.1-1.4 x less io CPU per call than geventhttpclient, 1.7 x less than
urllib3, and it held 175 offers/s on one io worker where geventhttpclient collapsed.

It is used under gevent (sockets from `gevent.socket` and `gevent.ssl`, cooperative
without monkey patching); the caller bounds each call with a gevent.Timeout. An
`https://` upstream is verified against the system's CAs or a given CA bundle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from gevent import socket, ssl

from pricing.upstream.http1 import ProtocolError, ResponseParser
from toolkit.contract import JSON

# Largest response head and body we accept from an upstream (bytes): a reply
# beyond it is a broken upstream, not something to buffer.
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
_RECV_CHUNK = 16 * 1024


class HttpClientError(Exception):
    """The exchange failed: connection refused or reset, TLS refused, or a malformed reply.

    ``reason`` names the failure in a few words (metrics labels, the client span's
    error.type): ``refused``, ``reset``, ``connect``, ``tls``, ``bad_response`` or ``error``.
    """

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.reason = reason


def os_failure_reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "reset"
    return "error"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an upstream lives: scheme, host and port, from its base URL."""

    scheme: str
    host: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> Origin:
        parts = urlsplit(url)
        scheme = parts.scheme.lower() or "http"
        if scheme not in ("http", "https"):
            raise ValueError(f"upstream URL {url!r}: scheme must be http or https")
        default_port = 443 if scheme == "https" else 80
        return cls(scheme, parts.hostname or "127.0.0.1", parts.port or default_port)

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Certificate and host name verified; `ca_file` (PEM) replaces the system's CAs.

    gevent's own SSLContext, built by hand: `gevent.ssl.create_default_context` is the
    standard library's, whose sockets would block the whole hub during the handshake.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and name
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    else:
        context.load_default_certs()
    return context


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

    `tracing.client.TracingCallObserver` is one; pricing does not import it. The
    arguments are positional (the compiled observer takes them so).
    """

    def call(
        self, upstream: str, method: str, host: str, port: int, path: str, /
    ) -> AbstractContextManager[Observed]: ...


class ObservedCall:
    __slots__ = ("headers", "status")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.status: int | None = None


class NullObserver:
    """The default: no tracing, no extra headers."""

    def call(
        self, upstream: str, method: str, host: str, port: int, path: str, /
    ) -> AbstractContextManager[Observed]:
        return _null_call()


@contextmanager
def _null_call() -> Iterator[Observed]:
    yield ObservedCall()


class Connection:
    __slots__ = ("reused", "sock")

    def __init__(self, sock: socket.socket | ssl.SSLSocket) -> None:
        self.sock = sock
        self.reused = False

    def close(self) -> None:
        self.sock.close()


class HostClient:
    """Keep-alive connections to one origin, at most `max_idle` kept idle."""

    def __init__(
        self,
        name: str,
        origin: Origin,
        max_idle: int,
        observer: CallObserver | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.name = name
        self.origin = origin
        self.host = origin.host
        self.port = origin.port
        self.max_idle = max_idle
        self.observer: CallObserver = observer or NullObserver()
        self._idle: list[Connection] = []
        self._host_header = origin.host_header
        self._tls = tls_context(ca_file) if origin.tls else None
        # The origin's address, resolved once and again only after a failed connect: a
        # call killed at its deadline closes its connection, and resolving on every
        # reconnect costs the hub a getaddrinfo each time (measured 169 us for a numeric
        # address under gevent), just when it is busiest.
        self._address: tuple[int, Any] | None = None

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    def get(self, path: str, connect_timeout_s: float = 1.0) -> HttpResponse:
        """GET `path`; retried once on a fresh connection when a reused one was stale."""
        return self.request("GET", path, connect_timeout_s)

    def request(self, method: str, path: str, connect_timeout_s: float = 1.0) -> HttpResponse:
        """A body-less GET or HEAD (both safe to send again on a fresh connection)."""
        if method not in ("GET", "HEAD"):
            raise ValueError(f"only GET and HEAD are supported, not {method}")
        with self.observer.call(self.name, method, self.host, self.port, path) as observed:
            extra = "".join(f"{k}: {v}\r\n" for k, v in observed.headers.items())
            request = (
                f"{method} {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                f"Accept: {JSON}\r\n{extra}\r\n"
            ).encode("latin-1")
            response = self._exchange(request, method == "HEAD", connect_timeout_s)
            observed.status = response.status
            return response

    def _exchange(self, request: bytes, head: bool, connect_timeout_s: float) -> HttpResponse:
        conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                return self._on(conn, request, head)
            except _StaleConnection:
                pass  # the server closed it while idle; GET is safe to send again
        return self._on(self._connect(connect_timeout_s), request, head)

    def _resolved(self) -> tuple[int, Any]:
        if self._address is None:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                self.host, self.port, 0, socket.SOCK_STREAM
            )[0]
            self._address = (family, sockaddr)
        return self._address

    def _connect(self, timeout_s: float) -> Connection:
        sock = None
        try:
            family, sockaddr = self._resolved()
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            sock.connect(sockaddr)
        except OSError as exc:
            if sock is not None:
                sock.close()
            self._address = None  # resolved again next time: the name may have moved
            reason = "refused" if isinstance(exc, ConnectionRefusedError) else "connect"
            raise HttpClientError(
                f"connect to {self.host}:{self.port}: {exc.strerror or exc}", reason
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            sock.settimeout(None)  # the caller's gevent.Timeout bounds the call
            return Connection(sock)
        try:
            tls = self._tls.wrap_socket(sock, server_hostname=self.host)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise HttpClientError(f"TLS with {self.host}:{self.port}: {exc}", "tls") from None
        tls.settimeout(None)
        return Connection(tls)

    def _on(self, conn: Connection, request: bytes, head: bool) -> HttpResponse:
        clean = False
        try:
            try:
                conn.sock.sendall(request)
            except OSError as exc:
                if conn.reused:
                    raise _StaleConnection() from None
                raise HttpClientError(
                    f"{type(exc).__name__}: {exc}", os_failure_reason(exc)
                ) from None
            response, clean = _read_response(conn, head)
            return response
        finally:
            if clean and len(self._idle) < self.max_idle:
                conn.reused = True
                self._idle.append(conn)
            else:
                conn.close()


class _StaleConnection(Exception):
    pass


def _read_response(conn: Connection, head: bool) -> tuple[HttpResponse, bool]:
    """The response, and whether the connection may carry another request."""
    parser = ResponseParser(
        max_head_bytes=MAX_HEAD_BYTES, max_body_bytes=MAX_BODY_BYTES, head_request=head
    )
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
        raise HttpClientError(f"{type(exc).__name__}: {exc}", os_failure_reason(exc)) from None
    response = HttpResponse(parser.status, parser.headers, bytes(parser.body))
    return response, parser.keep_alive and not parser.rest
