"""Why requests missed their cap, told from their traces alone: for each late request,
how long its critical upstream call was on the network, how long the request waited
for the event loop, and behind which routes; then the same summed over every late
request. `pricingctl incident` prints it the way Lyft's post tells its incident:

    routing answered in 112 ms; the offer took 1.3 s: 1.17 s waiting for the event
    loop, 94 % of it behind POST /v1/offers/rideshare

Waiting for the event loop is every wait on the request's critical path that
``tracing.readback.breakdown`` measures: the inbound delay, the pre-send delay, the
critical call's scheduling delay and the wake delay. Its culprits are the ones the
pool recorded: the server span's inbound culprits and the critical call's
(``gevent.scheduling.culprits`` on its client span). The part the process spent
waiting for a CPU (the run queue, not another greenlet) has no culprit route.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tracing import attributes as a
from tracing.readback.breakdown import breakdown
from tracing.readback.report import parse_culprits, percentile
from tracing.readback.spans import Span
from tracing.timing.call_state import top_culprits

#: The breakdown's parts that are waits for the event loop (the rest is network,
#: running, and Envoy).
LOOP_WAITS = (
    "inbound cpu wait",
    "inbound hub busy",
    "presend delay",
    "delay cpu wait",
    "delay hub busy",
    "wake delay",
)
#: Of those, the process waiting for a CPU: no greenlet of its own held it up.
CPU_WAITS = ("inbound cpu wait", "delay cpu wait")


@dataclass(frozen=True)
class Late:
    """One request that missed its cap, from its trace."""

    trace_id: str
    span_id: str  # the pool's server span
    endpoint: str  # the server span's name, "GET /v1/offers/bike"
    total_s: float
    wait_s: float  # waiting for the event loop, on its critical path
    cpu_wait_s: float  # of wait_s, the process waited for a CPU
    upstream: str  # the critical call's upstream ("routing")
    network_s: float  # the critical call's network time
    culprits: Mapping[str, float] = field(default_factory=dict)  # label -> seconds

    def share(self, label: str) -> float:
        """Share of the wait spent behind *label* (0 without a wait)."""
        return self.culprits.get(label, 0.0) / self.wait_s if self.wait_s > 0 else 0.0

    @property
    def top(self) -> str | None:
        ranked = top_culprits(self.culprits, 1)
        return ranked[0][0] if ranked else None


@dataclass(frozen=True)
class Diagnosis:
    """Every late request of a window, and what they have in common."""

    cap_s: float
    late: tuple[Late, ...]
    traced: int  # requests of the watched endpoints with a measured trace

    @property
    def by_endpoint(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for late in self.late:
            counts[late.endpoint] += 1
        return dict(sorted(counts.items()))

    @property
    def culprits(self) -> list[tuple[str, float]]:
        """Culprit routes by seconds of wait caused, summed over the late requests."""
        total: dict[str, float] = defaultdict(float)
        for late in self.late:
            for label, seconds in late.culprits.items():
                total[label] += seconds
        return top_culprits(total, len(total))

    @property
    def culprit(self) -> str | None:
        """The route that held the late requests up the longest: a route label, never
        ``<hub>`` or ``<unknown>``."""
        return next((label for label, _ in self.culprits if not label.startswith("<")), None)

    @property
    def wait_s(self) -> float:
        return sum(late.wait_s for late in self.late)

    def median(self, attr: str) -> float | None:
        values = [float(getattr(late, attr)) for late in self.late]
        return percentile(values, 50) if values else None

    def example(self) -> Late | None:
        """The trace to open first: the slowest late request that made an upstream call
        and whose wait the culprit caused most of (else the slowest with a call, else
        the slowest)."""
        called = [x for x in self.late if x.upstream and x.network_s > 0]
        culprit = self.culprit
        behind = [x for x in called if culprit is not None and x.top == culprit]
        return max(behind or called or self.late, key=lambda x: x.total_s, default=None)


def _children(spans: Iterable[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        if span.parent_id:
            out[span.parent_id].append(span)
    return out


def _culprits(server: Span, calls: Sequence[Span], upstream: str) -> dict[str, float]:
    """The inbound culprits and the critical call's, by label."""
    out: dict[str, float] = defaultdict(float)
    raw = [server.attributes.get(a.INBOUND_CULPRITS)]
    raw += [c.attributes.get(a.SCHEDULING_CULPRITS) for c in calls if _upstream(c) == upstream]
    for value in raw[:2]:  # the critical call once, even if retried
        for label, seconds in parse_culprits(value):
            out[label] += seconds
    return dict(out)


def _upstream(span: Span) -> str:
    return str(span.attributes.get(a.UPSTREAM, ""))


def _number(attrs: Mapping[str, object], key: str) -> float:
    value = attrs.get(key, 0.0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def diagnose(spans: Sequence[Span], endpoints: Iterable[str], cap_s: float) -> Diagnosis:
    """The requests to *endpoints* (server span names) slower than *cap_s* in *spans*,
    each with its split and culprits."""
    watched = set(endpoints)
    by_id = {s.span_id: s for s in spans}
    children = _children(spans)
    late: list[Late] = []
    traced = 0
    for server in spans:
        if server.kind != "server" or server.service == "envoy" or server.name not in watched:
            continue
        parent = by_id.get(server.parent_id or "")
        envoy = parent if parent is not None and parent.service == "envoy" else None
        result = breakdown(server, envoy)
        if result is None:
            continue
        traced += 1
        if result.total_s <= cap_s:
            continue
        upstream = str(server.attributes.get(a.CRITICAL_UPSTREAM, ""))
        late.append(
            Late(
                trace_id=server.trace_id,
                span_id=server.span_id,
                endpoint=server.name,
                total_s=result.total_s,
                wait_s=sum(result.parts.get(p, 0.0) for p in LOOP_WAITS),
                cpu_wait_s=sum(result.parts.get(p, 0.0) for p in CPU_WAITS),
                upstream=upstream,
                network_s=_number(server.attributes, a.CRITICAL_NETWORK),
                culprits=_culprits(server, children.get(server.span_id, []), upstream),
            )
        )
    return Diagnosis(cap_s, tuple(sorted(late, key=lambda x: -x.total_s)), traced)


def duration(seconds: float) -> str:
    """``"112 ms"`` under a second, ``"1.3 s"`` from one."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.3g} s"


def tell(late: Late, what: str = "the offer") -> str:
    """One late request the way the seed tells it."""
    text = (
        f"{late.upstream or 'its upstream'} answered in {duration(late.network_s)}; "
        f"{what} took {duration(late.total_s)}: {duration(late.wait_s)} waiting for the event loop"
    )
    top = late.top
    if top is not None and late.wait_s > 0:
        text += f", {100 * late.share(top):.0f} % of it behind {top}"
    if late.cpu_wait_s >= 0.1 * late.wait_s > 0:
        text += f" ({duration(late.cpu_wait_s)} of it the process waited for a CPU)"
    return text
