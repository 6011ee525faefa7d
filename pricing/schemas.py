"""The HTTP edge's data shapes (pydantic), also the source of /openapi.json.

Request bodies are validated strictly (a string is not a number). Responses
are built as plain dicts on the hot path; tests validate them against the
response models here, so the description cannot drift from the behaviour.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from pricing.regions import REGIONS

MAX_BATCH_QUOTES = 16
USER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

RegionName = Literal[tuple(REGIONS)]  # type: ignore[valid-type]
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
        description="pickup time (RFC 3339 with offset); surge depends on it. Default: now",
    )


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
