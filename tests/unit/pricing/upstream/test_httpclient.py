"""The lean upstream client against a real loopback server (gevent, no monkey patching)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gevent
import pytest
from gevent import ssl
from gevent.server import StreamServer

from pricing.domain.deadline import Deadline
from pricing.upstream.gateway import Call, HttpGateway, UpstreamSpec
from pricing.upstream.httpclient import HostClient, HttpClientError, Origin


def server_tls(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def local(port: int, scheme: str = "http") -> Origin:
    return Origin(scheme, "127.0.0.1", port)


def ok(body: bytes = b'{"a":1}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Server:
    def __init__(
        self, reply: Callable[[bytes, int], bytes | None], tls: tuple[str, str] | None = None
    ) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        tls_args = {} if tls is None else {"ssl_context": server_tls(*tls)}
        self.server = StreamServer(("127.0.0.1", 0), self._handle, **tls_args)
        self.server.start()
        self.port = self.server.server_port

    def _handle(self, sock: object, _addr: object) -> None:
        self.connections += 1
        buf = b""
        while True:
            chunk = sock.recv(65536)  # type: ignore[attr-defined]
            if not chunk:
                return
            buf += chunk
            while b"\r\n\r\n" in buf:
                request, buf = buf.split(b"\r\n\r\n", 1)
                self.requests.append(request)
                out = self.reply(request, len(self.requests))
                if out is None:
                    sock.close()  # type: ignore[attr-defined]
                    return
                sock.sendall(out)  # type: ignore[attr-defined]


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(
        reply: Callable[[bytes, int], bytes | None], tls: tuple[str, str] | None = None
    ) -> Server:
        server = Server(reply, tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.server.stop()


def test_content_length_and_keep_alive(serve: Callable[..., Server]) -> None:
    server = serve(lambda req, n: ok(b'{"n":%d}' % n))
    client = HostClient("t", local(server.port), max_idle=4)
    for n in (1, 2, 3):
        response = client.get(f"/x?n={n}")
        assert (response.status, response.body) == (200, b'{"n":%d}' % n)
    assert server.connections == 1  # one kept-alive connection served all three
    assert server.requests[0].startswith(b"GET /x?n=1 HTTP/1.1\r\nHost: 127.0.0.1:")


def test_chunked_body(serve: Callable[..., Server]) -> None:
    body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    server = serve(lambda req, n: body)
    client = HostClient("t", local(server.port), max_idle=4)
    assert client.get("/").body == b"abcde"
    assert client.get("/").body == b"abcde"
    assert server.connections == 1


def test_stale_idle_connection_is_retried_once(serve: Callable[..., Server]) -> None:
    # The server answers, then closes the kept-alive connection before the next request.
    server = serve(lambda req, n: ok() if n % 2 else None)
    client = HostClient("t", local(server.port), max_idle=4)
    assert client.get("/").status == 200
    gevent.sleep(0.01)
    # The reused connection is dead: request 2 hits a closed socket and the client
    # retries on a fresh connection, which the server answers (request 3).
    assert client.get("/").status == 200
    assert server.connections == 2


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"SPDY/9 200 OK\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "closed in the middle"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "malformed content-length"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 20000, "response head too large"),
        (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", "malformed header line"),
        (b"", "closed before the response head"),
    ],
)
def test_broken_replies_are_client_errors(reply: bytes, message: str) -> None:
    def answer_then_close(sock: object, _addr: object) -> None:
        sock.recv(65536)  # type: ignore[attr-defined]
        sock.sendall(reply)  # type: ignore[attr-defined]
        sock.close()  # type: ignore[attr-defined]

    server = StreamServer(("127.0.0.1", 0), answer_then_close)
    server.start()
    try:
        client = HostClient("t", local(server.server_port), max_idle=4)
        with pytest.raises(HttpClientError, match=message) as info, gevent.Timeout(3):
            client.get("/")
        assert info.value.reason == "bad_response"
        assert client.idle_connections == 0
    finally:
        server.stop()


def test_refused_connection_is_a_client_error() -> None:
    server = StreamServer(("127.0.0.1", 0), lambda s, a: None)
    server.start()
    port = server.server_port
    server.stop()
    with pytest.raises(HttpClientError, match=r"connect to 127\.0\.0\.1") as info:
        HostClient("t", local(port), max_idle=1).get("/")
    assert info.value.reason == "refused"  # a metrics label and the span's error.type


def test_a_connection_interrupted_by_a_timeout_is_not_reused(serve: Callable[..., Server]) -> None:
    server = serve(lambda req, n: (gevent.sleep(0.5), ok())[1] if n == 1 else ok())
    client = HostClient("t", local(server.port), max_idle=4)
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.1):
        client.get("/slow")
    assert client.idle_connections == 0
    assert client.get("/fast").status == 200


def test_reconnects_after_timeouts_resolve_the_address_once(
    serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call killed at its deadline closes its connection; the next one reconnects
    without a getaddrinfo (resolving costs the hub, most when it is busiest)."""
    from gevent import socket

    resolved: list[object] = []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: resolved.append(a) or real(*a, **k))
    server = serve(lambda req, n: (gevent.sleep(0.5), ok())[1] if n % 2 else ok())
    client = HostClient("t", local(server.port), max_idle=4)
    for _ in range(3):
        with pytest.raises(gevent.Timeout), gevent.Timeout(0.1):
            client.get("/slow")
        assert client.get("/fast").status == 200
    assert server.connections >= 3
    assert len(resolved) == 1


def test_a_failed_connect_resolves_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from gevent import socket

    resolved: list[object] = []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: resolved.append(a) or real(*a, **k))
    server = StreamServer(("127.0.0.1", 0), lambda s, a: None)
    server.start()
    port = server.server_port
    server.stop()
    client = HostClient("t", local(port), max_idle=1)
    for _ in range(2):
        with pytest.raises(HttpClientError):
            client.get("/")
    assert len(resolved) == 2


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b'HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n',
        # A body-less status with a stray Transfer-Encoding: still no body (RFC 9112 6.3).
        b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    ],
)
def test_a_reply_without_body_ends_at_its_head_and_keeps_the_connection(
    serve: Callable[..., Server], head: bytes
) -> None:
    # No Content-Length and the server keeps the connection open: reading until the
    # close would hang until the timeout.
    server = serve(lambda req, n: head)
    client = HostClient("t", local(server.port), max_idle=4)
    with gevent.Timeout(2):
        first = client.get("/")
        assert first.body == b""
        assert client.get("/").status == first.status
    assert server.connections == 1


def test_a_reply_to_head_has_no_body_whatever_its_content_length(
    serve: Callable[..., Server],
) -> None:
    server = serve(lambda req, n: b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n")
    client = HostClient("t", local(server.port), max_idle=4)
    with gevent.Timeout(2):
        response = client.request("HEAD", "/")
        assert (response.status, response.headers["content-length"], response.body) == (
            200,
            "7",
            b"",
        )
        client.request("HEAD", "/")
    assert server.connections == 1
    assert server.requests[0].startswith(b"HEAD / HTTP/1.1\r\n")


def test_https_upstream_verified_against_the_given_ca(
    serve: Callable[..., Server], tls_cert: tuple[str, str]
) -> None:
    server = serve(lambda req, n: ok(b'{"n":%d}' % n), tls=tls_cert)
    client = HostClient("t", local(server.port, "https"), max_idle=4, ca_file=tls_cert[0])
    with gevent.Timeout(5):
        assert client.get("/a").body == b'{"n":1}'
        assert client.get("/b").body == b'{"n":2}'
    assert server.connections == 1  # kept alive over TLS
    assert b"\r\nHost: 127.0.0.1:%d\r\n" % server.port in server.requests[0]


def test_https_upstream_with_an_unknown_ca_is_refused(
    serve: Callable[..., Server], tls_cert: tuple[str, str]
) -> None:
    server = serve(lambda req, n: ok(), tls=tls_cert)
    client = HostClient("t", local(server.port, "https"), max_idle=4)  # system CAs only
    with pytest.raises(HttpClientError, match=r"TLS with 127\.0\.0\.1"), gevent.Timeout(5):
        client.get("/")


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://up.example", Origin("https", "up.example", 443)),
        ("https://127.0.0.1:8443", Origin("https", "127.0.0.1", 8443)),
        ("http://127.0.0.1:8200", Origin("http", "127.0.0.1", 8200)),
        ("http://up.example", Origin("http", "up.example", 80)),
    ],
)
def test_origin_keeps_the_scheme_of_the_base_url(url: str, origin: Origin) -> None:
    assert Origin.from_url(url) == origin


def test_the_gateway_honours_an_https_base_url(
    serve: Callable[..., Server], tls_cert: tuple[str, str]
) -> None:
    server = serve(lambda req, n: ok(b'{"via":"tls"}'), tls=tls_cert)
    spec = UpstreamSpec("vehicles", required=True, max_concurrency=2)
    gateway = HttpGateway(
        f"https://127.0.0.1:{server.port}",
        specs={"vehicles": spec},
        overrides={},
        ca_file=tls_cert[0],
    )
    answers = gateway.fetch_all([Call("vehicles", "/v")], Deadline.for_request(2000, None))
    assert answers == {"vehicles": {"via": "tls"}}
    assert server.requests[0].startswith(b"GET /v HTTP/1.1\r\n")
