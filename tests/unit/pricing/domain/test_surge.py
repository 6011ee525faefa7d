"""Surge: bounded, rounded to tenths, deterministic, and shaped by the time of week.

Times below are built from local solar time, the clock the model's profiles run on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.domain import surge
from pricing.domain.geo import LatLng
from pricing.domain.regions import REGIONS, Region
from pricing.domain.surge import surge_multiplier

SF = REGIONS["sf"]
NYC = REGIONS["nyc"]
MONDAY = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday


def _local(region: Region, weekday: int, hour: float) -> datetime:
    """The UTC instant of `hour` on `weekday` (0 = Monday) in the model's local time."""
    offset_h = surge._field(region).utc_offset_h
    return MONDAY + timedelta(days=weekday, hours=hour - offset_h)


def _hotspot_point(region: Region, hotspot: surge._Hotspot) -> LatLng:
    field = surge._field(region)
    return LatLng(
        field.south + hotspot.y_m / surge._M_PER_DEG_LAT,
        field.west + hotspot.x_m / field.m_per_deg_lng,
    )


@st.composite
def _quotes(draw: st.DrawFn) -> tuple[Region, LatLng, datetime]:
    region = draw(st.sampled_from([SF, NYC]))
    b = region.bbox
    point = LatLng(draw(st.floats(b.south, b.north)), draw(st.floats(b.west, b.east)))
    when = draw(
        st.datetimes(
            min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
        )
    )
    return region, point, when


@settings(max_examples=300, deadline=None)
@given(quote=_quotes())
def test_multiplier_is_bounded_and_in_tenths(quote: tuple[Region, LatLng, datetime]) -> None:
    region, point, when = quote
    m = surge_multiplier(region, point, when)
    assert 1.0 <= m <= 3.0
    assert m == round(m, 1)
    assert surge_multiplier(region, point, when) == m


def test_same_instant_in_any_timezone_gives_the_same_multiplier() -> None:
    point = SF.center()
    when = _local(SF, 4, 18.0)
    pacific = when.astimezone(timezone(timedelta(hours=-8)))
    assert surge_multiplier(SF, point, when) == surge_multiplier(SF, point, pacific)


def test_naive_time_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        surge_multiplier(SF, SF.center(), datetime(2026, 1, 5, 8, 0))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(0.2, 1.0), (1.0, 1.0), (1.04, 1.0), (1.25, 1.3), (2.75, 2.8), (2.96, 3.0), (7.5, 3.0)],
)
def test_raw_ratio_is_clamped_and_rounded_half_up(raw: float, expected: float) -> None:
    assert surge._clamped_tenths(raw) == expected


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_nightlife_surges_on_saturday_night_not_tuesday_morning(region: Region) -> None:
    spots = [h for h in surge._field(region).hotspots if h.kind == "nightlife"]
    saturday = [
        surge_multiplier(region, _hotspot_point(region, h), _local(region, 5, 23.5)) for h in spots
    ]
    tuesday = [
        surge_multiplier(region, _hotspot_point(region, h), _local(region, 1, 4.0)) for h in spots
    ]
    assert all(s >= t for s, t in zip(saturday, tuesday, strict=True))
    assert max(saturday) > max(tuesday)


@pytest.mark.parametrize("region", [SF, NYC], ids=lambda r: r.name)
def test_surge_is_the_exception(region: Region) -> None:
    b = region.bbox
    points = [
        LatLng(b.south + (b.north - b.south) * i / 9, b.west + (b.east - b.west) * j / 9)
        for i in range(10)
        for j in range(10)
    ]
    sunday_noon = [surge_multiplier(region, p, _local(region, 6, 12.0)) for p in points]
    assert sum(m == 1.0 for m in sunday_noon) >= 80
    weekday_rush = [
        surge_multiplier(region, _hotspot_point(region, h), _local(region, d, hour))
        for h in surge._field(region).hotspots
        for d in range(5)
        for hour in (8.5, 17.75)
    ]
    assert max(weekday_rush) >= 1.3
