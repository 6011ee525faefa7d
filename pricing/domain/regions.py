"""The regions pricing serves: where they are and what a ride costs there.

Rates are in minor units of the region's currency (cents for USD).
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.domain.geo import BoundingBox, LatLng


@dataclass(frozen=True, slots=True)
class MicromobilityRates:
    unlock_minor: int
    per_minute_minor: int


@dataclass(frozen=True, slots=True)
class RideshareRates:
    base_minor: int
    per_km_minor: int
    per_minute_minor: int
    minimum_minor: int


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    currency: str
    bbox: BoundingBox
    bike: MicromobilityRates
    scooter: MicromobilityRates
    rideshare: RideshareRates

    def center(self) -> LatLng:
        b = self.bbox
        return LatLng((b.south + b.north) / 2, (b.west + b.east) / 2)


REGIONS: dict[str, Region] = {
    "sf": Region(
        name="sf",
        currency="USD",
        bbox=BoundingBox(south=37.70, west=-122.52, north=37.82, east=-122.35),
        bike=MicromobilityRates(unlock_minor=100, per_minute_minor=30),
        scooter=MicromobilityRates(unlock_minor=100, per_minute_minor=42),
        rideshare=RideshareRates(
            base_minor=250, per_km_minor=110, per_minute_minor=35, minimum_minor=800
        ),
    ),
    "nyc": Region(
        name="nyc",
        currency="USD",
        bbox=BoundingBox(south=40.57, west=-74.05, north=40.88, east=-73.75),
        bike=MicromobilityRates(unlock_minor=100, per_minute_minor=26),
        scooter=MicromobilityRates(unlock_minor=100, per_minute_minor=39),
        rideshare=RideshareRates(
            base_minor=300, per_km_minor=130, per_minute_minor=45, minimum_minor=1000
        ),
    ),
}


def region_for(point: LatLng) -> Region | None:
    """The region whose service area holds `point`, if any."""
    return next((r for r in REGIONS.values() if r.bbox.contains(point)), None)
