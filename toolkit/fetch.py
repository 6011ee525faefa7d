"""One HTTP request, read back whole: the reader every command, benchmark and test
uses for the small JSON and text answers of the simulator, Envoy's admin, Jaeger and
the pools (not for load: `bench.traffic` sends that on keep-alive connections)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from toolkit.contract import JSON


class HTTPStatusError(OSError):
    """The server answered, but not with a 2xx status."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(f"{url} answered HTTP {status}")
        self.url = url
        self.status = status


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes
    elapsed_s: float
    url: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)

    def expect_ok(self) -> Reply:
        """This reply, or HTTPStatusError when it is not a 2xx."""
        if not self.ok:
            raise HTTPStatusError(self.url, self.status)
        return self


def fetch(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Reply:
    """One request. An HTTP error status comes back as a Reply; a server that cannot be
    reached raises OSError. `body`: bytes as they are, anything else as JSON."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers.setdefault("content-type", JSON)
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            payload = resp.read()
            status, got = resp.status, resp.headers
    except urllib.error.HTTPError as err:
        payload, status, got = err.read(), err.code, err.headers
    return Reply(
        status, {k.lower(): v for k, v in got.items()}, payload, time.monotonic() - started, url
    )


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """Whether a GET of `url` answers 2xx now (a readiness probe)."""
    try:
        return fetch(url, timeout_s=timeout_s).ok
    except OSError:
        return False
