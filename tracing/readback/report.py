"""Per endpoint and per upstream: where the time of the calls went, and who caused delay."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tracing import attributes
from tracing.readback.breakdown import UNEXPLAINED, Breakdown, breakdown
from tracing.readback.spans import Span
from tracing.timing.call_state import top_culprits


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of *values*, in any order: always a value
    that was observed, never an interpolation between two. The project's one
    percentile (the benchmark uses it too). ValueError for no values."""
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be between 0 and 100, got {q}")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered) / 100)))
    return ordered[rank - 1]


def _percentile_ms(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def parse_culprits(raw: Any) -> list[tuple[str, float]]:
    """`["POST /v1/offers/rideshare=0.2728", ...]` -> [(label, seconds), ...]."""
    out = []
    for item in raw or []:
        label, sep, seconds = str(item).rpartition("=")
        if not sep:
            continue
        try:
            out.append((label, float(seconds)))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class Example:
    """One span of a row, to look at in Jaeger's UI: the trace and the span in it."""

    trace_id: str
    span_id: str
    duration_ms: float


#: Link to a span in a trace viewer, e.g. Jaeger's UI: (trace_id, span_id) -> text.
Linker = Callable[[str, str], str]


@dataclass(frozen=True)
class Row:
    kind: str  # "endpoint" | "upstream"
    name: str
    count: int
    duration_p50_ms: float | None
    duration_p99_ms: float | None
    # Network time and scheduling delay: an upstream's calls', an endpoint's critical
    # call's (`_SPLIT`).
    network_p50_ms: float | None
    network_p99_ms: float | None
    delay_p50_ms: float | None
    delay_p99_ms: float | None
    top_culprits: tuple[tuple[str, float], ...]  # (label, total seconds)
    # The slowest spans of the row, in distinct traces, slowest first.
    slowest: tuple[Example, ...] = ()
    # Of the scheduling delay (sched), the share in % the process waited for a CPU
    # (gevent.scheduling.cpu_wait, an endpoint's critical call's); None without the
    # attribute or without any delay.
    delay_cpu_wait_pct: float | None = None
    # Endpoints: gevent.inbound.delay, its CPU-wait share (gevent.inbound.cpu_wait) and
    # who held the hub meanwhile (gevent.inbound.culprits). None / () on upstreams and on
    # spans from before the inbound measurement.
    inbound_delay_p50_ms: float | None = None
    inbound_delay_p99_ms: float | None = None
    inbound_cpu_wait_pct: float | None = None
    top_inbound_culprits: tuple[tuple[str, float], ...] = ()

    def as_dict(self, link: Linker | None = None) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["top_culprits"] = [{"label": label, "seconds": s} for label, s in self.top_culprits]
        d["top_inbound_culprits"] = [
            {"label": label, "seconds": s} for label, s in self.top_inbound_culprits
        ]
        d["slowest"] = [
            {**e.__dict__, **({"url": link(e.trace_id, e.span_id)} if link else {})}
            for e in self.slowest
        ]
        return d


#: The attributes a row's network, scheduling delay and its CPU wait come from. An
#: endpoint's calls may run in parallel, and its server span's ``gevent.network.duration``
#: is their sum: its row reads the critical call's instead (the call its handler waited
#: for last, picked in the pool by ``call_state.critical_call`` and written on the
#: server span), so its network time never exceeds the request's own time.
_SPLIT = {
    "endpoint": (
        attributes.CRITICAL_NETWORK,
        attributes.CRITICAL_SCHEDULING_DELAY,
        attributes.CRITICAL_CPU_WAIT,
    ),
    "upstream": (
        attributes.NETWORK_DURATION,
        attributes.SCHEDULING_DELAY,
        attributes.SCHEDULING_CPU_WAIT,
    ),
}


def summarize(spans: Iterable[Span], top: int = 3, examples: int = 3) -> list[Row]:
    groups: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for span in spans:
        if span.service == "envoy":
            continue  # Envoy's span is the whole request again, seen from the proxy
        if span.kind == "server":
            groups[("endpoint", span.name)].append(span)
        elif span.kind == "client":
            groups[("upstream", span.name)].append(span)
    rows = []
    for (kind, name), members in sorted(groups.items()):
        durations = [s.duration_us / 1000 for s in members]
        network_key, delay_key, cpu_wait_key = _SPLIT[kind]
        network = _ms(members, network_key)
        delay = _ms(members, delay_key)
        inbound = _ms(members, attributes.INBOUND_DELAY)
        rows.append(
            Row(
                kind=kind,
                name=name,
                count=len(members),
                duration_p50_ms=_percentile_ms(durations, 50),
                duration_p99_ms=_percentile_ms(durations, 99),
                network_p50_ms=_percentile_ms(network, 50),
                network_p99_ms=_percentile_ms(network, 99),
                delay_p50_ms=_percentile_ms(delay, 50),
                delay_p99_ms=_percentile_ms(delay, 99),
                top_culprits=_top_culprits(members, attributes.SCHEDULING_CULPRITS, top),
                slowest=_slowest(members, examples),
                delay_cpu_wait_pct=_share_pct(members, cpu_wait_key, delay_key),
                inbound_delay_p50_ms=_percentile_ms(inbound, 50),
                inbound_delay_p99_ms=_percentile_ms(inbound, 99),
                inbound_cpu_wait_pct=_share_pct(
                    members, attributes.INBOUND_CPU_WAIT, attributes.INBOUND_DELAY
                ),
                top_inbound_culprits=_top_culprits(members, attributes.INBOUND_CULPRITS, top),
            )
        )
    return rows


def _top_culprits(spans: Iterable[Span], key: str, top: int) -> tuple[tuple[str, float], ...]:
    """The culprits of attribute *key*, seconds summed across spans, largest first."""
    culprits: dict[str, float] = defaultdict(float)
    for span in spans:
        for label, seconds in parse_culprits(span.attributes.get(key)):
            culprits[label] += seconds
    return tuple(top_culprits(culprits, top))


def _number(value: Any) -> float | None:
    # bool is an int: a flag is not a duration.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _share_pct(spans: Iterable[Span], part_key: str, whole_key: str) -> float | None:
    """Sum of *part_key* over sum of *whole_key* in % (spans carrying both; the part is
    at most its whole); None when no span carries both or the whole is zero."""
    part = whole = 0.0
    for span in spans:
        p = _number(span.attributes.get(part_key))
        w = _number(span.attributes.get(whole_key))
        if p is None or w is None:
            continue
        part += max(0.0, min(p, w))
        whole += w
    return 100 * part / whole if whole > 0 else None


def _slowest(spans: Iterable[Span], count: int) -> tuple[Example, ...]:
    """The slowest spans, at most one per trace (one trace says it all), slowest first."""
    out: list[Example] = []
    seen: set[str] = set()
    for span in sorted(spans, key=lambda s: -s.duration_us):
        if len(out) == count:
            break
        if span.trace_id in seen:
            continue
        seen.add(span.trace_id)
        out.append(Example(span.trace_id, span.span_id, span.duration_us / 1000))
    return tuple(out)


def _ms(spans: Iterable[Span], key: str) -> list[float]:
    out = []
    for span in spans:
        value = span.attributes.get(key)
        if isinstance(value, int | float):
            out.append(float(value) * 1000)
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _culprits(culprits: Sequence[tuple[str, float]]) -> str:
    return ", ".join(f"{label}={s:.3f}" for label, s in culprits)


def render_table(rows: Sequence[Row]) -> str:
    if not rows:
        return "no spans of pricingservice yet: send some traffic first"
    # The fixed columns end at 119 characters; the culprits follow.
    header = (
        f"{'':9}{'name (times in ms)':28}{'count':>6}  {'dur p50':>7}{'p99':>7}"
        f"  {'net p50':>7}{'p99':>7}  {'sched p50':>9}{'p99':>7}{'cpu%':>5}"
        f"  {'inb p50':>7}{'p99':>7}{'cpu%':>5}  top culprits (s caused)"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        culprits = _culprits(row.top_culprits)
        if row.top_inbound_culprits:
            inbound = f"inbound: {_culprits(row.top_inbound_culprits)}"
            culprits = f"{culprits}; {inbound}" if culprits else inbound
        lines.append(
            f"{row.kind:9}{row.name[:27]:28}{row.count:>6}  {_fmt(row.duration_p50_ms):>7}"
            f"{_fmt(row.duration_p99_ms):>7}  {_fmt(row.network_p50_ms):>7}"
            f"{_fmt(row.network_p99_ms):>7}  {_fmt(row.delay_p50_ms):>9}"
            f"{_fmt(row.delay_p99_ms):>7}{_pct(row.delay_cpu_wait_pct):>5}"
            f"  {_fmt(row.inbound_delay_p50_ms):>7}{_fmt(row.inbound_delay_p99_ms):>7}"
            f"{_pct(row.inbound_cpu_wait_pct):>5}  {culprits or '-'}"
        )
    lines.append(
        "times in ms; net = network + upstream time (kernel receive time), "
        "sched = waiting for the gevent hub after the bytes arrived"
    )
    lines.append(
        "endpoint net / sched: its critical call's (the one the handler waited for last), "
        "not a sum over parallel calls"
    )
    lines.append(
        "inb = inbound delay: the request's bytes in the pool's kernel until its handler ran"
    )
    lines.append(
        "cpu% = share of sched / inb the process waited for a CPU (run queue); "
        "the rest, other greenlets held the hub"
    )
    return "\n".join(lines)


def render_examples(rows: Sequence[Row], link: Linker, heading: str) -> str:
    """Each row's slowest span, rows with the slowest first: from the table to the picture
    in one click."""
    ranked = sorted((r for r in rows if r.slowest), key=lambda r: -r.slowest[0].duration_ms)
    if not ranked:
        return ""
    lines = [heading]
    for row in ranked:
        example = row.slowest[0]
        lines.append(
            f"  {row.kind:9}{row.name[:29]:30}{example.duration_ms:>8.1f} ms  "
            f"{link(example.trace_id, example.span_id)}"
        )
    return "\n".join(lines)


def _ms_or_dash(seconds: Any) -> str:
    value = _number(seconds)
    return "-" if value is None else f"{value * 1000:.1f}"


def _is_pool_server(span: Span) -> bool:
    return span.kind == "server" and span.service != "envoy"


def server_breakdowns(spans: Sequence[Span]) -> dict[str, Breakdown | None]:
    """Span id -> the breakdown of each pool server span of one trace (with Envoy's span
    when it is the parent); None for a span without the gevent measurement."""
    by_id = {s.span_id: s for s in spans}
    out: dict[str, Breakdown | None] = {}
    for span in spans:
        if not _is_pool_server(span):
            continue
        parent = by_id.get(span.parent_id) if span.parent_id else None
        envoy = parent if parent is not None and parent.service == "envoy" else None
        out[span.span_id] = breakdown(span, envoy)
    return out


def breakdown_as_dict(result: Breakdown) -> dict[str, Any]:
    """A breakdown in ms: every part in tiling order, then ``unexplained``."""
    parts = {name: seconds * 1000 for name, seconds in result.parts.items()}
    parts[UNEXPLAINED] = result.unexplained_s * 1000
    return {"total_ms": result.total_s * 1000, "parts_ms": parts, "adds_up": result.adds_up()}


def trace_as_dicts(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """One trace's spans for ``--json``; each pool server span also carries its
    ``breakdown`` (None without the gevent measurement)."""
    breakdowns = server_breakdowns(spans)
    out = []
    for span in spans:
        d = dict(span.__dict__)
        if span.span_id in breakdowns:
            result = breakdowns[span.span_id]
            d["breakdown"] = None if result is None else breakdown_as_dict(result)
        out.append(d)
    return out


def _timing(span: Span) -> str:
    """What a span's line says after its name: the split of its call's time (a pool
    server span: its critical call's), and for a pool server span its inbound delay;
    '-' for what an older span does not carry."""
    attrs = span.attributes
    text = ""
    network_key, delay_key, cpu_wait_key = _SPLIT[
        "endpoint" if _is_pool_server(span) else "upstream"
    ]
    net = _number(attrs.get(network_key))
    delay = _number(attrs.get(delay_key))
    if net is not None and delay is not None:
        text += (
            f"  net {net * 1000:.1f} / sched {delay * 1000:.1f}"
            f" (cpu wait {_ms_or_dash(attrs.get(cpu_wait_key))})"
        )
    text += _who(attrs.get(attributes.SCHEDULING_CULPRITS))
    if _is_pool_server(span):
        text += (
            f"  inbound {_ms_or_dash(attrs.get(attributes.INBOUND_DELAY))}"
            f" (cpu wait {_ms_or_dash(attrs.get(attributes.INBOUND_CPU_WAIT))})"
        )
        text += _who(attrs.get(attributes.INBOUND_CULPRITS))
    return text


def _who(raw: object) -> str:
    """``"  <- route ms, ..."`` for a culprits attribute; empty without culprits."""
    culprits = parse_culprits(raw)
    if not culprits:
        return ""
    return "  <- " + ", ".join(f"{label} {s * 1000:.1f}" for label, s in culprits)


def _render_breakdown(span: Span, result: Breakdown | None) -> list[str]:
    if result is None:
        return [f"where the time of {span.name} went: - (no gevent measurement on its span)"]
    of = (
        "Envoy's span"
        if "envoy before pool" in result.parts
        else "no Envoy span: the server span + its inbound delay"
    )
    lines = [
        f"where the {result.total_s * 1000:.1f} ms of {span.name} went ({of}; "
        "parts in order, ms and share):"
    ]
    rows = [*result.parts.items(), (UNEXPLAINED, result.unexplained_s)]
    for name, seconds in rows:
        share = 100 * seconds / result.total_s if result.total_s > 0 else 0.0
        lines.append(f"{'':8} {seconds * 1000:8.1f} {share:4.0f}%  {name}")
    return lines


def waterfall(spans: Sequence[Span]) -> str:
    """One trace as an indented tree, each call with its network / scheduling split, and
    then where each pool server span's time went (:func:`tracing.readback.breakdown.breakdown`)."""
    if not spans:
        return "empty trace"
    by_id = {s.span_id: s for s in spans}
    children: dict[str | None, list[Span]] = defaultdict(list)
    for span in spans:
        parent = span.parent_id if span.parent_id in by_id else None
        children[parent].append(span)
    start = min(s.start_us for s in spans)
    lines = [f"trace {spans[0].trace_id}  ({len(spans)} spans; offsets and durations in ms)"]

    def walk(span: Span, depth: int) -> None:
        offset = (span.start_us - start) / 1000
        lines.append(
            f"{offset:8.1f} {span.duration_us / 1000:8.1f}  {'  ' * depth}"
            f"{span.service}: {span.name} [{span.kind}]{_timing(span)}"
        )
        for child in sorted(children.get(span.span_id, []), key=lambda s: s.start_us):
            walk(child, depth + 1)

    for root in sorted(children[None], key=lambda s: s.start_us):
        walk(root, 0)
    for span_id, result in server_breakdowns(spans).items():
        lines.extend(["", *_render_breakdown(by_id[span_id], result)])
    return "\n".join(lines)
