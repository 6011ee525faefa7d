"""The HTTP edge's data shapes (pydantic), also the source of /openapi.json.

Request bodies are validated strictly (a string is not a number). Responses
are built as plain dicts on the hot path; tests validate them against the
response models here, so the description cannot drift from the behaviour.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from pricing.regions import REGIONS

MAX_BATCH_QUOTES = 16
USER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# `lat,lng` in a query string: plain decimal degrees, ASCII digits only.
LATLNG_PATTERN = r"^-?[0-9]{1,3}(\.[0-9]{1,10})?,-?[0-9]{1,3}(\.[0-9]{1,10})?$"
# Pickup times outside this window are refused (422): surge needs local time
# arithmetic that overflows near datetime's own limits (year 1 and 9999).
REQUESTED_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
REQUESTED_AT_MAX = datetime(2100, 1, 1, tzinfo=UTC)

if TYPE_CHECKING:
    RegionName = str
else:  # the enum of regions, from the one table of them
    RegionName = Literal[tuple(REGIONS)]
UserId = Annotated[str, StringConstraints(pattern=USER_ID_PATTERN)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Point(_Strict):
    lat: float = Field(ge=-90, le=90, allow_inf_nan=False, description="degrees, WGS84")
    lng: float = Field(ge=-180, le=180, allow_inf_nan=False, description="degrees, WGS84")


class RideshareRequest(_Strict):
    origin: Point
    destination: Point
    user_id: UserId
    region: RegionName | None = Field(
        default=None, description="service area; inferred from the origin when absent"
    )
    requested_at: AwareDatetime | None = Field(
        default=None,
        description="pickup time (RFC 3339 with offset), from 1970 up to (not including) "
        "2100 UTC; surge depends on it. Default: now",
    )

    @field_validator("requested_at")
    @classmethod
    def _within_window(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        # Compare as offsets from the window's start: converting a datetime near
        # year 1 or 9999 to UTC would itself overflow.
        try:
            inside = REQUESTED_AT_MIN <= value < REQUESTED_AT_MAX
        except OverflowError:
            inside = False
        if not inside:
            raise ValueError(
                f"must be from {REQUESTED_AT_MIN:%Y-%m-%d} up to {REQUESTED_AT_MAX:%Y-%m-%d} (UTC)"
            )
        return value


class BatchRequest(_Strict):
    quotes: list[RideshareRequest] = Field(min_length=1, max_length=MAX_BATCH_QUOTES)


# --- responses -------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Price(_Out):
    amount_minor: int = Field(ge=0, description="in minor units of the currency (cents)")
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    discount_minor: int = Field(default=0, ge=0)


class Trip(_Out):
    distance_m: int = Field(ge=0)
    duration_s: int = Field(ge=0)


class Vehicle(_Out):
    id: str
    battery_pct: int = Field(ge=0, le=100)
    distance_m: int = Field(ge=0, description="walk from the origin to the vehicle")


class Promotion(_Out):
    code: str
    percent_off: int = Field(ge=0, le=100)


class MicromobilityOffer(_Out):
    mode: Literal["bike", "scooter"]
    region: str
    price: Price
    eta_s: int = Field(ge=0, description="walk to the vehicle, seconds")
    trip: Trip
    vehicle: Vehicle
    promotion: Promotion | None
    degraded: list[Literal["promotions"]] = Field(
        description="optional inputs that were unavailable; the offer was priced without them"
    )


class RideshareQuote(_Out):
    mode: Literal["rideshare"]
    region: str
    price: Price
    surge_multiplier: float = Field(ge=1.0)
    trip: Trip
    requested_at: AwareDatetime


class FieldProblem(_Out):
    field: str
    message: str


class Problem(_Out):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldProblem] | None = None


class BatchItem(_Out):
    quote: RideshareQuote | None = None
    problem: Problem | None = None


class BatchResponse(_Out):
    count: int
    quotes: list[BatchItem]


class Health(_Out):
    status: Literal["ok"]
    pool: str
