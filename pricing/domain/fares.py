"""Rideshare fares: the fastest road path, priced with the region's rates and surge.

The CPU-heavy endpoint's whole job: ~20-40 ms of pure-Python CPU per quote, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from pricing.domain.errors import NoRoute
from pricing.domain.geo import LatLng
from pricing.domain.regions import Region, RideshareRates
from pricing.domain.roadgraph import graph_for
from pricing.domain.surge import surge_multiplier

__all__ = [
    "Fare",
    "RideshareQuote",
    "RideshareQuoteInput",
    "fare_minor",
    "quote_rideshare",
]

_M_PER_KM = 1_000
_S_PER_MINUTE = 60
_HALF = Fraction(1, 2)


@dataclass(frozen=True, slots=True)
class RideshareQuoteInput:
    origin: LatLng
    destination: LatLng
    region: Region
    requested_at: datetime
    """Timezone-aware and in UTC (any tzinfo whose offset is zero)."""

    def __post_init__(self) -> None:
        offset = self.requested_at.utcoffset()
        if offset is None:
            raise ValueError("requested_at must be timezone-aware (UTC)")
        if offset != timedelta(0):
            raise ValueError(f"requested_at must be in UTC, got offset {offset}")


@dataclass(frozen=True, slots=True)
class RideshareQuote:
    region: str
    currency: str
    amount_minor: int
    """What the rider pays: `base_minor` before rounding, times the surge, rounded half up."""
    base_minor: int
    """The fare before surge (minimum applied), rounded half up."""
    distance_m: int
    duration_s: int
    surge_multiplier: float
    path_nodes: int


@dataclass(frozen=True, slots=True)
class Fare:
    base_minor: int
    amount_minor: int


def quote_rideshare(q: RideshareQuoteInput) -> RideshareQuote:
    """Price a ride along the fastest road path between the intersections nearest each end.

    Raises NoRoute when either end is outside the region's service area (its bbox): the
    graph would silently clamp such a point onto the border and misprice the ride.
    """
    region = q.region
    for label, point in (("origin", q.origin), ("destination", q.destination)):
        if not region.bbox.contains(point):
            raise NoRoute(f"{label} {point} is outside the {region.name} service area")
    graph = graph_for(region)
    path = graph.shortest_path(graph.nearest_node(q.origin), graph.nearest_node(q.destination))
    # Price the rounded figures the quote reports, so anyone can recompute the fare from it.
    distance_m = _round_half_up(path.distance_m)
    duration_s = _round_half_up(path.duration_s)
    surge = surge_multiplier(region, q.origin, q.requested_at)
    fare = fare_minor(region.rideshare, distance_m, duration_s, surge)
    return RideshareQuote(
        region=region.name,
        currency=region.currency,
        amount_minor=fare.amount_minor,
        base_minor=fare.base_minor,
        distance_m=distance_m,
        duration_s=duration_s,
        surge_multiplier=surge,
        path_nodes=path.nodes,
    )


def fare_minor(
    rates: RideshareRates, distance_m: int, duration_s: int, surge_multiplier: float
) -> Fare:
    """max(minimum, base + per_km * km + per_minute * minutes) * surge, in minor units.

    Exact rational arithmetic, rounded half up (0.5 minor units go up) once at the end, so
    `amount_minor` may differ by one from rounding `base_minor * surge`. The surge counts as
    the decimal it prints as (1.3 is 13/10, not the binary float nearest it).
    """
    if distance_m < 0 or duration_s < 0:
        raise ValueError("distance and duration must not be negative")
    if surge_multiplier < 1:
        raise ValueError(f"surge multiplier must be at least 1, got {surge_multiplier}")
    metered = (
        rates.base_minor
        + Fraction(rates.per_km_minor * distance_m, _M_PER_KM)
        + Fraction(rates.per_minute_minor * duration_s, _S_PER_MINUTE)
    )
    before_surge = max(Fraction(rates.minimum_minor), metered)
    return Fare(
        base_minor=_round_half_up(before_surge),
        amount_minor=_round_half_up(before_surge * Fraction(repr(surge_multiplier))),
    )


def _round_half_up(x: Fraction | float) -> int:
    """Round to the nearest integer, halves up; inputs here are never negative."""
    if isinstance(x, float):
        x = Fraction(x)
    return math.floor(x + _HALF)
