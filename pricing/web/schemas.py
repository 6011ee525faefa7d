"""The HTTP edge's data shapes (pydantic), also the source of /openapi.json.

Request bodies are validated strictly (a string is not a number). Responses
are built as plain dicts on the hot path; tests validate them against the
response models here, so the description cannot drift from the behaviour.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    WithJsonSchema,
)

from pricing.domain.regions import REGIONS
from toolkit.contract import REQUEST_ID_HEADER

MAX_BATCH_QUOTES = 16
USER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
LAT_RANGE = (-90.0, 90.0)
LNG_RANGE = (-180.0, 180.0)
# One coordinate in a query string (`origin=37.77,-122.41`): a JSON number, the
# form OpenAPI clients serialise numbers in. Not float()'s wider syntax
# ("1_0", " 37.7", "nan", full-width digits).
NUMBER_PATTERN = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"

# A pickup time: an RFC 3339 date-time with an offset, in the years 1970-2099
# as written (surge does local-time arithmetic that overflows near datetime's
# own limits, years 1 and 9999). The pattern is the whole rule, calendar
# included, so that the schema and the check are one and the same.
_YEAR = r"(19[7-9][0-9]|20[0-9]{2})"
_LEAP_YEAR = r"(19(7[26]|8[048]|9[26])|20([02468][048]|[13579][26]))"
_MONTH_DAY = (
    r"((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"  # every month to the 28th
    r"|(0[13-9]|1[0-2])-(29|30)"  # all but February to the 30th
    r"|(0[13578]|1[02])-31)"  # the long months
)
REQUESTED_AT_PATTERN = (
    rf"^({_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
_REQUESTED_AT = re.compile(REQUESTED_AT_PATTERN)

if TYPE_CHECKING:
    RegionName = str
else:  # the enum of regions, from the one table of them
    RegionName = Literal[tuple(REGIONS)]
UserId = Annotated[str, StringConstraints(pattern=USER_ID_PATTERN)]


def service_areas(shape: Literal["object", "pair"]) -> list[dict[str, Any]]:
    """JSON Schema alternatives, one per region: "the point lies in its service area".

    For a point written as `{"lat": .., "lng": ..}` (shape "object") or as the
    pair `[lat, lng]` (shape "pair", the query parameters).
    """
    alternatives = []
    for name, region in sorted(REGIONS.items()):
        box = region.bbox
        lat = {"minimum": box.south, "maximum": box.north}
        lng = {"minimum": box.west, "maximum": box.east}
        where = (
            {"properties": {"lat": lat, "lng": lng}}
            if shape == "object"
            else {"prefixItems": [lat, lng]}
        )
        alternatives.append({"title": f"{name} service area", **where})
    return alternatives


def _requested_at_text(value: object) -> object:
    # The text decides, before pydantic parses it: pydantic alone also takes
    # "2026-11-20 17:30Z", lower-case "t"/"z", "+0530" and (not strict) numbers.
    if not isinstance(value, str) or not _REQUESTED_AT.fullmatch(value):
        raise ValueError(
            "must be an RFC 3339 date-time with an offset (e.g. 2026-11-20T17:30:00Z) "
            "in the years 1970 to 2099"
        )
    return value


RequestedAt = Annotated[
    AwareDatetime,
    # Not strict: after the check above the value is a str, which strict mode
    # takes for a datetime only straight from JSON.
    Strict(False),
    BeforeValidator(_requested_at_text),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": REQUESTED_AT_PATTERN}),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Coordinates(_Strict):
    lat: float = Field(
        ge=LAT_RANGE[0], le=LAT_RANGE[1], allow_inf_nan=False, description="degrees, WGS84"
    )
    lng: float = Field(
        ge=LNG_RANGE[0], le=LNG_RANGE[1], allow_inf_nan=False, description="degrees, WGS84"
    )


def _in_a_service_area(schema: dict[str, Any]) -> None:
    schema["anyOf"] = service_areas("object")


class Point(Coordinates):
    """A point in one of the service areas (GET /v1/regions lists them)."""

    model_config = ConfigDict(json_schema_extra=_in_a_service_area)


class BatchQuote(_Strict):
    """One quote of a batch. A point outside the service areas is this quote's problem
    (outside-service-area), not the whole batch's: hence any coordinates here."""

    origin: Coordinates
    destination: Coordinates
    user_id: UserId
    region: RegionName | None = Field(
        default=None,
        description="the region both ends lie in; inferred from the origin when absent",
    )
    requested_at: RequestedAt | None = Field(
        default=None,
        description="pickup time: RFC 3339 with an offset, in the years 1970 to 2099 as "
        "written; surge depends on it. Default: now",
    )


class RideshareRequest(BatchQuote):
    """A quote on its own: each point must lie in a service area."""

    origin: Point
    destination: Point


class BatchRequest(_Strict):
    quotes: list[BatchQuote] = Field(min_length=1, max_length=MAX_BATCH_QUOTES)


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
    type: str = Field(description="a urn:pricingservice:problem:* URN, or about:blank")
    title: str
    status: int
    detail: str
    instance: str | None = None
    request_id: str | None = Field(
        default=None, description=f"the request's {REQUEST_ID_HEADER} (also a response header)"
    )
    errors: list[FieldProblem] | None = None


class BatchItem(_Out):
    quote: RideshareQuote | None = None
    problem: Problem | None = None


class BatchResponse(_Out):
    count: int
    quotes: list[BatchItem]


class ServiceArea(_Out):
    south: float = Field(description="degrees latitude")
    west: float = Field(description="degrees longitude")
    north: float = Field(description="degrees latitude")
    east: float = Field(description="degrees longitude")


class RegionInfo(_Out):
    name: str
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    area: ServiceArea = Field(description="both ends of a trip must lie in one region's area")


class Regions(_Out):
    regions: list[RegionInfo]


class Health(_Out):
    status: Literal["ok"]
    pool: str
