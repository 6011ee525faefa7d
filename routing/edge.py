"""What Envoy tells a pool about each request it routes: the header names the rendered
config sets and the pools read, and how to read them. Pure data, like the rest of
`routing`: the renderer (`routing.envoy`), the pools' deadline (`pricing.domain.deadline`) and
their timing (`tracing.server`, `gunicorn_conf`) all take them from here."""

from __future__ import annotations

#: When Envoy received the request (its %START_TIME%, Unix seconds with microseconds):
#: where the request's deadline starts, and how long it waited before the pool.
ENVOY_START_HEADER = "x-pricing-envoy-start"
#: The route's timeout as Envoy enforces it (Envoy sets it on every routed request).
ENVOY_TIMEOUT_HEADER = "x-envoy-expected-rq-timeout-ms"
#: Which attempt of the request this is (1 the first; Envoy sets it on every routed
#: request): a retry's or a hedge's ENVOY_TIMEOUT_HEADER is what was left when it was sent.
ENVOY_ATTEMPT_HEADER = "x-envoy-attempt-count"
#: On a pool's 503 for a request it shed (the reason, e.g. ``budget``): Envoy retries
#: such an answer on another replica, or waits for the hedged attempt, where the pool
#: has several; the request was not worked on, so that is safe.
SHED_HEADER = "x-pricing-shed"


def parse_envoy_start_ns(raw: str | None) -> int | None:
    """``x-pricing-envoy-start`` as Unix nanoseconds; None when absent or not a time."""
    if not raw:
        return None
    seconds, _, fraction = raw.partition(".")
    if not seconds.isdigit() or (fraction and not fraction.isdigit()):
        return None
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def parse_timeout_ms(raw: str | None) -> int | None:
    """``x-envoy-expected-rq-timeout-ms``; None when absent, not a number or not positive."""
    if not raw or not raw.isdigit():
        return None
    value = int(raw)
    return value if value > 0 else None


def parse_attempt(raw: str | None) -> int:
    """``x-envoy-attempt-count``; 1 when absent or not a positive number."""
    if not raw or not raw.isdigit():
        return 1
    return max(1, int(raw))
