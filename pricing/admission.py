"""Admission at the handler: a request is worked on only while its route can still
answer it in time. Envoy sheds what is over a pool's limit; this sheds what got
through but waited too long on the way (Envoy's queue, the pool's socket, the loop),
so a pool past its capacity never spends its time on answers nobody waits for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from flask import Response, g, request

from pricing.deadline import Deadline
from pricing.errors import Overloaded
from routing.edge import (
    ENVOY_START_HEADER,
    ENVOY_TIMEOUT_HEADER,
    parse_envoy_start_ns,
    parse_timeout_ms,
)
from routing.model import Route
from tracing.metrics import pool_metrics
from tracing.route import route_of

_DEADLINE = "pricing_deadline"


class Headers(Protocol):
    def get(self, key: str) -> str | None: ...


def deadline_for(route: Route, headers: Headers) -> Deadline:
    """The request's deadline from what Envoy says: when it received the request and
    the route's timeout as Envoy enforces it."""
    return Deadline.for_request(
        route.timeout_ms,
        parse_timeout_ms(headers.get(ENVOY_TIMEOUT_HEADER)),
        parse_envoy_start_ns(headers.get(ENVOY_START_HEADER)),
    )


def admitted(route: Route, view: Callable[..., Response]) -> Callable[..., Response]:
    """`view`, started only with at least the route's minimum budget left; otherwise
    503 at once (problem+json, Retry-After), counted as shed, no upstream called."""

    def admit(**kwargs: Any) -> Response:
        deadline = deadline_for(route, request.headers)
        if deadline.budget_ms < route.min_budget:
            pool_metrics().observe_shed(route_of(request), "budget")
            raise Overloaded(
                f"the request waited {deadline.waited_ms} ms before the pool could start "
                f"it; {max(0, deadline.budget_ms)} ms of its {route.timeout_ms} ms were "
                f"left, and it needs {route.min_budget} ms"
            )
        setattr(g, _DEADLINE, deadline)
        return view(**kwargs)

    return admit


def current_deadline() -> Deadline:
    """The deadline `admitted` set for this request."""
    deadline: Deadline = getattr(g, _DEADLINE)
    return deadline
