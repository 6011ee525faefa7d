"""Coordinates and distances."""

from __future__ import annotations

import math
from dataclasses import dataclass

EARTH_RADIUS_M = 6_371_008.8


@dataclass(frozen=True, slots=True)
class LatLng:
    lat: float
    lng: float

    def __str__(self) -> str:
        return f"{self.lat:.6f},{self.lng:.6f}"


@dataclass(frozen=True, slots=True)
class BoundingBox:
    south: float
    west: float
    north: float
    east: float

    def contains(self, point: LatLng) -> bool:
        return self.south <= point.lat <= self.north and self.west <= point.lng <= self.east


def haversine_m(a: LatLng, b: LatLng) -> float:
    """Great-circle distance in metres."""
    phi1, phi2 = math.radians(a.lat), math.radians(b.lat)
    dphi = phi2 - phi1
    dlmb = math.radians(b.lng - a.lng)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))
