"""Span and resource attribute names of pricingservice's own (never string literals
elsewhere). The standard ones (HTTP, server, URL) come from ``opentelemetry.semconv``.

Durations follow the OpenTelemetry convention: seconds as floats. The ``gevent.*``
names carry a :class:`tracing.timing.call_timing.CallTiming`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: Time the upstream call spent waiting for the network: from the start of a socket wait
#: (or the request send) until the reply bytes arrived in the kernel (seconds).
NETWORK_DURATION: Final = "gevent.network.duration"

#: Time the calling greenlet was ready to run but waited for the hub: reply bytes sat in
#: the kernel, or a zero-timeout yield waited for its turn (seconds).
SCHEDULING_DELAY: Final = "gevent.scheduling.delay"

#: Who ran while the call waited: a list of ``"<label>=<seconds>"`` strings, largest
#: first. Labels are route names (``"POST /v1/offers/rideshare"``), ``"<hub>"`` or
#: ``"<unknown>"``.
SCHEDULING_CULPRITS: Final = "gevent.scheduling.culprits"

#: Time switched out for other reasons: locks, pool queues, DNS on the thread pool, timers
#: that had not expired yet (seconds). Neither network nor scheduling delay.
BLOCKED_DURATION: Final = "gevent.blocked.duration"

#: Server span: how many upstream calls the request made (its sums cover these).
UPSTREAM_CALLS: Final = "pricing.upstream_calls"

#: Client span: the upstream's name (``vehicles``, ``routing``, ``promotions``).
UPSTREAM: Final = "pricing.upstream"

#: Resource: the pool the worker process serves (``io``, ``cpu``, ``shared``).
POOL: Final = "pricing.pool"

# --- where the process waited for a CPU -----------------------------------------------

#: Of ``gevent.scheduling.delay`` (client span; server span: the sum over its calls),
#: the time this process's hub thread was runnable but not on a CPU: a busy machine,
#: the pool next door, a CPU quota (seconds). The rest, other greenlets held the hub.
SCHEDULING_CPU_WAIT: Final = "gevent.scheduling.cpu_wait"

# --- the server span's breakdown: every part of an offer's time -------------------------

#: Server span: from the moment the request's first bytes reached the pool's kernel
#: until its handler started (seconds): it sat in the socket while the hub ran other
#: greenlets, or while the process waited for a CPU.
INBOUND_DELAY: Final = "gevent.inbound.delay"
#: Of ``gevent.inbound.delay``, the time the process waited for a CPU (seconds).
INBOUND_CPU_WAIT: Final = "gevent.inbound.cpu_wait"
#: Who held the hub during the inbound delay, as ``gevent.scheduling.culprits``.
INBOUND_CULPRITS: Final = "gevent.inbound.culprits"

#: Server span: from the handler's start to its end (seconds); running + waiting.
HANDLER_DURATION: Final = "gevent.handler.duration"
#: Server span: time the handler greenlet itself ran (its CPU, Flask, JSON; seconds).
HANDLER_RUNNING: Final = "gevent.handler.running"
#: Server span: time the handler greenlet was switched out, waiting for its upstream
#: calls (seconds); the critical call below explains it.
HANDLER_WAITING: Final = "gevent.handler.waiting"

#: Server span: the upstream whose call ended last, the one the handler waited for.
CRITICAL_UPSTREAM: Final = "gevent.critical.upstream"
#: From the handler switching out until the critical call began: its greenlet waited
#: for its turn behind the other calls and greenlets (seconds).
CRITICAL_PRESEND_DELAY: Final = "gevent.critical.presend_delay"
#: The critical call's network time and scheduling delay (as on its client span).
CRITICAL_NETWORK: Final = "gevent.critical.network.duration"
CRITICAL_SCHEDULING_DELAY: Final = "gevent.critical.scheduling.delay"
CRITICAL_CPU_WAIT: Final = "gevent.critical.scheduling.cpu_wait"
#: The critical call's own CPU and other waits: duration - network - delay (seconds).
CRITICAL_RUNNING: Final = "gevent.critical.running"
#: From the critical call's end until the handler ran again (seconds).
CRITICAL_WAKE_DELAY: Final = "gevent.critical.wake_delay"
#: Handler running while the critical call was in flight (part of
#: ``gevent.handler.running``, concurrent with the call, so not added twice; seconds).
CRITICAL_OVERLAP: Final = "gevent.critical.overlap"

#: Server span: from Envoy receiving the request (its ``%START_TIME%``, sent in the
#: ``x-pricing-envoy-start`` header) until the request's bytes reached the pool's
#: kernel: Envoy's queue for a connection, and the proxying (seconds).
ENVOY_BEFORE_POOL: Final = "pricing.envoy.before_pool"

#: Server span: why the span was exported: ``sampled`` (Envoy sampled the trace) or
#: ``slow`` (slower than its route's threshold; exported whatever the sampling: such a
#: trace has no Envoy span).
TRACE_REASON: Final = "pricing.trace.reason"
#: Server span of a slow-kept trace (``slow``): the id of Envoy's span, which was not
#: exported. The server span is the trace's root (no parent Jaeger could not find) and
#: names it here instead; a span link would not do: Jaeger reads a link within the same
#: trace as a parent, and warns that it is missing.
EDGE_SPAN_ID: Final = "pricing.trace.edge_span_id"
#: ``true`` on the server span of a request slower than its route's threshold:
#: searchable in Jaeger as the tag ``pricing.slow=true``.
SLOW: Final = "pricing.slow"

# --- span events: where network time ended and waiting began ------------------------------

#: Client span event at the moment the reply's bytes reached this host's kernel.
EVENT_REPLY_IN_KERNEL: Final = "reply reached kernel"
#: Server span event at the moment the request's first bytes reached the pool's kernel.
EVENT_REQUEST_IN_KERNEL: Final = "request reached kernel"
#: Server span event at the moment the handler started.
EVENT_HANDLER_STARTED: Final = "handler started"

# --- child spans: the wait, drawn in the waterfall (``tracing.wait_spans``) --------------

#: Child of a delayed call span: the request sent -> its reply reached the kernel.
SPAN_NETWORK: Final = "network"
#: Child of a delayed call span (the reply in the kernel -> the greenlet ran) or server
#: span (the request in the kernel -> its handler started), with
#: ``gevent.scheduling.culprits`` and ``.cpu_wait``.
SPAN_LOOP_WAIT: Final = "waiting for the event loop"

#: ``true`` on the server span of a delayed request
#: (``tracing.timing.server_timing.is_delayed``: it waited at least 50 ms for the hub
#: along its critical path). Jaeger's search matches tags as text (it cannot
#: do ``gevent.scheduling.delay>0.05``): ``pricing.delayed=true`` finds the requests
#: other greenlets held up.
DELAYED: Final = "pricing.delayed"


def culprit_list(culprits: Iterable[tuple[str, float]]) -> list[str]:
    """The value of :data:`SCHEDULING_CULPRITS` and :data:`INBOUND_CULPRITS`:
    ``["<label>=<seconds>", ...]`` in the order given (``call_state.top_culprits``'s,
    largest first). ``tracing.readback.report.parse_culprits`` reads it back."""
    return [f"{label}={seconds:.6f}" for label, seconds in culprits]
