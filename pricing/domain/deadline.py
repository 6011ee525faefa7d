"""The time budget of one request, counted from when Envoy received it."""

from __future__ import annotations

import time
from dataclasses import dataclass

# Kept back from the budget to combine the answers and write the response,
# so the app answers before Envoy gives up on it.
RESPONSE_RESERVE_MS = 25


@dataclass(frozen=True, slots=True)
class Deadline:
    """An absolute monotonic deadline (time.monotonic() seconds)."""

    at: float
    # What was left for the handler when it started (<= 0: nothing).
    budget_ms: int
    # Spent before the handler started: in Envoy's queue, on the wire, in the pool's
    # socket waiting for the loop. 0 when the request did not come through Envoy.
    waited_ms: int = 0

    @classmethod
    def for_request(
        cls,
        route_timeout_ms: int,
        envoy_timeout_ms: int | None = None,
        envoy_start_ns: int | None = None,
        attempt: int = 1,
        *,
        now_ns: int | None = None,
    ) -> Deadline:
        """Budget = the smaller of the route's timeout and Envoy's, less the time since
        Envoy received the request, less a reserve to answer.

        Envoy's timeout is what it had left when it sent this attempt: for the first
        attempt that is counted from when it received the request; a retry or a hedged
        attempt is sent later, with what was left then, so only the route's timeout is
        counted from the start (a hedge sent 250 ms into a 500 ms route is told 250 ms,
        and has them).

        Envoy's start time is its host's wall clock; the pool's must agree (NTP, as for
        the spans). A start in the future counts as no wait."""
        envoy_ms = envoy_timeout_ms if envoy_timeout_ms and envoy_timeout_ms > 0 else None
        waited_ms = 0
        if envoy_start_ns is not None:
            now_ns = time.time_ns() if now_ns is None else now_ns
            waited_ms = max(0, (now_ns - envoy_start_ns) // 1_000_000)
        if attempt > 1:
            left_ms = route_timeout_ms - waited_ms
            if envoy_ms is not None:
                left_ms = min(left_ms, envoy_ms)
        else:
            left_ms = min(route_timeout_ms, envoy_ms or route_timeout_ms) - waited_ms
        budget_ms = left_ms - RESPONSE_RESERVE_MS
        return cls(time.monotonic() + max(0, budget_ms) / 1000, budget_ms, waited_ms)

    def remaining_s(self) -> float:
        return max(0.0, self.at - time.monotonic())
