"""The upstream floor: the least time an offer can take, set by its upstreams.

An offer calls every upstream in parallel (pricing.web.offers.offer_calls) and waits for
all of them, so its floor is the slowest of those calls' delays. Two sources:

- configured: the simulator's current latency settings, sampled with the
  simulator's own code (simulator.model.Latency.sample_ms) and the max taken per
  simulated offer. With fixed latencies this is exact.
- records: the simulator's request records, grouped by trace id (the traceparent
  the generator sends when tracing is on), max delay per offer. Needs tracing to
  propagate the trace id to the upstream calls; otherwise records cannot be
  grouped per offer and the configured floor is used.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from simulator.model import UpstreamSettings
from tracing.readback.report import percentile

# Every upstream an offer calls, in parallel (pricing.web.offers.offer_calls).
OFFER_UPSTREAMS: tuple[str, ...] = ("vehicles", "routing", "promotions")
_DRAWS = 200_000


@dataclass(frozen=True)
class Floor:
    p50_ms: float
    p99_ms: float
    p999_ms: float
    source: str  # "configured" or "records"
    offers: int  # offers sampled (simulated draws, or offers found in the records)

    def to_json(self) -> dict[str, object]:
        return {
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "p999_ms": round(self.p999_ms, 3),
            "source": self.source,
            "offers": self.offers,
        }


def fixed_latency(ms: float) -> dict[str, Any]:
    """Control-API body that makes an upstream answer after exactly `ms`."""
    return {"latency": {"dist": "fixed", "ms": ms}, "error_rate": 0.0, "fault": "none"}


def settings_from_control(doc: Mapping[str, Any]) -> dict[str, UpstreamSettings]:
    """Parse `GET /_control/upstreams` with the simulator's own validation."""
    return {
        name: UpstreamSettings().updated(body, f"upstreams.{name}")
        for name, body in doc["upstreams"].items()
    }


def _floor(values_ms: list[float], source: str) -> Floor:
    values_ms.sort()
    return Floor(
        p50_ms=percentile(values_ms, 50),
        p99_ms=percentile(values_ms, 99),
        p999_ms=percentile(values_ms, 99.9),
        source=source,
        offers=len(values_ms),
    )


def floor_from_settings(
    settings: Mapping[str, UpstreamSettings], draws: int = _DRAWS, seed: int = 0
) -> Floor:
    rng = random.Random(seed)
    latencies = [settings[name].latency for name in OFFER_UPSTREAMS]
    values = [max(lat.sample_ms(rng) for lat in latencies) for _ in range(draws)]
    return _floor(values, "configured")


def floor_from_records(
    records: Iterable[Mapping[str, Any]], trace_ids: Iterable[str] | None = None
) -> Floor | None:
    """Per-offer floor from simulator records that carry a traceparent; None if too few."""
    wanted = set(trace_ids) if trace_ids is not None else None
    per_trace: dict[str, dict[str, float]] = {}
    for rec in records:
        parent = rec.get("traceparent")
        if not parent or rec.get("upstream") not in OFFER_UPSTREAMS:
            continue
        parts = str(parent).split("-")
        if len(parts) < 2:
            continue
        trace_id = parts[1]
        if wanted is not None and trace_id not in wanted:
            continue
        per_trace.setdefault(trace_id, {})[str(rec["upstream"])] = float(rec["delay_ms"])
    values = [max(d.values()) for d in per_trace.values() if len(d) == len(OFFER_UPSTREAMS)]
    if len(values) < 100:
        return None
    return _floor(values, "records")
