"""HOOK for tracing: read `gevent.scheduling.delay` / `gevent.network.duration` from spans.

The contract (tracing.settings, stack.launch), and the only place here that knows it:

- the pools trace when PRICING_TRACING is 1/full (0/off: no spans); the driver
  always sets it, because the pools' default is on;
- with no OTLP endpoint, the pools append OTLP/JSON to the span file the Stack
  names (PRICING_SPAN_FILE = <stack run dir>/spans.jsonl): one
  ExportTraceServiceRequest per line; lines holding one bare span are accepted too;
- upstream-call (client) spans carry the attributes named in tracing.attributes,
  in seconds. Server spans carry the same attributes summed over the request's
  calls (tracing.server): parallel calls would be counted
  several times, so only client spans are read.

The driver blanks OTEL_EXPORTER_OTLP_ENDPOINT and _TRACES_ENDPOINT, so an endpoint exported in the
user's shell cannot divert the spans away from the file. The file is read after
the stack has stopped (the exporters have flushed), with the project's one reader
(tracing.readback.spans.from_file, not strict: a line cut short by a stopped writer is
skipped). If the file is missing or holds no such spans, `read_span_file` returns
None and the report says "n/a". Nothing else in the benchmark depends on tracing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.stats import median_and_p99
from toolkit.contract import OTLP_ENDPOINT_ENV, TRACING_ENV
from tracing.attributes import NETWORK_DURATION, SCHEDULING_DELAY
from tracing.readback.breakdown import Breakdown, breakdowns
from tracing.readback.spans import Span, from_file, from_jaeger
from tracing.settings import OTLP_TRACES_ENDPOINT_ENV
from tracing.timing.call_state import critical_call

# Where stack.launch.Stack puts the span file in its run dir (Stack.span_file); used
# only by --replot, which has no Stack.
SPANS_FILE_NAME = "spans.jsonl"
# Where a Jaeger run keeps its offers' breakdowns (Jaeger's store dies with the stack).
BREAKDOWNS_FILE_NAME = "breakdowns.json"
# Traces asked of Jaeger per run: more than a full run's requests (~130/s x 55 s).
JAEGER_LIMIT = 20_000


@dataclass(frozen=True)
class SpanCall:
    """One upstream call's timing split, from its span."""

    trace_id: str
    start_ns: int
    network_s: float
    scheduling_s: float
    end_ns: int = 0


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
        """Per trace (offer), its critical call (`critical_call`: the last to end)."""
        by_trace: dict[str, list[SpanCall]] = {}
        for call in self.calls:
            by_trace.setdefault(call.trace_id, []).append(call)
        out: dict[str, SpanCall] = {}
        for trace_id, calls in by_trace.items():
            last = critical_call(calls, lambda c: c.end_ns)
            if last is not None:
                out[trace_id] = last
        return out


def env_for(tracing: bool | str, *, jaeger: bool = False) -> dict[str, str]:
    """The pools' environment for the tracing switch (the Stack names the span file, or
    with `jaeger` its OTLP endpoint, which the empty override must then not hide).

    A string is a PRICING_TRACING mode itself (off, spans, full)."""
    value = tracing if isinstance(tracing, str) else ("1" if tracing else "0")
    if jaeger:
        return {TRACING_ENV: value}
    return {TRACING_ENV: value, OTLP_ENDPOINT_ENV: "", OTLP_TRACES_ENDPOINT_ENV: ""}


def span_timings(
    spans: Iterable[Span], start_ns: int | None = None, end_ns: int | None = None
) -> SpanTimings | None:
    """Upstream-call timings of client spans that started in [start_ns, end_ns); None if none."""
    calls: list[SpanCall] = []
    for span in spans:
        network, scheduling = (span.attributes.get(k) for k in (NETWORK_DURATION, SCHEDULING_DELAY))
        if span.kind != "client" or network is None or scheduling is None:
            continue
        start = span.start_us * 1000
        if (start_ns is not None and start < start_ns) or (end_ns is not None and start >= end_ns):
            continue
        try:
            calls.append(
                SpanCall(
                    span.trace_id,
                    start,
                    float(network),
                    float(scheduling),
                    start + span.duration_us * 1000,
                )
            )
        except (TypeError, ValueError):
            continue
    return SpanTimings(tuple(calls)) if calls else None


def read_span_file(
    path: Path, start_ns: int | None = None, end_ns: int | None = None
) -> SpanTimings | None:
    """Upstream-call timings of the span file's spans in [start_ns, end_ns); None if none."""
    return span_timings(from_file(path, strict=False), start_ns, end_ns)


def window_breakdowns(
    spans: Sequence[Span], start_ns: int | None = None, end_ns: int | None = None
) -> tuple[Breakdown, ...]:
    """tracing.readback.breakdown's breakdowns of the traces whose server span started in
    [start_ns, end_ns) (every trace when no window is given)."""
    in_window = {
        s.trace_id
        for s in spans
        if s.kind == "server"
        and (start_ns is None or s.start_us * 1000 >= start_ns)
        and (end_ns is None or s.start_us * 1000 < end_ns)
    }
    return tuple(b for b in breakdowns(list(spans)) if b.trace_id in in_window)


def read_jaeger(
    base_url: str, start_ns: int, end_ns: int
) -> tuple[SpanTimings | None, tuple[Breakdown, ...]]:
    """The window's call timings and breakdowns from Jaeger's query API (Envoy's spans
    included, so the breakdowns tile Envoy's span)."""
    spans = from_jaeger(base_url, limit=JAEGER_LIMIT, lookback="1h", timeout_s=300.0)
    return span_timings(spans, start_ns, end_ns), window_breakdowns(spans, start_ns, end_ns)


def read_span_file_breakdowns(path: Path) -> tuple[Breakdown, ...]:
    """Breakdowns from the span file (pool spans only: the server span is the total)."""
    return window_breakdowns(from_file(path, strict=False)) if path.exists() else ()


def write_breakdowns(path: Path, items: Sequence[Breakdown]) -> None:
    rows = [{"trace_id": b.trace_id, "total_s": b.total_s, "parts": dict(b.parts)} for b in items]
    path.write_text(json.dumps(rows), encoding="utf-8")


def read_breakdowns(path: Path) -> tuple[Breakdown, ...]:
    if not path.exists():
        return ()
    rows = json.loads(path.read_text(encoding="utf-8"))
    return tuple(Breakdown(r["trace_id"], float(r["total_s"]), dict(r["parts"])) for r in rows)
