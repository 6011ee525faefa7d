"""Every client library `bench http-client` compares (`bench.clients`), against one
real loopback server (on an OS thread, so urllib3's blocking sockets need no monkey
patching): same answers, the observer's headers sent, its status set, https verified
against a CA bundle; and a pool's app built with one (`bench.pool_app`) uses it."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gevent
import pytest

from bench import clients
from bench.clients import CLIENTS, MissingClientError, make_client
from pricing.upstream.httpclient import ObservedCall, Origin

pytest.importorskip("geventhttpclient")
pytest.importorskip("urllib3")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self) -> None:
        body = b'{"path":"%s","tp":"%s"}' % (
            self.path.encode(),
            (self.headers.get("traceparent") or "").encode(),
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_server(tls: tuple[str, str] | None = None) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class Recorder:
    """A CallObserver that adds a traceparent and keeps what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, int, str]] = []
        self.statuses: list[int | None] = []

    @contextmanager
    def call(
        self, upstream: str, method: str, host: str, port: int, path: str
    ) -> Iterator[ObservedCall]:
        self.calls.append((upstream, method, host, port, path))
        observed = ObservedCall()
        observed.headers["traceparent"] = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
        yield observed
        self.statuses.append(observed.status)


def get_twice(kind: str, origin: Origin, ca_file: str | None) -> list[Mapping[str, object]]:
    import json

    recorder = Recorder()
    client = make_client(kind, "vehicles", origin, 4, recorder, ca_file)
    try:
        with gevent.Timeout(5):
            bodies = [json.loads(client.get(f"/v?n={n}").body) for n in (1, 2)]
    finally:
        client.close()
    assert recorder.calls[0] == ("vehicles", "GET", origin.host, origin.port, "/v?n=1")
    assert recorder.statuses == [200, 200]
    return bodies


@pytest.mark.parametrize("kind", CLIENTS)
def test_each_client_answers_and_sends_the_observers_headers(kind: str) -> None:
    with http_server() as port:
        bodies = get_twice(kind, Origin("http", "127.0.0.1", port), None)
    assert [b["path"] for b in bodies] == ["/v?n=1", "/v?n=2"]
    assert all(str(b["tp"]).startswith("00-111") for b in bodies)


@pytest.mark.parametrize("kind", CLIENTS)
def test_each_client_speaks_https_with_a_ca_bundle(kind: str, tls_cert: tuple[str, str]) -> None:
    with http_server(tls_cert) as port:
        bodies = get_twice(kind, Origin("https", "127.0.0.1", port), tls_cert[0])
    assert bodies[1]["path"] == "/v?n=2"


def test_a_missing_client_package_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingClientError, match="needs the package geventhttpclient"):
        make_client("geventhttpclient", "v", Origin("http", "127.0.0.1", 1), 1)


def test_an_unknown_client_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one of ours, geventhttpclient, urllib3"):
        make_client("requests", "v", Origin("http", "127.0.0.1", 1), 1)


def test_the_bench_app_entry_hands_the_client_to_the_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`bench.pool_app` builds the pool's app through `create_app`: its gateway's clients
    are the library's; the service's own factory, called alone, keeps its own client."""
    from bench import pool_app
    from pricing import create_app
    from pricing.upstream.httpclient import HostClient

    monkeypatch.setenv("PRICING_UPSTREAM_URL", "http://127.0.0.1:9")
    app = pool_app.app(client="urllib3")
    gateway = app.extensions["pricing.gateway"]
    assert {type(c) for c in gateway.clients.values()} == {clients.Urllib3Client}
    own = create_app("io").extensions["pricing.gateway"]
    assert {type(c) for c in own.clients.values()} == {HostClient}
    assert pool_app.entry(client="urllib3") == "bench.pool_app:app(client='urllib3')"
