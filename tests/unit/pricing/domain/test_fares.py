"""Rideshare fares: exact arithmetic on hand-computed cases and whole quotes end to end.

Exact-number quotes run on a hand-built graph with surge pinned; the rest use the real ones.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.domain import fares, roadgraph
from pricing.domain.errors import NoRoute as NoRouteError
from pricing.domain.fares import (
    Fare,
    RideshareQuote,
    RideshareQuoteInput,
    fare_minor,
    quote_rideshare,
)
from pricing.domain.geo import LatLng, haversine_m
from pricing.domain.regions import REGIONS, Region, RideshareRates
from pricing.domain.roadgraph import RoadGraph

SF = REGIONS["sf"]
NYC = REGIONS["nyc"]
SF_RATES = SF.rideshare  # base 250, per km 110, per minute 35, minimum 800
NYC_RATES = NYC.rideshare  # base 300, per km 130, per minute 45, minimum 1000
WHEN = datetime(2026, 1, 7, 18, 30, tzinfo=UTC)


def _trip(
    region: Region, south_frac: float, west_frac: float, north_frac: float, east_frac: float
) -> RideshareQuoteInput:
    b = region.bbox
    origin = LatLng(
        b.south + south_frac * (b.north - b.south), b.west + west_frac * (b.east - b.west)
    )
    dest = LatLng(
        b.south + north_frac * (b.north - b.south), b.west + east_frac * (b.east - b.west)
    )
    return RideshareQuoteInput(origin, dest, region, WHEN)


@pytest.mark.parametrize(
    ("rates", "distance_m", "duration_s", "surge", "expected"),
    [
        # 250 + 110 * 5 + 35 * 15 = 1325
        (SF_RATES, 5_000, 900, 1.0, Fare(1325, 1325)),
        # 1325 * 1.3 = 1722.5 exactly, rounds up (binary floats would give 1722.4999...)
        (SF_RATES, 5_000, 900, 1.3, Fare(1325, 1723)),
        # 300 + 130 * 12.345 + 45 * 1234 / 60 = 2830.35; * 2.1 = 5943.735
        (NYC_RATES, 12_345, 1_234, 2.1, Fare(2830, 5944)),
        # 250 + 135.74 + 187.25 = 572.99 < 800: the minimum applies before surge
        (SF_RATES, 1_234, 321, 1.5, Fare(800, 1200)),
        (NYC_RATES, 0, 0, 1.0, Fare(1000, 1000)),
    ],
)
def test_fare_arithmetic(
    rates: RideshareRates, distance_m: int, duration_s: int, surge: float, expected: Fare
) -> None:
    assert fare_minor(rates, distance_m, duration_s, surge) == expected


def test_half_a_minor_unit_rounds_up() -> None:
    per_metre = RideshareRates(base_minor=0, per_km_minor=1, per_minute_minor=0, minimum_minor=0)
    assert fare_minor(per_metre, 2_500, 0, 1.0) == Fare(3, 3)  # 2.5, where round() gives 2
    assert fare_minor(per_metre, 2_499, 0, 1.0) == Fare(2, 2)
    # 2.5 * 1.1 = 2.75 -> 3, computed from the unrounded 2.5, not from base_minor 3.
    assert fare_minor(per_metre, 2_500, 0, 1.1) == Fare(3, 3)
    assert fare_minor(per_metre, 3_500, 0, 1.1) == Fare(4, 4)  # 3.85


def test_fare_rejects_impossible_inputs() -> None:
    with pytest.raises(ValueError):
        fare_minor(SF_RATES, -1, 0, 1.0)
    with pytest.raises(ValueError):
        fare_minor(SF_RATES, 0, 0, 0.9)


@settings(max_examples=300)
@given(
    distance_m=st.integers(0, 200_000),
    duration_s=st.integers(0, 4 * 3600),
    tenths=st.integers(10, 30),
)
def test_fare_properties(distance_m: int, duration_s: int, tenths: int) -> None:
    surge = tenths / 10
    fare = fare_minor(SF_RATES, distance_m, duration_s, surge)
    assert fare.base_minor >= SF_RATES.minimum_minor
    assert fare.amount_minor >= fare.base_minor
    assert abs(fare.amount_minor - fare.base_minor * surge) <= surge / 2 + 0.5
    longer = fare_minor(SF_RATES, distance_m + 1_000, duration_s + 60, surge)
    assert longer.amount_minor >= fare.amount_minor


@pytest.mark.parametrize(
    "requested_at",
    [
        datetime(2026, 1, 7, 18, 30),
        datetime(2026, 1, 7, 18, 30, tzinfo=timezone(timedelta(hours=-8))),
    ],
    ids=["naive", "pacific"],
)
def test_input_requires_utc(requested_at: datetime) -> None:
    with pytest.raises(ValueError, match="UTC"):
        RideshareQuoteInput(SF.center(), SF.center(), SF, requested_at)


def test_quote_on_a_hand_built_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 2x2 lattice on SF's bbox corners: SW -> SE -> NE is the only way to the north-east.
    b = SF.bbox
    graph = RoadGraph.from_parts(
        b,
        2,
        2,
        [b.south, b.south, b.north, b.north],
        [b.west, b.east, b.west, b.east],
        [
            [(1, 4_000.4, 300.2)],
            [(3, 6_000.2, 599.8), (0, 4_000.4, 300.2)],
            [(0, 5_000.0, 500.0)],
            [(2, 5_000.0, 500.0), (1, 6_000.2, 599.8)],
        ],
    )
    monkeypatch.setattr(fares, "graph_for", lambda region: graph)
    monkeypatch.setattr(fares, "surge_multiplier", lambda region, origin, requested_at: 1.5)
    origin, dest = LatLng(b.south + 0.001, b.west + 0.001), LatLng(b.north - 0.001, b.east - 0.001)
    quote = quote_rideshare(RideshareQuoteInput(origin, dest, SF, WHEN))
    # 10_000.6 m -> 10_001 m, 900.0 s -> 900 s; 250 + 110 * 10.001 + 35 * 15 = 1875.11
    assert quote == RideshareQuote(
        region="sf",
        currency="USD",
        amount_minor=2813,  # 1875.11 * 1.5 = 2812.665
        base_minor=1875,
        distance_m=10_001,
        duration_s=900,
        surge_multiplier=1.5,
        path_nodes=3,
    )


def test_same_place_costs_the_minimum() -> None:
    point = LatLng(37.7749, -122.4194)
    quote = quote_rideshare(RideshareQuoteInput(point, point, SF, WHEN))
    assert (quote.distance_m, quote.duration_s, quote.path_nodes) == (0, 0, 1)
    assert quote.base_minor == SF_RATES.minimum_minor
    assert quote.amount_minor == round(SF_RATES.minimum_minor * quote.surge_multiplier)


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_cross_town_quotes_in_every_region(region: Region) -> None:
    q = _trip(region, 0.15, 0.2, 0.85, 0.75)
    quote = quote_rideshare(q)
    assert (quote.region, quote.currency) == (region.name, "USD")
    assert quote.distance_m >= 0.9 * haversine_m(q.origin, q.destination)
    assert quote.duration_s > 0 and quote.path_nodes > 10
    assert quote.base_minor > region.rideshare.minimum_minor
    expected = fare_minor(
        region.rideshare, quote.distance_m, quote.duration_s, quote.surge_multiplier
    )
    assert (quote.base_minor, quote.amount_minor) == (expected.base_minor, expected.amount_minor)


def test_quotes_are_deterministic_across_fresh_graph_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trips = [_trip(SF, 0.1, 0.1, 0.9, 0.8), _trip(NYC, 0.7, 0.2, 0.3, 0.9)]
    first = [quote_rideshare(q) for q in trips]
    assert [quote_rideshare(q) for q in trips] == first
    monkeypatch.setattr(roadgraph, "_graphs", {})
    assert [quote_rideshare(q) for q in trips] == first
    assert roadgraph.graph_for(SF) is not None


def test_outside_the_service_area_has_no_route() -> None:
    b = SF.bbox
    outside = LatLng(b.north + 0.05, b.west)
    with pytest.raises(NoRouteError, match="destination"):
        quote_rideshare(RideshareQuoteInput(SF.center(), outside, SF, WHEN))
    with pytest.raises(NoRouteError, match="origin"):
        quote_rideshare(RideshareQuoteInput(outside, SF.center(), SF, WHEN))


def test_unreachable_destination_has_no_route(monkeypatch: pytest.MonkeyPatch) -> None:
    class Islands:
        def nearest_node(self, point: LatLng) -> int:
            return 0 if point.lat < 37.76 else 1

        def shortest_path(self, src: int, dst: int) -> roadgraph.PathResult:
            raise NoRouteError(f"no route from node {src} to node {dst}")

    monkeypatch.setattr(fares, "graph_for", lambda region: Islands())
    trip = _trip(SF, 0.1, 0.1, 0.9, 0.9)
    with pytest.raises(NoRouteError, match="no route"):
        quote_rideshare(trip)


@settings(max_examples=20, deadline=None)
@given(
    region=st.sampled_from([SF, NYC]),
    fracs=st.tuples(*[st.floats(0, 1)] * 4),
    offset_s=st.integers(0, 7 * 86_400),
)
def test_any_in_region_trip_prices_consistently(
    region: Region, fracs: tuple[float, float, float, float], offset_s: int
) -> None:
    q = _trip(region, *fracs)
    q = RideshareQuoteInput(q.origin, q.destination, region, WHEN + timedelta(seconds=offset_s))
    quote = quote_rideshare(q)
    assert quote == quote_rideshare(q)
    assert quote.amount_minor >= quote.base_minor >= region.rideshare.minimum_minor
    assert 1.0 <= quote.surge_multiplier <= 3.0
    assert quote.distance_m >= 0 and quote.duration_s >= 0 and quote.path_nodes >= 1
