"""Where one request's time went, read back from its trace: every part of Envoy's span.

The parts tile the request's time, in order:

- ``envoy before pool``: Envoy got the request -> its bytes reached the pool's kernel
  (Envoy's queue for a connection, proxying);
- ``inbound delay``: -> the handler started; split into ``inbound cpu wait`` (the
  process waited for a CPU) and ``inbound hub busy`` (other greenlets held the hub);
- ``handler running``: the handler's own CPU outside its critical call;
- ``presend delay``: the handler waited -> the critical upstream call began;
- ``network``: the critical call waiting for its reply;
- ``scheduling delay``: the reply sat in the kernel (``cpu wait`` + ``hub busy``);
- ``call running``: the critical call's own CPU and other waits;
- ``wake delay``: the critical call ended -> the handler ran again;
- ``teardown``: the handler ended -> the server span ended (Flask's teardown and the
  span's own end; a GIL handed to the span exporter's thread shows up here);
- ``response + envoy after``: the server span ended -> Envoy's span ended (the pool
  writing its response, Envoy forwarding it).

``unexplained`` is what is left of Envoy's span: the handler's time that neither its
own running nor its critical call explains (a second wait, say). Every other part is
a measured interval between two timestamps.
Without Envoy's span (a slow request Envoy did not sample), the server span's own
time is the total and the Envoy parts are absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tracing import attributes as a
from tracing.readback.spans import Span

PARTS = (
    "envoy before pool",
    "inbound cpu wait",
    "inbound hub busy",
    "handler running",
    "presend delay",
    "network",
    "delay cpu wait",
    "delay hub busy",
    "call running",
    "wake delay",
    "teardown",
    "response + envoy after",
)
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class Breakdown:
    """Seconds per part of one request; ``total_s`` is Envoy's span (or the server's)."""

    trace_id: str
    total_s: float
    parts: Mapping[str, float] = field(default_factory=dict)

    @property
    def explained_s(self) -> float:
        return sum(self.parts.values())

    @property
    def unexplained_s(self) -> float:
        return self.total_s - self.explained_s

    def adds_up(self, abs_s: float = 0.001, rel: float = 0.03) -> bool:
        """The parts sum to the total within max(abs_s, rel x total)."""
        return abs(self.unexplained_s) <= max(abs_s, rel * self.total_s)


def _f(attrs: Mapping[str, object], key: str) -> float:
    value = attrs.get(key, 0.0)
    return float(value) if isinstance(value, int | float) else 0.0


def breakdown(server: Span, envoy: Span | None = None) -> Breakdown | None:
    """The breakdown of a request from its pool's server span (and Envoy's span);
    None when the server span carries no measurement (tracing without the gevent
    instrumentation)."""
    attrs = server.attributes
    if a.HANDLER_RUNNING not in attrs:
        return None
    inbound = _f(attrs, a.INBOUND_DELAY)
    inbound_cpu = min(_f(attrs, a.INBOUND_CPU_WAIT), inbound)
    delay = _f(attrs, a.CRITICAL_SCHEDULING_DELAY)
    network = _f(attrs, a.CRITICAL_NETWORK)
    delay_cpu = min(_f(attrs, a.CRITICAL_CPU_WAIT), delay)
    parts = {
        "inbound cpu wait": inbound_cpu,
        "inbound hub busy": inbound - inbound_cpu,
        "handler running": _f(attrs, a.HANDLER_RUNNING) - _f(attrs, a.CRITICAL_OVERLAP),
        "presend delay": _f(attrs, a.CRITICAL_PRESEND_DELAY),
        "network": network,
        "delay cpu wait": delay_cpu,
        "delay hub busy": delay - delay_cpu,
        "call running": _f(attrs, a.CRITICAL_RUNNING),
        "wake delay": _f(attrs, a.CRITICAL_WAKE_DELAY),
    }
    if envoy is None:
        total = server.duration_us / 1e6 + inbound
        return Breakdown(server.trace_id, total, parts)
    before = _f(attrs, a.ENVOY_BEFORE_POOL)
    parts["envoy before pool"] = before
    server_end_us = server.start_us + server.duration_us
    handler_end_us = envoy.start_us + (before + inbound + _f(attrs, a.HANDLER_DURATION)) * 1e6
    parts["teardown"] = (server_end_us - handler_end_us) / 1e6
    parts["response + envoy after"] = (envoy.start_us + envoy.duration_us - server_end_us) / 1e6
    ordered = {name: parts[name] for name in PARTS if name in parts}
    return Breakdown(server.trace_id, envoy.duration_us / 1e6, ordered)


def breakdowns(spans: list[Span], server_name: str | None = None) -> list[Breakdown]:
    """One breakdown per trace that has a measured server span (named *server_name*,
    if given), with Envoy's span when the trace has it."""
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    out = []
    for trace in by_trace.values():
        servers = [
            s
            for s in trace
            if s.kind == "server"
            and s.service != "envoy"
            and (server_name is None or s.name == server_name)
        ]
        if not servers:
            continue
        server = servers[0]
        envoy = next(
            (s for s in trace if s.service == "envoy" and s.span_id == server.parent_id), None
        )
        result = breakdown(server, envoy)
        if result is not None:
            out.append(result)
    return out
