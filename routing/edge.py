"""How a pool reads what Envoy tells it about each request it routes: the values of the
headers the rendered config sets (their names are in `toolkit.contract`). Pure data,
like the rest of `routing`: the pools' deadline (`pricing.web.admission`) and their
timing (`tracing.server`) read them through here."""

from __future__ import annotations


def parse_envoy_start_ns(raw: str | None) -> int | None:
    """ENVOY_START_HEADER as Unix nanoseconds; None when absent or not a time."""
    if not raw:
        return None
    seconds, _, fraction = raw.partition(".")
    if not seconds.isdigit() or (fraction and not fraction.isdigit()):
        return None
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def parse_timeout_ms(raw: str | None) -> int | None:
    """ENVOY_TIMEOUT_HEADER; None when absent, not a number or not positive."""
    if not raw or not raw.isdigit():
        return None
    value = int(raw)
    return value if value > 0 else None


def parse_attempt(raw: str | None) -> int:
    """ENVOY_ATTEMPT_HEADER; 1 when absent or not a positive number."""
    if not raw or not raw.isdigit():
        return 1
    return max(1, int(raw))
