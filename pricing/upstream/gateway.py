"""Calls to the upstream services: bulkheads, bounded connection pools, one deadline.

Every upstream has its own connection pool and its own concurrency limit
(bulkhead), so one slow upstream can hold at most its own share of this
worker's greenlets and connections (the DoorDash lesson): calls beyond the
limit fail at once instead of queueing behind the slow ones.
"""

from __future__ import annotations

import contextvars
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gevent
from gevent.lock import BoundedSemaphore

from pricing.domain.deadline import Deadline
from pricing.domain.errors import UpstreamFailure
from pricing.upstream.httpclient import (
    CallObserver,
    HostClient,
    HttpClientError,
    HttpResponse,
    Origin,
)

Answer = dict[str, Any] | UpstreamFailure

# Seconds the fan-out waits past the deadline for a call that is being cancelled.
_JOIN_GRACE_S = 0.02


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    name: str
    required: bool
    # Calls one worker process may have in flight to this upstream; also the
    # size of its connection pool, so a call never waits for a connection.
    max_concurrency: int
    # An optional upstream is not worth the whole offer budget: past this it is
    # dropped (the offer is degraded) instead of holding the greenlet and its
    # connection until the deadline. None: the request's deadline alone.
    max_wait_ms: int | None = None


UPSTREAMS: Mapping[str, UpstreamSpec] = {
    "vehicles": UpstreamSpec("vehicles", required=True, max_concurrency=256),
    "routing": UpstreamSpec("routing", required=True, max_concurrency=256),
    "promotions": UpstreamSpec("promotions", required=False, max_concurrency=128, max_wait_ms=150),
}


@dataclass(frozen=True, slots=True)
class Call:
    upstream: str
    path: str  # path and query string, already encoded


class UpstreamClient(Protocol):
    """What the gateway needs from a client of one upstream (``HostClient``, or another
    library's adapter a caller of ``create_app`` hands in)."""

    def get(self, path: str, connect_timeout_s: float = 1.0) -> HttpResponse: ...

    def close(self) -> None: ...


#: Makes the client of one upstream: (name, origin, max_idle, observer, ca_file).
ClientFactory = Callable[[str, Origin, int, CallObserver | None, str | None], UpstreamClient]


class UpstreamMetrics(Protocol):
    """Where every call's outcome goes (``tracing.metrics.PoolMetrics``)."""

    def observe_upstream(self, upstream: str, duration_s: float, failure: str | None) -> None: ...


class Gateway(Protocol):
    """Runs a set of upstream calls in parallel within one deadline."""

    def fetch_all(self, calls: Sequence[Call], deadline: Deadline) -> dict[str, Answer]: ...


def spawn_in_context(func: Any, *args: Any) -> gevent.Greenlet:
    """gevent.spawn, but the greenlet runs in a copy of the caller's context.

    A plain spawned greenlet starts with an empty context: the request's trace
    context (and anything else in contextvars) would be lost.
    """
    return gevent.spawn(contextvars.copy_context().run, func, *args)


class HttpGateway:
    """The real gateway: one keep-alive HTTP client per upstream (``HostClient``, the
    project's own, unless `client` makes another)."""

    def __init__(
        self,
        base_url: str,
        specs: Mapping[str, UpstreamSpec] | None = None,
        overrides: Mapping[str, str] | None = None,
        observer: CallObserver | None = None,
        *,
        metrics: UpstreamMetrics | None = None,
        client: ClientFactory = HostClient,
        ca_file: str | None = None,
    ) -> None:
        specs = specs if specs is not None else specs_from_env(UPSTREAMS)
        self._metrics = metrics
        overrides = overrides if overrides is not None else _env_overrides(specs)
        self._specs = specs
        self.clients: dict[str, UpstreamClient] = {}
        self._bulkheads: dict[str, BoundedSemaphore] = {}
        for name, spec in specs.items():
            origin = Origin.from_url(overrides.get(name, base_url))
            self.clients[name] = client(name, origin, spec.max_concurrency, observer, ca_file)
            self._bulkheads[name] = BoundedSemaphore(spec.max_concurrency)

    def fetch_all(self, calls: Sequence[Call], deadline: Deadline) -> dict[str, Answer]:
        greenlets = [spawn_in_context(self._call, call, deadline) for call in calls]
        gevent.joinall(greenlets, timeout=deadline.remaining_s() + _JOIN_GRACE_S)
        answers: dict[str, Answer] = {}
        for call, greenlet in zip(calls, greenlets, strict=True):
            if greenlet.successful():
                answers[call.upstream] = greenlet.value
            else:
                greenlet.kill(block=False)
                answers[call.upstream] = UpstreamFailure(
                    call.upstream, "timeout", f"no answer within {deadline.budget_ms} ms"
                )
        return answers

    def _call(self, call: Call, deadline: Deadline) -> Answer:
        started = time.monotonic()
        failure: str | None = "timeout"  # unless it ends: killed past the deadline
        try:
            answer = self._bulkheaded(call, deadline, started)
            failure = answer.cause if isinstance(answer, UpstreamFailure) else None
            return answer
        except Exception:
            failure = "error"
            raise
        finally:
            if self._metrics is not None:
                self._metrics.observe_upstream(call.upstream, time.monotonic() - started, failure)

    def _bulkheaded(self, call: Call, deadline: Deadline, started: float) -> Answer:
        bulkhead = self._bulkheads[call.upstream]
        if not bulkhead.acquire(blocking=False):
            return UpstreamFailure(
                call.upstream,
                "saturated",
                f"{self._specs[call.upstream].max_concurrency} calls already in flight",
                cause="bulkhead_full",
            )
        try:
            return self._request(call, deadline, started)
        finally:
            bulkhead.release()

    def _request(self, call: Call, deadline: Deadline, started: float) -> Answer:
        remaining = deadline.remaining_s()
        if remaining <= 0:
            return UpstreamFailure(
                call.upstream, "timeout", "no budget left before the call", cause="timeout"
            )
        cap_ms = self._specs[call.upstream].max_wait_ms
        if cap_ms is not None:
            remaining = min(remaining, cap_ms / 1000)
        # One timer bounds the whole call: connect, send, a trickling body.
        timer = gevent.Timeout(remaining)
        timer.start()
        try:
            response = self.clients[call.upstream].get(call.path, connect_timeout_s=remaining)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            waited_ms = round(remaining * 1000)
            return _failure(call, "timeout", f"no answer within {waited_ms} ms", started, "timeout")
        except HttpClientError as exc:
            return _failure(call, "error", str(exc), started, exc.reason)
        finally:
            timer.close()
        if response.status != 200:
            cause = (
                "5xx" if response.status >= 500 else "4xx" if response.status >= 400 else "error"
            )
            return _failure(call, "error", f"answered HTTP {response.status}", started, cause)
        try:
            body = json.loads(response.body)
        except ValueError:
            return _failure(
                call, "bad-response", "answered a body that is not JSON", started, "bad_response"
            )
        if not isinstance(body, dict):
            return _failure(
                call, "bad-response", "answered JSON that is not an object", started, "bad_response"
            )
        return body


def _failure(call: Call, reason: str, detail: str, started: float, cause: str) -> UpstreamFailure:
    elapsed_ms = (time.monotonic() - started) * 1000
    return UpstreamFailure(call.upstream, reason, detail, elapsed_ms, cause=cause)


def specs_from_env(specs: Mapping[str, UpstreamSpec]) -> dict[str, UpstreamSpec]:
    """PRICING_UPSTREAM_<NAME>_MAX_WAIT_MS overrides an upstream's wait cap (0: none)."""
    from dataclasses import replace

    out = dict(specs)
    for name, spec in specs.items():
        raw = os.environ.get(f"PRICING_UPSTREAM_{name.upper()}_MAX_WAIT_MS")
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(
                f"PRICING_UPSTREAM_{name.upper()}_MAX_WAIT_MS must be an integer, got {raw!r}"
            ) from None
        out[name] = replace(spec, max_wait_ms=value if value > 0 else None)
    return out


def _env_overrides(specs: Mapping[str, UpstreamSpec]) -> dict[str, str]:
    """PRICING_UPSTREAM_<NAME>_URL points one upstream elsewhere (tests of faults)."""
    out = {}
    for name in specs:
        value = os.environ.get(f"PRICING_UPSTREAM_{name.upper()}_URL")
        if value:
            out[name] = value
    return out
