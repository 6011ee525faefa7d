"""What each route costs the hub and suffers from it, read back from a running service
(its pools' ``/metrics``) or from spans (the span file, Jaeger): the measurements
``pricingctl routes suggest`` places routes by.

One shape for both sources, :class:`RouteUsage`: sums over a window, so that rates and
per-request means come out the same way. From metrics, the window is between two
scrapes (counter deltas); from spans, the spans' own time range.

A pool's /metrics gives the whole pool's totals in one scrape (prometheus_client's
multiprocess mode). An exposition per worker process (series with a ``pid`` label,
each scrape reaching one worker) works too: it is scraped until no new worker shows
up, and the workers' deltas are added up.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from toolkit.contract import HTTP_METHOD_LABEL, HTTP_ROUTE_LABEL
from toolkit.fetch import fetch
from tracing import attributes
from tracing import metric_families as families
from tracing.readback.report import parse_culprits, percentile
from tracing.readback.spans import Span
from tracing.timing.call_state import critical_call


def is_route(label: str) -> bool:
    """Route templates, not the hub, unlabelled greenlets or a worker's own greenlets
    (``<hub>``, ``<unknown>``, ``<metrics sync>``): those are culprits, never placed."""
    return not label.startswith("<")


class UsageSourceError(RuntimeError):
    """Measurements could not be read (a pool unreachable, no data). One line."""


@dataclass(frozen=True)
class RouteUsage:
    """One route's measurements over ``window_s`` seconds (sums, in seconds)."""

    route: str  # "POST /v1/offers/rideshare"
    requests: float
    window_s: float
    #: Time its greenlets ran on the hub (its CPU).
    cpu_s: float
    #: Time in the pool: inbound delay + handler duration.
    wall_s: float
    #: Time its requests waited on the network (critical call).
    network_s: float
    #: Time its requests were ready but waited for the hub (critical path).
    hub_wait_s: float
    #: Seconds of other routes' hub wait during which its greenlets ran.
    caused_s: float
    #: p99 of one request's hub wait (from metrics: the bucket's upper bound).
    hub_wait_p99_s: float | None = None
    #: Whom it delayed: victim route -> seconds.
    victims: Mapping[str, float] = field(default_factory=dict)


# --- Prometheus text --------------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]
#: (metric name, sorted labels without pid) -> value, per worker pid ("" without one).
Samples = dict[str, dict[tuple[str, Labels], float]]


def parse_text(text: str) -> Samples:
    """The samples of one exposition (prometheus_client's parser), by ``pid`` label."""
    out: Samples = defaultdict(dict)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = dict(sample.labels)
                pid = labels.pop("pid", "")
                out[pid][(sample.name, tuple(sorted(labels.items())))] = float(sample.value)
    except ValueError as exc:
        raise UsageSourceError(f"not Prometheus text: {exc}") from None
    return dict(out)


def _fetch(url: str, timeout_s: float) -> str:
    try:
        reply = fetch(url, timeout_s=timeout_s)
    except OSError as exc:
        raise UsageSourceError(f"cannot scrape {url}: {getattr(exc, 'reason', exc)}") from None
    if not reply.ok:
        raise UsageSourceError(f"{url} answered HTTP {reply.status}") from None
    return reply.text


def scrape(
    url: str,
    *,
    settle: int = 6,
    max_tries: int = 30,
    fetch: Callable[[str, float], str] = _fetch,
    timeout_s: float = 10.0,
) -> Samples:
    """Every worker's samples behind *url*: scraped until *settle* scrapes in a row
    showed no new worker (each scrape reaches one worker process). A starved pool (the
    incident this is for) may let a scrape time out: that try counts as quiet; only a
    pool that never answers is an error."""
    seen: Samples = {}
    quiet = 0
    failure: UsageSourceError | None = None
    for _ in range(max_tries):
        try:
            new = parse_text(fetch(url, timeout_s))
        except UsageSourceError as exc:
            if not seen and failure is not None:
                raise  # twice in a row before any answer: down, not busy
            failure = exc
            quiet += 1
            if quiet >= settle:
                break
            continue
        fresh = any(pid not in seen for pid in new)
        seen.update(new)
        if "" in new:  # totals of the whole pool: one scrape says it all
            return seen
        quiet = 0 if fresh else quiet + 1
        if quiet >= settle:
            break
    if not seen and failure is not None:
        raise failure
    return seen


def delta(before: Samples, after: Samples) -> dict[tuple[str, Labels], float]:
    """Counter increases from *before* to *after*, added over the workers seen in both
    and scaled up to every worker seen in either: a worker a scrape missed (busy: a cpu
    worker serves one connection at a time) is assumed as busy as its siblings (Envoy
    balances them), and a worker seen only once has no delta of its own."""
    both = set(before) & set(after)
    if not both:
        return {}
    scale = len(set(before) | set(after)) / len(both)
    out: dict[tuple[str, Labels], float] = defaultdict(float)
    for pid in both:
        earlier = before[pid]
        for key, value in after[pid].items():
            out[key] += max(value - earlier.get(key, 0.0), 0.0) * scale
    return dict(out)


def bucket_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """The upper bound of the bucket holding the *q* (0..1) quantile, from cumulative
    ``(le, count)`` pairs; None without observations. An upper bound, not an estimate
    inside the bucket: "p99 <= 25 ms" is what the histogram knows."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    for bound, count in ordered:
        if count >= rank:
            return bound
    return ordered[-1][0]


def usage_from_metrics(
    counts: Mapping[tuple[str, Labels], float], window_s: float
) -> list[RouteUsage]:
    """Per route, from the counter deltas over a window (:func:`delta`)."""
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    buckets: dict[str, list[tuple[float, float]]] = defaultdict(list)
    victims: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    # Requests and handler time per route from the RED summary, which keeps every route
    # (the timing histograms name the busiest routes only: ``families.ROUTE_TIMING_TOP_K``,
    # the RED histogram too: ``families.RED_TOP_K``); from the handler histogram only for
    # an exposition without it.
    red: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (name, labels), value in counts.items():
        label = dict(labels)
        if name in (
            f"{families.ROUTE_REQUESTS}_count",
            f"{families.ROUTE_REQUESTS}_sum",
        ):
            template = f"{label.get(HTTP_METHOD_LABEL, '')} {label.get(HTTP_ROUTE_LABEL, '')}"
            red[template]["requests" if name.endswith("_count") else "wall_s"] += value
            continue
        route = label.get("route")
        if route is None:
            continue
        if name == families.ROUTE_CULPRIT:
            victim = label.get("victim", "")
            if victim != route:
                victims[route][victim] += value
            continue
        if name == f"{families.HANDLER}_count":
            per[route]["handler_requests"] += value
        elif name == f"{families.HANDLER}_sum":
            per[route]["handler_s"] += value
        elif name == f"{families.INBOUND_DELAY}_sum":
            per[route]["inbound_s"] += value
        elif name == families.ROUTE_CPU:
            per[route]["cpu_s"] += value
        elif name == families.ROUTE_NETWORK:
            per[route]["network_s"] += value
        elif name == f"{families.ROUTE_HUB_WAIT}_sum":
            per[route]["hub_wait_s"] += value
        elif name == f"{families.ROUTE_HUB_WAIT}_bucket":
            le = label.get("le", "+Inf")
            buckets[route].append((float("inf") if le == "+Inf" else float(le), value))
    for route, sums in per.items():
        sums["requests"] = red[route]["requests"] if route in red else sums["handler_requests"]
        if sums["handler_requests"] >= sums["requests"]:
            sums["wall_s"] = sums["handler_s"] + sums["inbound_s"]
        else:
            # Past the timing cap in some worker: its handler and inbound delay are partly
            # in ``<other>``; the RED family's time (the app's, a little shorter) instead.
            sums["wall_s"] = red[route]["wall_s"]
    out = []
    for route in sorted(set(per) | set(victims)):
        if not is_route(route):
            continue
        sums = per[route]
        if not sums["requests"] and not victims[route]:
            continue  # not served in the window
        merged: dict[float, float] = defaultdict(float)
        for bound, count in buckets[route]:
            merged[bound] += count  # the same bucket of every worker
        out.append(
            RouteUsage(
                route=route,
                requests=sums["requests"],
                window_s=window_s,
                cpu_s=sums["cpu_s"],
                wall_s=sums["wall_s"],
                network_s=sums["network_s"],
                hub_wait_s=sums["hub_wait_s"],
                caused_s=sum(victims[route].values()),
                hub_wait_p99_s=bucket_quantile(list(merged.items()), 0.99),
                victims=dict(victims[route]),
            )
        )
    return out


def usage_from_scrapes(
    urls: Sequence[str],
    window_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    fetch: Callable[[str, float], str] = _fetch,
) -> list[RouteUsage]:
    """Scrape every pool, wait *window_s*, scrape again: what happened in between."""
    before = {url: scrape(url, fetch=fetch) for url in urls}
    started = time.monotonic()
    sleep(window_s)
    after = {url: scrape(url, fetch=fetch) for url in urls}
    elapsed = max(time.monotonic() - started, 1e-9)
    counts: dict[tuple[str, Labels], float] = defaultdict(float)
    for url in urls:
        # Workers of different pools never share a pid (one machine); keyed apart anyway.
        for key, value in delta(_by_url(before[url], url), _by_url(after[url], url)).items():
            counts[key] += value
    return usage_from_metrics(counts, elapsed)


def _by_url(samples: Samples, url: str) -> Samples:
    return {f"{url}#{pid}": values for pid, values in samples.items()}


# --- spans ----------------------------------------------------------------------------


def _seconds(value: Any) -> float:
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return 0.0


def usage_from_spans(spans: Iterable[Span], sample_fraction: float = 1.0) -> list[RouteUsage]:
    """Per route, from the pools' server spans and their client spans.

    CPU per request is the handler greenlet's running time (``gevent.handler.running``:
    switched in, so OS preemption counts too; fan-out greenlets do not). Requests are
    counted from the spans Envoy sampled (``pricing.trace.reason=sampled``) and scaled
    by 1 / *sample_fraction*; spans exported because they were slow are left out, so
    the slow do not stand for the whole.
    """
    spans = list(spans)
    children: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        if span.kind == "client" and span.parent_id:
            children[span.parent_id].append(span)
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    waits: dict[str, list[float]] = defaultdict(list)
    victims: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    first_us, last_us = None, None
    for span in spans:
        a = span.attributes
        if span.kind != "server" or attributes.HANDLER_DURATION not in a:
            continue
        if a.get(attributes.TRACE_REASON, "sampled") != "sampled":
            continue
        route = span.name
        first_us = span.start_us if first_us is None else min(first_us, span.start_us)
        end_us = span.start_us + span.duration_us
        last_us = end_us if last_us is None else max(last_us, end_us)
        sums = per[route]
        sums["requests"] += 1
        sums["cpu_s"] += _seconds(a.get(attributes.HANDLER_RUNNING))
        sums["wall_s"] += _seconds(a.get(attributes.INBOUND_DELAY)) + _seconds(
            a.get(attributes.HANDLER_DURATION)
        )
        sums["network_s"] += _seconds(a.get(attributes.CRITICAL_NETWORK))
        wait = sum(
            _seconds(a.get(key))
            for key in (
                attributes.INBOUND_DELAY,
                attributes.CRITICAL_PRESEND_DELAY,
                attributes.CRITICAL_SCHEDULING_DELAY,
                attributes.CRITICAL_WAKE_DELAY,
            )
        )
        sums["hub_wait_s"] += wait
        waits[route].append(wait)
        culprits = parse_culprits(a.get(attributes.INBOUND_CULPRITS))
        critical = _critical_call(children.get(span.span_id, []), a)
        if critical is not None:
            culprits += parse_culprits(critical.attributes.get(attributes.SCHEDULING_CULPRITS))
        for culprit, seconds in culprits:
            if culprit != route:
                victims[culprit][route] += seconds
    if first_us is None or last_us is None:
        return []
    window_s = max((last_us - first_us) / 1e6, 1e-6)
    scale = 1.0 / sample_fraction if sample_fraction > 0 else 1.0
    out = []
    for route in sorted(set(per) | set(victims)):
        if not is_route(route):
            continue
        sums = per[route]
        out.append(
            RouteUsage(
                route=route,
                requests=sums["requests"] * scale,
                window_s=window_s,
                cpu_s=sums["cpu_s"] * scale,
                wall_s=sums["wall_s"] * scale,
                network_s=sums["network_s"] * scale,
                hub_wait_s=sums["hub_wait_s"] * scale,
                caused_s=sum(victims[route].values()) * scale,
                hub_wait_p99_s=percentile(waits[route], 99) if waits[route] else None,
                victims={k: v * scale for k, v in victims[route].items()},
            )
        )
    return out


def _critical_call(calls: Sequence[Span], server: Mapping[str, Any]) -> Span | None:
    """The client span of the server span's critical call (`critical_call`: the last
    to end), among the calls to the upstream the server span names."""
    name = server.get(attributes.CRITICAL_UPSTREAM)
    if not name:
        return None
    matching = (c for c in calls if c.attributes.get(attributes.UPSTREAM) == name)
    return critical_call(matching, lambda c: c.start_us + c.duration_us)
