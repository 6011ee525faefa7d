"""HOOK for tracing: read `gevent.scheduling.delay` / `gevent.network.duration` from spans.

The contract (tracing.settings, stack.launch), and the only place here that knows it:

- the pools trace when PRICING_TRACING is 1/full (0/off: no spans); the driver
  always sets it, because the pools' default is on;
- with no OTLP endpoint, the pools append OTLP/JSON to the span file the Stack
  names (PRICING_SPAN_FILE = <stack run dir>/spans.jsonl): one
  ExportTraceServiceRequest per line; lines holding one bare span are accepted too;
- upstream-call (client) spans carry the attributes named in tracing.attributes,
  in seconds. Server spans carry the same attributes summed over the request's
  calls (tracing.client.server_span_attributes): parallel calls would be counted
  several times, so only client spans are read.

The driver sets an empty PRICING_OTLP_ENDPOINT, so an endpoint exported in the
user's shell cannot divert the spans away from the file. The file is read after
the stack has stopped (the exporters have flushed). A line cut short by a stopped
writer is skipped (tracing.spans.from_file, for `pricingctl traces`, is strict).
If the file is missing or holds no such spans, `read_span_file` returns None and
the report says "n/a". Nothing else in the benchmark depends on tracing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import median_and_p99
from tracing.attributes import NETWORK_DURATION, SCHEDULING_DELAY
from tracing.settings import OTLP_ENDPOINT_ENV, TRACING_ENV

# Where stack.launch.Stack puts the span file in its run dir (Stack.span_file); used
# only by --replot, which has no Stack.
SPANS_FILE_NAME = "spans.jsonl"
# OTLP/JSON writes the span kind as its number (3) or, from some exporters, its name.
_CLIENT_KINDS = (3, "SPAN_KIND_CLIENT")


@dataclass(frozen=True)
class SpanCall:
    """One upstream call's timing split, from its span."""

    trace_id: str
    start_ns: int
    network_s: float
    scheduling_s: float


@dataclass(frozen=True)
class SpanTimings:
    calls: tuple[SpanCall, ...]

    def summary(self) -> dict[str, object]:
        sched = median_and_p99([c.scheduling_s * 1000 for c in self.calls])
        net = median_and_p99([c.network_s * 1000 for c in self.calls])
        assert sched is not None and net is not None  # never built empty
        return {
            "spans": len(self.calls),
            "scheduling_delay_ms": {"p50": round(sched[0], 3), "p99": round(sched[1], 3)},
            "network_duration_ms": {"p50": round(net[0], 3), "p99": round(net[1], 3)},
        }

    def critical_call(self) -> dict[str, SpanCall]:
        """Per trace (offer), the call that finished last: network + scheduling largest."""
        out: dict[str, SpanCall] = {}
        for call in self.calls:
            best = out.get(call.trace_id)
            if best is None or (call.network_s + call.scheduling_s) > (
                best.network_s + best.scheduling_s
            ):
                out[call.trace_id] = call
        return out


def env_for(tracing: bool | str) -> dict[str, str]:
    """The pools' environment for the tracing switch (the Stack names the span file).

    A string is a PRICING_TRACING mode itself (off, spans, full)."""
    value = tracing if isinstance(tracing, str) else ("1" if tracing else "0")
    return {TRACING_ENV: value, OTLP_ENDPOINT_ENV: ""}


def _attr_value(value: Mapping[str, Any]) -> Any:
    for key in ("doubleValue", "intValue", "stringValue", "boolValue"):
        if key in value:
            return value[key]
    return None


def _attributes(span: Mapping[str, Any]) -> dict[str, Any]:
    raw = span.get("attributes") or []
    if isinstance(raw, Mapping):  # already a plain mapping
        return dict(raw)
    return {
        str(a.get("key")): _attr_value(a.get("value") or {}) for a in raw if isinstance(a, Mapping)
    }


def _spans(doc: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    if "traceId" in doc:
        yield doc
        return
    for rs in doc.get("resourceSpans") or []:
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            yield from ss.get("spans") or []


def read_span_file(
    path: Path, start_ns: int | None = None, end_ns: int | None = None
) -> SpanTimings | None:
    """Upstream-call timings of spans that started in [start_ns, end_ns); None if none."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    calls: list[SpanCall] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line cut short by a writer that was stopped
        if not isinstance(doc, Mapping):
            continue
        for span in _spans(doc):
            if span.get("kind") not in _CLIENT_KINDS:
                continue
            attrs = _attributes(span)
            if NETWORK_DURATION not in attrs or SCHEDULING_DELAY not in attrs:
                continue
            try:
                start = int(span.get("startTimeUnixNano") or 0)
                call = SpanCall(
                    trace_id=str(span.get("traceId", "")).lower(),
                    start_ns=start,
                    network_s=float(attrs[NETWORK_DURATION]),
                    scheduling_s=float(attrs[SCHEDULING_DELAY]),
                )
            except (TypeError, ValueError):
                continue
            if start_ns is not None and start < start_ns:
                continue
            if end_ns is not None and start >= end_ns:
                continue
            calls.append(call)
    return SpanTimings(tuple(calls)) if calls else None
