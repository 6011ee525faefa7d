"""Load for the robustness tests: an open-loop client (asyncio, one connection per
request, bounded in count and time), the figures of a run, and CPU hogs.

Unlike `bench.traffic` (keep-alive connections, for throughput), each request here
opens its own connection, so a reset, a refusal or a cut reply is seen per request.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

from stack.launch import Stack
from tests.integration.support.http import http
from tests.samples import HOG_RIDE, RIDE_BODY, RIDE_ROUTE, offer_query

#: A steady load of GET offers that the stack serves with room to spare: 8 s of them.
OFFER_RATE, OFFER_COUNT = 25.0, 200
# On a machine shared with benchmarks, a starved process can miss Envoy's route
# timeout whatever the test does; such 504s are counted and bounded, not hidden.
# Every other failure (reset, refused, 503, truncated reply) must be zero.
STARVED_FRACTION = 0.05
#: The route label of the quotes the hogs post, as spans and culprits name it.
HOG_ROUTE = RIDE_ROUTE
D_MS = 60  # the exact delay every upstream answers with, in the tests beside the hogs


# --- requests, one connection each ---------------------------------------------------


def get_request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: pricing\r\nConnection: close\r\n\r\n".encode()


def post_json(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: pricing\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def offer_request(i: int, mode: str = "bike") -> bytes:
    return get_request(f"/v1/offers/{mode}?{offer_query(f'u-{i}')}")


def ride_request(i: int) -> bytes:
    return post_json("/v1/offers/rideshare", RIDE_BODY)


# --- the open-loop client ---------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one request saw. status 0: no HTTP answer at all (refused, reset, timeout)."""

    index: int
    sent_at_s: float  # since the run started
    status: int
    elapsed_s: float
    headers: dict[str, str] = field(default_factory=dict)
    error: str = ""


async def _exchange(host: str, port: int, request: bytes, timeout_s: float) -> tuple:
    started = time.monotonic()
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                await reader.readexactly(int(headers["content-length"]))
            else:
                await reader.read()
            return status, time.monotonic() - started, headers, ""
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        return 0, time.monotonic() - started, {}, f"{type(exc).__name__}: {exc}"
    except TimeoutError:
        return 0, time.monotonic() - started, {}, f"no answer within {timeout_s} s"
    finally:
        if writer is not None:
            writer.close()


async def _open_loop(
    url: str,
    make: Callable[[int], bytes],
    rate_per_s: float,
    count: int,
    timeout_s: float,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    host, port = url.removeprefix("http://").split(":")
    start = time.monotonic()

    async def one(i: int) -> Outcome:
        sent_at = time.monotonic() - start
        status, elapsed, headers, error = await _exchange(host, int(port), make(i), timeout_s)
        return Outcome(i, sent_at, status, elapsed, headers, error)

    tasks = []
    for i in range(count):
        if stop is not None and stop.is_set():
            break
        delay = start + i / rate_per_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    return list(await asyncio.gather(*tasks))


def open_loop(
    url: str,
    make: Callable[[int], bytes],
    *,
    rate_per_s: float,
    count: int,
    timeout_s: float = 10.0,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """Send `count` requests at a fixed rate, whatever the answers (open loop): each on
    its own connection, each bounded by `timeout_s`. Takes count/rate + timeout_s at most;
    sends no more once `stop` is set (the requests sent are all waited for)."""
    return asyncio.run(_open_loop(url, make, rate_per_s, count, timeout_s, stop))


@dataclass(frozen=True)
class Load:
    """Open-loop load on one stack, through its Envoy."""

    stack: Stack

    def open_loop(self, make: Callable[[int], bytes], **settings: Any) -> Tally:
        """The figures of an `open_loop` run (same settings)."""
        return Tally(open_loop(self.stack.url, make, **settings))

    def background(self, make: Callable[[int], bytes], **settings: Any) -> Background:
        """A `Background` run (same settings), to use in a `with`."""
        return Background(self.stack.url, make, **settings)


class Background:
    """An open-loop run in a thread, so the test can act while it runs."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=lambda: self.outcomes.extend(open_loop(*args, **kwargs, stop=self._stop)),  # type: ignore[arg-type]
            daemon=True,
        )

    def stop(self) -> None:
        """Send no more requests; those sent are still waited for."""
        self._stop.set()

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the load run did not finish"


@dataclass
class Tally:
    """Figures of a run, for assertions and the report."""

    outcomes: list[Outcome]

    @property
    def statuses(self) -> Counter[int]:
        return Counter(o.status for o in self.outcomes)

    def latencies(self, status: int | None = None) -> list[float]:
        return sorted(o.elapsed_s for o in self.outcomes if status is None or o.status == status)

    def quantile(self, q: float, status: int | None = None) -> float:
        values = self.latencies(status)
        if not values:
            return 0.0
        return values[min(len(values) - 1, int(q * len(values)))]

    def errors(self) -> Counter[str]:
        return Counter(o.error.split(":")[0] for o in self.outcomes if o.error)

    def summary(self, name: str) -> str:
        ok = self.latencies(200)
        median = statistics.median(ok) * 1000 if ok else 0.0
        return (
            f"{name}: sent {len(self.outcomes)}, statuses {dict(sorted(self.statuses.items()))}"
            f", transport errors {dict(self.errors())}; 200s p50 {median:.0f} ms"
            f" p99 {self.quantile(0.99, 200) * 1000:.0f} ms"
            f" max {self.quantile(1.0, 200) * 1000:.0f} ms"
        )


def shed(outcome: Outcome) -> bool:
    """Envoy refused the request itself (circuit breaker): 503 without a pool's name."""
    return outcome.status == 503 and "x-pricing-pool" not in outcome.headers


def failed(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.status != 200]


def timed_out(outcome: Outcome) -> bool:
    """Envoy's own 504: the route timeout passed before any answer."""
    return outcome.status == 504 and "x-pricing-pool" not in outcome.headers


def assert_nothing_lost(tally: Tally) -> None:
    """No request failed, except a bounded few that a starved machine let time out."""
    lost = failed(tally.outcomes)
    assert [o for o in lost if not timed_out(o)] == [], tally.summary("lost")
    assert len(lost) <= max(1, STARVED_FRACTION * len(tally.outcomes)), tally.summary("lost")


def under_load(
    stack: Stack,
    make: Callable[[int], bytes],
    rate: float,
    count: int,
    action: Callable[[], None],
    after_s: float = 2.0,
) -> Tally:
    with Background(stack.url, make, rate_per_s=rate, count=count, timeout_s=10) as load:
        time.sleep(after_s)
        action()
    return Tally(load.outcomes)


# --- CPU hogs --------------------------------------------------------------------


class Hogs:
    """Threads posting rideshare quotes (tens of ms of CPU each) as fast as served."""

    def __init__(self, url: str, threads: int) -> None:
        self.url = url
        self.stop = threading.Event()
        # status (or the exception's name) -> count: what a test that found no delay says
        self.outcomes: Counter[int | str] = Counter()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self.stop.is_set():
            # A hog's failure is not what these tests check.
            try:
                status: int | str = http(
                    "POST", f"{self.url}/v1/offers/rideshare", HOG_RIDE, timeout_s=10
                ).status
            except (OSError, HTTPException) as exc:
                status = type(exc).__name__
            self.outcomes[status] += 1

    def __enter__(self) -> Hogs:
        for t in self.threads:
            t.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)
