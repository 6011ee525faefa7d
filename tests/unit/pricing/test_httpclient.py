"""The lean upstream client against a real loopback server (gevent, no monkey patching)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gevent
import pytest
from gevent.server import StreamServer

from pricing.httpclient import HostClient, HttpClientError


def ok(body: bytes = b'{"a":1}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Server:
    def __init__(self, reply: Callable[[bytes, int], bytes | None]) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
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

    def start(reply: Callable[[bytes, int], bytes | None]) -> Server:
        server = Server(reply)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.server.stop()


def test_content_length_and_keep_alive(serve: Callable[..., Server]) -> None:
    server = serve(lambda req, n: ok(b'{"n":%d}' % n))
    client = HostClient("t", "127.0.0.1", server.port, max_idle=4)
    for n in (1, 2, 3):
        response = client.get(f"/x?n={n}")
        assert (response.status, response.body) == (200, b'{"n":%d}' % n)
    assert server.connections == 1  # one kept-alive connection served all three
    assert server.requests[0].startswith(b"GET /x?n=1 HTTP/1.1\r\nHost: 127.0.0.1:")


def test_chunked_body(serve: Callable[..., Server]) -> None:
    body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    server = serve(lambda req, n: body)
    client = HostClient("t", "127.0.0.1", server.port, max_idle=4)
    assert client.get("/").body == b"abcde"
    assert client.get("/").body == b"abcde"
    assert server.connections == 1


def test_stale_idle_connection_is_retried_once(serve: Callable[..., Server]) -> None:
    # The server answers, then closes the kept-alive connection before the next request.
    server = serve(lambda req, n: ok() if n % 2 else None)
    client = HostClient("t", "127.0.0.1", server.port, max_idle=4)
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
        client = HostClient("t", "127.0.0.1", server.server_port, max_idle=4)
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
        HostClient("t", "127.0.0.1", port, max_idle=1).get("/")
    assert info.value.reason == "refused"  # a metrics label and the span's error.type


def test_a_connection_interrupted_by_a_timeout_is_not_reused(serve: Callable[..., Server]) -> None:
    server = serve(lambda req, n: (gevent.sleep(0.5), ok())[1] if n == 1 else ok())
    client = HostClient("t", "127.0.0.1", server.port, max_idle=4)
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.1):
        client.get("/slow")
    assert client.idle_connections == 0
    assert client.get("/fast").status == 200
