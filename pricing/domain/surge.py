"""Deterministic surge multipliers from a synthetic, region-seeded supply/demand field.

Same region, place and time always give the same multiplier; nothing is read from outside.

Model. Demand at a point sums Gaussian kernels around a dozen seeded hotspots, each scaled
by the time-of-week profile of its kind: business (weekday rush hours), nightlife (evenings,
Friday and Saturday nights), transit (all day, busier at rush hours) and residential (morning
and evening). Supply sums Gaussian kernels of pickup reach around a few hundred seeded
drivers, who drift along small circles as time passes and whose number online follows a
daily curve. The multiplier is 1 + gain * (demand / supply - 1), clamped to [1.0, 3.0] and
rounded half up to one decimal. Time of day is local mean solar time (UTC shifted by the
region centre's longitude / 15 h): close enough to clock time for a model, no tz database.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pricing.domain.geo import EARTH_RADIUS_M, LatLng
from pricing.domain.regions import Region

MIN_MULTIPLIER = 1.0
MAX_MULTIPLIER = 3.0

_HOTSPOT_COUNT = 12
_HOTSPOT_RADIUS_M = (600.0, 2_000.0)
_DRIVER_COUNT = 300
# Drivers gather where the rides are; spread evenly, they would leave every hotspot surging
# at every peak and the outskirts oversupplied.
_DRIVERS_NEAR_HOTSPOTS_FRACTION = 0.6
_DRIVER_ORBIT_M = (200.0, 1_500.0)
_DRIVER_ORBIT_RAD_PER_H = (0.2, 1.0)
_PICKUP_REACH_M = 1_200.0
# Keeps the ratio finite where no driver is near; reads as "supply never quite hits zero".
_SUPPLY_FLOOR = 0.5
_GAIN = 1.0
# Converts hotspot weight into drivers wanted within reach. Calibrated (with the counts above)
# so ~97% of random places and times price at 1.0 while hotspots at their peak hours reach
# 1.5-3.0; recalibrate if any count, radius or profile changes.
_DEMAND_SCALE = 12.0
_HOURS_PER_WEEK = 168.0
_KINDS = ("business", "nightlife", "transit", "residential")


@dataclass(frozen=True, slots=True)
class _Hotspot:
    x_m: float
    y_m: float
    radius_m: float
    weight: float
    kind: str


@dataclass(frozen=True, slots=True)
class _Driver:
    x_m: float
    y_m: float
    orbit_m: float
    phase_rad: float
    rad_per_h: float


@dataclass(frozen=True, slots=True)
class _Field:
    """A region's seeded hotspots and drivers, in metres east/north of its south-west corner."""

    south: float
    west: float
    m_per_deg_lng: float
    utc_offset_h: float
    hotspots: tuple[_Hotspot, ...]
    drivers: tuple[_Driver, ...]


_M_PER_DEG_LAT = math.radians(EARTH_RADIUS_M)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def surge_multiplier(region: Region, origin: LatLng, requested_at: datetime) -> float:
    """The surge multiplier at `origin` and time `requested_at` (timezone-aware), in [1.0, 3.0]."""
    if requested_at.utcoffset() is None:
        raise ValueError("requested_at must be timezone-aware")
    field = _field(region)
    x_m = (origin.lng - field.west) * field.m_per_deg_lng
    y_m = (origin.lat - field.south) * _M_PER_DEG_LAT

    utc_epoch_h = (requested_at - _EPOCH).total_seconds() / 3600.0
    local = requested_at.astimezone(UTC) + timedelta(hours=field.utc_offset_h)
    hour_of_week = local.weekday() * 24 + local.hour + local.minute / 60 + local.second / 3600

    demand = 0.0
    for h in field.hotspots:
        d2 = (x_m - h.x_m) ** 2 + (y_m - h.y_m) ** 2
        kernel = math.exp(-d2 / (2 * h.radius_m * h.radius_m))
        demand += h.weight * _kind_profile(h.kind, hour_of_week) * kernel
    demand *= _DEMAND_SCALE

    reach2 = 2 * _PICKUP_REACH_M * _PICKUP_REACH_M
    supply = 0.0
    for d in field.drivers:
        angle = d.phase_rad + d.rad_per_h * utc_epoch_h
        dx = x_m - d.x_m - d.orbit_m * math.cos(angle)
        dy = y_m - d.y_m - d.orbit_m * math.sin(angle)
        supply += math.exp(-(dx * dx + dy * dy) / reach2)
    supply = supply * _fleet_online_fraction(hour_of_week % 24) + _SUPPLY_FLOOR

    return _clamped_tenths(1.0 + _GAIN * (demand / supply - 1.0))


def _clamped_tenths(raw: float) -> float:
    """Clamp to [MIN_MULTIPLIER, MAX_MULTIPLIER], then round half up to one decimal."""
    clamped = min(MAX_MULTIPLIER, max(MIN_MULTIPLIER, raw))
    return math.floor(clamped * 10 + 0.5) / 10


def _bump(x: float, centre: float, width: float, period: float) -> float:
    """A Gaussian bump on a circle of `period` (so a Friday-night peak spans midnight)."""
    d = abs(x - centre) % period
    d = min(d, period - d)
    return math.exp(-0.5 * (d / width) ** 2)


def _kind_profile(kind: str, hour_of_week: float) -> float:
    """Relative demand of a hotspot kind at a local hour of the week (Monday 00:00 = 0)."""
    hour = hour_of_week % 24
    weekday = hour_of_week < 5 * 24
    morning = _bump(hour, 8.5, 1.0, 24)
    evening = _bump(hour, 17.75, 1.25, 24)
    if kind == "business":
        return 0.3 + morning + evening if weekday else 0.2
    if kind == "nightlife":
        friday_night = _bump(hour_of_week, 4 * 24 + 23.5, 2.0, _HOURS_PER_WEEK)
        saturday_night = _bump(hour_of_week, 5 * 24 + 23.5, 2.0, _HOURS_PER_WEEK)
        return 0.1 + 0.3 * _bump(hour, 20.5, 2.0, 24) + 1.2 * friday_night + 1.4 * saturday_night
    if kind == "transit":
        return 0.6 + (0.5 * (morning + evening) if weekday else 0.0)
    return 0.3 + (0.4 * _bump(hour, 7.5, 1.0, 24) if weekday else 0.0) + 0.3 * evening


def _fleet_online_fraction(hour: float) -> float:
    """Share of the fleet driving at a local hour: fullest mid-afternoon, thinnest at night."""
    return 0.5 + 0.5 * _bump(hour, 14.0, 5.0, 24)


@functools.cache
def _field(region: Region) -> _Field:
    rng = random.Random(f"surge:{region.name}")
    b = region.bbox
    m_per_deg_lng = _M_PER_DEG_LAT * math.cos(math.radians((b.south + b.north) / 2))
    width_m = (b.east - b.west) * m_per_deg_lng
    height_m = (b.north - b.south) * _M_PER_DEG_LAT

    hotspots = tuple(
        _Hotspot(
            x_m=rng.uniform(0.1, 0.9) * width_m,
            y_m=rng.uniform(0.1, 0.9) * height_m,
            radius_m=rng.uniform(*_HOTSPOT_RADIUS_M),
            weight=rng.uniform(0.5, 1.5),
            kind=_KINDS[i % len(_KINDS)],
        )
        for i in range(_HOTSPOT_COUNT)
    )
    drivers = []
    for _ in range(_DRIVER_COUNT):
        if rng.random() < _DRIVERS_NEAR_HOTSPOTS_FRACTION:
            h = rng.choice(hotspots)
            x_m, y_m = rng.gauss(h.x_m, h.radius_m), rng.gauss(h.y_m, h.radius_m)
        else:
            x_m, y_m = rng.uniform(0, width_m), rng.uniform(0, height_m)
        drivers.append(
            _Driver(
                x_m=x_m,
                y_m=y_m,
                orbit_m=rng.uniform(*_DRIVER_ORBIT_M),
                phase_rad=rng.uniform(0, 2 * math.pi),
                rad_per_h=rng.choice((-1, 1)) * rng.uniform(*_DRIVER_ORBIT_RAD_PER_H),
            )
        )
    return _Field(
        south=b.south,
        west=b.west,
        m_per_deg_lng=m_per_deg_lng,
        utc_offset_h=(b.west + b.east) / 2 / 15.0,
        hotspots=hotspots,
        drivers=tuple(drivers),
    )
