"""The time budget of one request."""

from __future__ import annotations

import time
from dataclasses import dataclass

ENVOY_TIMEOUT_HEADER = "x-envoy-expected-rq-timeout-ms"
# Kept back from the budget to combine the answers and write the response,
# so the app answers before Envoy gives up on it.
RESPONSE_RESERVE_MS = 25
MIN_BUDGET_MS = 5


@dataclass(frozen=True, slots=True)
class Deadline:
    """An absolute monotonic deadline (time.monotonic() seconds)."""

    at: float
    budget_ms: int

    @classmethod
    def for_request(cls, route_timeout_ms: int, envoy_header: str | None) -> Deadline:
        """Budget = the smaller of the route's timeout and Envoy's, minus a reserve."""
        timeout_ms = route_timeout_ms
        if envoy_header:
            try:
                envoy_ms = int(envoy_header)
            except ValueError:
                envoy_ms = 0
            if envoy_ms > 0:
                timeout_ms = min(timeout_ms, envoy_ms)
        budget_ms = max(MIN_BUDGET_MS, timeout_ms - RESPONSE_RESERVE_MS)
        return cls(at=time.monotonic() + budget_ms / 1000, budget_ms=budget_ms)

    def remaining_s(self) -> float:
        return max(0.0, self.at - time.monotonic())
