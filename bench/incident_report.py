"""The figures of `pricingctl incident`, from the app clients' samples: offers within
the cap (and in nines), their percentiles, the flicker each client saw, the requests
that failed while the move ran, and the run as a time series for the plot.

An offer is *present* in a poll when it came back 200 within the cap; a *flicker* is a
client's offer present in one poll and absent from that client's next poll of the same
kind (the app showed it, then dropped it). Failed requests are answers other than 200
(and requests that got none), whatever their kind; an offer that came back late is a
miss of its cap, not a failure.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.loadgen import FAILURE_NAMES, Samples
from bench.schedule import Arrival
from bench.stats import OK_STATUS, GroupStats, Rows
from tracing.readback.report import percentile

#: Seconds per point of the time series.
BIN_S = 5.0


@dataclass(frozen=True)
class Sent:
    """One request that was sent: its arrival (kind, client) and its sample."""

    arrival: Arrival
    status: int
    latency_s: float


def sent(schedule: Sequence[Arrival], samples: Samples) -> list[Sent]:
    """The samples joined with the arrivals they were sent for (samples are the
    schedule's first arrivals, in order: the generator may have been asked to end)."""
    return [
        Sent(arrival, status, latency)
        for arrival, status, latency in zip(
            schedule, samples.status, samples.latency_s, strict=False
        )
    ]


def nines(share: float | None) -> float | None:
    """0.995 -> 2.3; None for no share, or when every request made it (as many nines
    as the count can show: say "all", not infinity)."""
    if share is None or share >= 1.0:
        return None
    return round(-math.log10(1.0 - share), 2)


def window_stats(
    samples: Samples, kinds: Iterable[str], window: tuple[float, float], cap_s: float
) -> dict[str, object]:
    """The offers due in *window*: count, within the cap, nines, percentiles (a failure
    counts at the cap or later)."""
    rows = Rows.select(samples, kinds, *window)
    stats = GroupStats.of(rows, deadline_s=cap_s, failure_floor_s=cap_s)
    return {**stats.to_json(), "nines": nines(stats.within_deadline)}


def present(item: Sent, cap_s: float) -> bool:
    return item.status == OK_STATUS and item.latency_s <= cap_s


def flicker(
    items: Sequence[Sent], kinds: Iterable[str], window: tuple[float, float], cap_s: float
) -> dict[str, object]:
    """Per client and kind, polls in *window* in time order: how often an offer the
    client had was gone from its next poll."""
    wanted = set(kinds)
    polls: dict[tuple[int, str], list[bool]] = defaultdict(list)
    for item in items:
        a = item.arrival
        if a.kind in wanted and window[0] <= a.at_s < window[1]:
            polls[(a.variant, a.kind)].append(present(item, cap_s))
    per_client: dict[int, int] = defaultdict(int)
    pairs = 0
    for (client, _kind), seen in polls.items():
        per_client[client] += sum(1 for a, b in itertools.pairwise(seen) if a and not b)
        pairs += max(len(seen) - 1, 0)
    clients = len({client for client, _ in polls})
    flickers = sum(per_client.values())
    minutes = (window[1] - window[0]) / 60
    return {
        "clients": clients,
        "clients_that_saw_one": sum(1 for n in per_client.values() if n),
        "flickers": flickers,
        "poll_pairs": pairs,
        # Of a client's consecutive polls of one kind, the share where the offer vanished.
        "rate": flickers / pairs if pairs else 0.0,
        "per_client_per_minute": flickers / clients / minutes if clients and minutes else 0.0,
        "most_by_one_client": max(per_client.values(), default=0),
    }


def failed_during(items: Sequence[Sent], window: tuple[float, float]) -> dict[str, object]:
    """Requests of every kind due in *window* that got no 200, by kind and failure."""
    inside = [x for x in items if window[0] <= x.arrival.at_s < window[1]]
    failures: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for item in inside:
        if item.status != OK_STATUS:
            name = FAILURE_NAMES.get(item.status, f"http_{item.status}")
            failures[item.arrival.kind][name] += 1
    return {
        "requests": len(inside),
        "failed": sum(sum(by.values()) for by in failures.values()),
        "by_kind": {k: dict(v) for k, v in sorted(failures.items())},
    }


def timeline(
    items: Sequence[Sent], kinds: Iterable[str], cap_s: float, bin_s: float = BIN_S
) -> list[dict[str, float]]:
    """The offers per *bin_s* of due time: share within the cap and p99 (a failure at
    the cap or later)."""
    wanted = set(kinds)
    bins: dict[int, list[Sent]] = defaultdict(list)
    for item in items:
        if item.arrival.kind in wanted:
            bins[int(item.arrival.at_s // bin_s)].append(item)
    out = []
    for index in sorted(bins):
        members = bins[index]
        latencies = [
            x.latency_s if x.status == OK_STATUS else max(x.latency_s, cap_s) for x in members
        ]
        out.append(
            {
                "t_s": (index + 0.5) * bin_s,
                "offers": len(members),
                "within_cap": sum(1 for x in members if present(x, cap_s)) / len(members),
                "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            }
        )
    return out


def _pct(share: object) -> str:
    return f"{100 * float(share):.3f} %" if isinstance(share, int | float) else "-"


def _nines(value: object) -> str:
    return f"{value:.1f} nines" if isinstance(value, int | float) else "every offer"


def comparison_lines(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """The before/after table of the report, one row per figure."""
    rows = [
        ("offers", "count", lambda v: f"{v}"),
        ("within the cap", "within_deadline", _pct),
        ("", "nines", _nines),
        ("p50", "p50_ms", lambda v: f"{v:.0f} ms"),
        ("p95", "p95_ms", lambda v: f"{v:.0f} ms"),
        ("p99", "p99_ms", lambda v: f"{v:.0f} ms"),
        ("p999", "p999_ms", lambda v: f"{v:.0f} ms"),
    ]
    b_offers, a_offers = before["offers"], after["offers"]
    assert isinstance(b_offers, dict) and isinstance(a_offers, dict)
    lines = [f"{'':16}{'before':>16}{'after':>16}"]
    for label, key, fmt in rows:
        lines.append(f"{label:16}{fmt(b_offers[key]):>16}{fmt(a_offers[key]):>16}")
    b_flicker, a_flicker = before["flicker"], after["flicker"]
    assert isinstance(b_flicker, dict) and isinstance(a_flicker, dict)
    for label, key, fmt in (
        ("flickers", "flickers", lambda v: f"{v}"),
        ("clients with one", "clients_that_saw_one", lambda v: f"{v}"),
        ("per client/min", "per_client_per_minute", lambda v: f"{v:.3f}"),
    ):
        lines.append(f"{label:16}{fmt(b_flicker[key]):>16}{fmt(a_flicker[key]):>16}")
    return lines
