"""The wait drawn in Jaeger's waterfall: child spans under a delayed call and a delayed
request, built from what the timing core measured.

A call span whose scheduling delay reaches the threshold (``PRICING_TRACE_WAIT_SPANS_MS``)
gets two children: ``network`` (the request sent -> its reply reached this host's kernel)
and ``waiting for the event loop`` (the reply in the kernel -> the greenlet ran), the
latter naming its culprits. A server span whose inbound delay reaches it gets a
``waiting for the event loop`` child of its own (the request's bytes in the kernel ->
its handler started: before the server span itself begins). The children tile the
measured parts: ``network`` ends at the reply's kernel stamp and lasts the call's
network time, the wait starts there and lasts its scheduling delay (each clipped to the
call); a delay spent before the send (rare, short yields) is drawn after the reply with
the rest. A call without a kernel stamp gets no children: nothing says where to draw
them.

Only sampled and slow-kept requests reach this module (``tracing.span_records`` builds
the children beside the spans on the exporter thread, the hub only counting them;
``tracing.client`` and ``tracing.request_spans`` start them on the SDK's live spans):
an unsampled request pays nothing, and a request under the threshold pays one
comparison per call. The cost per child is measured by
``pricingctl bench span-cost``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tracing import attributes
from tracing.timing.call_state import CallTiming, top_culprits
from tracing.timing.server_timing import RequestTiming

_NS_PER_S = 1_000_000_000
#: The children of a delayed call span (``call_wait_spans``): network, the wait.
CALL_WAIT_SPANS: Final = 2


class WaitSpan(NamedTuple):
    """One child span to draw: its name (``attributes.SPAN_NETWORK`` or
    ``attributes.SPAN_LOOP_WAIT``), its start and end (Unix ns) and its attributes."""

    name: str
    start_unix_ns: int
    end_unix_ns: int
    attributes: dict[str, Any]


def _wait_attributes(culprits: Mapping[str, float], cpu_wait_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {attributes.SCHEDULING_CPU_WAIT: cpu_wait_s}
    if culprits:
        out[attributes.SCHEDULING_CULPRITS] = attributes.culprit_list(top_culprits(culprits))
    return out


def call_drawn(
    timing: CallTiming | None, start_unix_ns: int, end_unix_ns: int, threshold_s: float | None
) -> bool:
    """Whether a call gets its ``CALL_WAIT_SPANS`` children (``call_wait_spans``): what
    the hub counts a built request's spans by, without building them."""
    if threshold_s is None or timing is None or timing.scheduling_delay_s < threshold_s:
        return False
    arrived = timing.reply_arrived_unix_ns
    return arrived is not None and start_unix_ns <= arrived <= end_unix_ns


def call_wait_spans(
    timing: CallTiming | None, start_unix_ns: int, end_unix_ns: int, threshold_s: float | None
) -> list[WaitSpan]:
    """The children of a call span from *start_unix_ns* to *end_unix_ns* measured as
    *timing*: none when its scheduling delay is under *threshold_s* (None: never) or
    its reply has no kernel stamp."""
    if not call_drawn(timing, start_unix_ns, end_unix_ns, threshold_s):
        return []
    assert timing is not None and timing.reply_arrived_unix_ns is not None
    arrived = timing.reply_arrived_unix_ns
    sent = max(start_unix_ns, arrived - round(timing.network_s * _NS_PER_S))
    ran = min(end_unix_ns, arrived + round(timing.scheduling_delay_s * _NS_PER_S))
    return [
        WaitSpan(attributes.SPAN_NETWORK, sent, arrived, {}),
        WaitSpan(
            attributes.SPAN_LOOP_WAIT,
            arrived,
            ran,
            _wait_attributes(timing.culprits, timing.cpu_wait_s),
        ),
    ]


def inbound_wait_spans(timing: RequestTiming, threshold_s: float | None) -> list[WaitSpan]:
    """The child of a server span measured as *timing*: its inbound delay, when that
    reached *threshold_s* (None: never)."""
    delay = timing.inbound_delay_s
    arrived = timing.arrival_unix_ns
    if threshold_s is None or delay is None or arrived is None or delay < threshold_s:
        return []
    return [
        WaitSpan(
            attributes.SPAN_LOOP_WAIT,
            arrived,
            timing.start_unix_ns,
            _wait_attributes(timing.inbound_culprits, timing.inbound_cpu_wait_s),
        )
    ]


def start_wait_spans(tracer: trace.Tracer, parent: trace.Span, waits: Sequence[WaitSpan]) -> None:
    """*waits* as spans started and ended at once under the live span *parent* (the
    SDK's path)."""
    if not waits:
        return
    context = trace.set_span_in_context(parent)
    for wait in waits:
        span = tracer.start_span(
            wait.name,
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=wait.attributes,
            start_time=wait.start_unix_ns,
        )
        span.end(end_time=wait.end_unix_ns)
