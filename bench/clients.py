"""The other HTTP client libraries `pricingctl bench http-client` compares with the
service's own (`pricing.upstream.httpclient.HostClient`): geventhttpclient and urllib3,
as ``pricing.upstream.gateway.ClientFactory`` adapters. A pool of the benchmark's stack
uses one through its app entry (`bench.pool_app`), which hands it to the service's
factory; the service itself knows only its own client.

They are dev-only packages, so asking for one that is not installed fails at start-up
with one line naming the package. Each adapter calls the same `CallObserver` around the
call as ours, so the client spans, the propagated trace and the gevent timing are the
same whatever the library: the timing hooks sit on gevent's socket class, which every
one of them reads through.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Final

from pricing.upstream.gateway import ClientFactory, UpstreamClient
from pricing.upstream.httpclient import (
    MAX_BODY_BYTES,
    CallObserver,
    HostClient,
    HttpClientError,
    HttpResponse,
    NullObserver,
    Origin,
    os_failure_reason,
    tls_context,
)
from toolkit.contract import JSON

OURS: Final = "ours"
GEVENTHTTPCLIENT: Final = "geventhttpclient"
URLLIB3: Final = "urllib3"


class MissingClientError(RuntimeError):
    """The chosen client's package is not installed (it is a dev-only dependency)."""


def _geventhttpclient(
    name: str, origin: Origin, max_idle: int, observer: CallObserver | None, ca_file: str | None
) -> UpstreamClient:
    return GeventHttpClient(name, origin, max_idle, observer, ca_file)


def _urllib3(
    name: str, origin: Origin, max_idle: int, observer: CallObserver | None, ca_file: str | None
) -> UpstreamClient:
    return Urllib3Client(name, origin, max_idle, observer, ca_file)


_FACTORIES: Final[dict[str, ClientFactory]] = {
    OURS: HostClient,
    GEVENTHTTPCLIENT: _geventhttpclient,
    URLLIB3: _urllib3,
}
CLIENTS: Final = tuple(_FACTORIES)


def client_factory(kind: str) -> ClientFactory:
    """The factory of library `kind` (one of CLIENTS), its package checked."""
    if kind not in _FACTORIES:
        raise ValueError(f"HTTP client {kind!r} unknown; expected one of {', '.join(CLIENTS)}")
    if kind != OURS and importlib.util.find_spec(kind) is None:
        raise MissingClientError(
            f"HTTP client {kind!r} needs the package {kind}, which is not installed "
            "(it is in the dev lock: make setup-dev)"
        )
    return _FACTORIES[kind]


def make_client(
    kind: str,
    name: str,
    origin: Origin,
    max_idle: int,
    observer: CallObserver | None = None,
    ca_file: str | None = None,
) -> UpstreamClient:
    """A client of `origin` from library `kind` (one of CLIENTS)."""
    return client_factory(kind)(name, origin, max_idle, observer, ca_file)


class GeventHttpClient:
    """geventhttpclient's keep-alive pool (C parser), one per upstream."""

    def __init__(
        self,
        name: str,
        origin: Origin,
        max_idle: int,
        observer: CallObserver | None,
        ca_file: str | None,
    ) -> None:
        from geventhttpclient import HTTPClient

        self.name, self.origin = name, origin
        self.observer: CallObserver = observer or NullObserver()
        tls: dict[str, Any] = {}
        if origin.tls:
            tls = {"ssl": True, "ssl_context_factory": lambda: tls_context(ca_file)}
        # Timeouts: the gateway's gevent.Timeout bounds each call; these only back it up.
        self._client = HTTPClient(
            origin.host,
            origin.port,
            concurrency=max_idle,
            connection_timeout=5.0,
            network_timeout=30.0,
            **tls,
        )

    def get(self, path: str, connect_timeout_s: float = 1.0) -> HttpResponse:
        with self.observer.call(
            self.name, "GET", self.origin.host, self.origin.port, path
        ) as observed:
            headers = {"Accept": JSON, **observed.headers}
            try:
                response = self._client.get(path, headers=headers)
                try:
                    body = response.read(MAX_BODY_BYTES + 1)
                finally:
                    response.release()
            except OSError as exc:
                raise HttpClientError(
                    f"{type(exc).__name__}: {exc}", os_failure_reason(exc)
                ) from None
            if len(body) > MAX_BODY_BYTES:
                raise HttpClientError("body too large")
            observed.status = response.status_code
            names = {k.lower(): v for k, v in response.items()}
            return HttpResponse(response.status_code, names, body)

    def close(self) -> None:
        self._client.close()


class Urllib3Client:
    """urllib3's connection pool (cooperative only once gevent has monkey-patched the
    socket module, as gunicorn's gevent worker does at start)."""

    def __init__(
        self,
        name: str,
        origin: Origin,
        max_idle: int,
        observer: CallObserver | None,
        ca_file: str | None,
    ) -> None:
        import urllib3

        self.name, self.origin = name, origin
        self.observer: CallObserver = observer or NullObserver()
        self._urllib3 = urllib3
        pool_kwargs: dict[str, Any] = {"maxsize": max_idle, "block": False, "retries": False}
        if origin.tls:
            pool_kwargs["ssl_context"] = tls_context(ca_file)
            self._pool: Any = urllib3.HTTPSConnectionPool(origin.host, origin.port, **pool_kwargs)
        else:
            self._pool = urllib3.HTTPConnectionPool(origin.host, origin.port, **pool_kwargs)

    def get(self, path: str, connect_timeout_s: float = 1.0) -> HttpResponse:
        u = self._urllib3
        with self.observer.call(
            self.name, "GET", self.origin.host, self.origin.port, path
        ) as observed:
            headers = {"Accept": JSON, **observed.headers}
            try:
                response = self._pool.urlopen(
                    "GET",
                    path,
                    headers=headers,
                    timeout=u.Timeout(connect=connect_timeout_s, read=None),
                    redirect=False,
                )
            except u.exceptions.HTTPError as exc:
                raise HttpClientError(f"{type(exc).__name__}: {exc}") from None
            observed.status = response.status
            names = {k.lower(): v for k, v in response.headers.items()}
            return HttpResponse(response.status, names, response.data)

    def close(self) -> None:
        self._pool.close()
