"""Admission at the handler: a request is worked on only while its route can still
answer it in time. Envoy sheds what is over a pool's limit; this sheds what got
through but waited too long on the way (Envoy's queue, the pool's socket, the loop),
so a pool past its capacity never spends its time on answers nobody waits for.

What a route needs is the larger of its configured minimum (`min_budget_ms`) and what
its requests have been taking in this worker lately (at most 80 % of its budget: a
request that hardly waited is always started). Envoy's limit is a fixed figure
(Little's law on the measured capacity); when the worker is slower than measured (a
busy host, a neighbour's CPU), its requests take longer, fewer of the waiting ones are
started, and the worker sheds its way back to answers in time instead of starting
work that would finish after Envoy's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from flask import Response, g, request

from pricing.domain.deadline import RESPONSE_RESERVE_MS, Deadline
from pricing.domain.errors import Overloaded
from routing.edge import parse_attempt, parse_envoy_start_ns, parse_timeout_ms
from routing.model import Route
from toolkit.contract import ENVOY_ATTEMPT_HEADER, ENVOY_START_HEADER, ENVOY_TIMEOUT_HEADER
from tracing.metrics import PoolMetrics
from tracing.route import route_of

_DEADLINE = "pricing_deadline"
# Weight of the newest request in a route's recent service time (an exponentially
# weighted mean over about the last 1/WEIGHT requests).
SERVICE_TIME_WEIGHT = 0.05
# Each shed request lets the recent service time decay this much toward the route's
# minimum: when every request is shed, nothing finishes to say the worker is fast again.
SHED_DECAY = 0.98
# What the recent service time may ask for at most, as a share of the route's whole
# budget: a request that waited less than the rest (20 %) is always started. Shedding
# it would not make the work any faster, and one slow burst (a cold worker, a GC
# pause) would otherwise shed every fresh request until the need decays.
MAX_NEED_SHARE = 0.8


class Headers(Protocol):
    def get(self, key: str) -> str | None: ...


def deadline_for(route: Route, headers: Headers) -> Deadline:
    """The request's deadline from what Envoy says: when it received the request and
    the route's timeout as Envoy enforces it."""
    return Deadline.for_request(
        route.timeout_ms,
        parse_timeout_ms(headers.get(ENVOY_TIMEOUT_HEADER)),
        parse_envoy_start_ns(headers.get(ENVOY_START_HEADER)),
        parse_attempt(headers.get(ENVOY_ATTEMPT_HEADER)),
    )


class ServiceTime:
    """A route's recent time from handler start to answer in this worker, in ms. The hub
    runs one greenlet at a time: no lock."""

    __slots__ = ("ceiling_ms", "floor_ms", "recent_ms")

    def __init__(self, floor_ms: float, ceiling_ms: float = float("inf")) -> None:
        self.floor_ms = floor_ms
        self.ceiling_ms = ceiling_ms
        self.recent_ms = 0.0

    def need_ms(self) -> float:
        return max(self.floor_ms, min(self.recent_ms, self.ceiling_ms))

    def finished(self, took_ms: float) -> None:
        self.recent_ms += SERVICE_TIME_WEIGHT * (took_ms - self.recent_ms)

    def shed(self) -> None:
        self.recent_ms = self.floor_ms + SHED_DECAY * (self.recent_ms - self.floor_ms)


def admitted(
    route: Route, view: Callable[..., Response], metrics: PoolMetrics
) -> Callable[..., Response]:
    """`view`, started only with the budget its route needs left (the larger of
    `min_budget_ms` and its recent service time); otherwise 503 at once (problem+json,
    Retry-After), counted as shed in *metrics*, no upstream called."""
    service = ServiceTime(
        route.min_budget, (route.timeout_ms - RESPONSE_RESERVE_MS) * MAX_NEED_SHARE
    )

    def admit(**kwargs: Any) -> Response:
        deadline = deadline_for(route, request.headers)
        need_ms = service.need_ms()
        if deadline.budget_ms < need_ms:
            service.shed()
            metrics.observe_shed(route_of(request), "budget")
            raise Overloaded(
                f"the request waited {deadline.waited_ms} ms before the pool could start "
                f"it; {max(0, deadline.budget_ms)} ms of its {route.timeout_ms} ms were "
                f"left, and it needs {need_ms:.0f} ms"
            )
        setattr(g, _DEADLINE, deadline)
        started = time.monotonic()
        try:
            return view(**kwargs)
        finally:
            service.finished((time.monotonic() - started) * 1000)

    return admit


def current_deadline() -> Deadline:
    """The deadline `admitted` set for this request."""
    deadline: Deadline = getattr(g, _DEADLINE)
    return deadline
