"""What the tests read back from Jaeger, in one place: its v1 JSON API (what Jaeger's
own UI reads, checked as such) and the project's spans (`tracing.readback.spans.from_jaeger`),
grouped by trace and waited for while the exporters catch up."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

from toolkit.fetch import fetch
from toolkit.wait import wait_for
from tracing.readback.spans import Span, SpanSourceError, from_jaeger


def v1(query_url: str, path: str, **params: object) -> Any:
    """The `data` of Jaeger's v1 API at `path` (`/api/traces`, `/api/services`, ...);
    None when Jaeger does not know it (404)."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    reply = fetch(f"{query_url}{path}{query}", timeout_s=5)
    if reply.status == 404:
        return None
    return reply.expect_ok().json()["data"]


def spans(jaeger_url: str, **query: Any) -> list[Span]:
    """`from_jaeger`, but no spans while Jaeger cannot answer yet."""
    try:
        return from_jaeger(jaeger_url, **query)
    except SpanSourceError:
        return []


def by_trace(found: Iterable[Span]) -> dict[str, list[Span]]:
    """Spans grouped by trace id, in the order they came."""
    traces: dict[str, list[Span]] = {}
    for span in found:
        traces.setdefault(span.trace_id, []).append(span)
    return traces


def wait_for_spans(
    jaeger_url: str,
    until: Callable[[list[Span]], object],
    timeout_s: float,
    interval_s: float = 0.7,  # the pools' exporter threads send every 0.5 s
    **query: Any,
) -> list[Span]:
    """Jaeger's spans for `query` once `until` holds for them, or the last ones read."""
    # The spans of requests just sent may still be in the exporters: a trace read at
    # once can be partial (its calls in, its server span not), and `until` count it.
    time.sleep(interval_s)
    return wait_for(lambda: spans(jaeger_url, **query), timeout_s, interval_s, until=until)
