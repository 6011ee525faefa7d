"""Turn raw request input into domain values, or raise InvalidRequest naming the field."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pricing.domain.errors import (
    FieldError,
    InvalidRequest,
    MalformedBody,
    OutsideServiceArea,
    UnsupportedMediaType,
)
from pricing.domain.geo import LatLng
from pricing.domain.regions import REGIONS, Region, region_for
from pricing.web.schemas import LAT_RANGE, LNG_RANGE, NUMBER_PATTERN, USER_ID_PATTERN
from toolkit.contract import JSON

# Matched with fullmatch: `$` alone also matches before a trailing newline.
_USER_ID = re.compile(USER_ID_PATTERN)
_NUMBER = re.compile(NUMBER_PATTERN)

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class OfferQuery:
    origin: LatLng
    destination: LatLng
    user_id: str
    region: Region


def parse_offer_query(args: Mapping[str, Sequence[str]]) -> OfferQuery:
    """Parse `origin`, `destination` (lat,lng), `user_id` and optional `region`."""
    errors: list[FieldError] = []

    def single(name: str, required: bool = True) -> str | None:
        values = args.get(name) or []
        if not values:
            if required:
                errors.append(FieldError(name, "is required"))
            return None
        if len(values) > 1:
            errors.append(FieldError(name, f"given {len(values)} times; give it once"))
            return None
        # No length limit of its own: the pattern, enum or number syntax bounds
        # each, as the schema says, and Envoy bounds the whole URL.
        return values[0]

    origin = _latlng("origin", single("origin"), errors)
    destination = _latlng("destination", single("destination"), errors)
    user_id = single("user_id")
    if user_id is not None and not _USER_ID.fullmatch(user_id):
        errors.append(FieldError("user_id", "must be 1-64 characters of A-Z a-z 0-9 _ -"))
        user_id = None
    region_name = single("region", required=False)
    region: Region | None = None
    if region_name is not None:
        region = REGIONS.get(region_name)
        if region is None:
            errors.append(
                FieldError("region", f"unknown region; known: {', '.join(sorted(REGIONS))}")
            )
    if errors:
        raise InvalidRequest(errors)
    assert origin is not None and destination is not None and user_id is not None
    return OfferQuery(origin, destination, user_id, _region(origin, destination, region))


def resolve_region(origin: LatLng, destination: LatLng, region_name: str | None) -> Region:
    """The region of a trip; both ends must lie in it."""
    region = REGIONS[region_name] if region_name is not None else None
    return _region(origin, destination, region)


def _region(origin: LatLng, destination: LatLng, region: Region | None) -> Region:
    # Area rules get a problem type of their own, so a client can tell "fix the
    # request" from "not served there". That a point lies in some area, the
    # schema says too; that both ends lie in one region, the one named, no
    # schema of separate query parameters can say.
    if region is None:
        region = region_for(origin)
        if region is None:
            raise OutsideServiceArea(
                [
                    FieldError(
                        "origin",
                        f"is outside every service area ({', '.join(sorted(REGIONS))}); "
                        "GET /v1/regions lists them",
                    )
                ]
            )
    errors = [
        FieldError(name, f"is outside the service area of region {region.name!r}")
        for name, point in (("origin", origin), ("destination", destination))
        if not region.bbox.contains(point)
    ]
    if errors:
        raise OutsideServiceArea(errors)
    return region


_LATLNG_SHAPE = "must be 'lat,lng' in decimal degrees, e.g. 37.7749,-122.4194"


def _latlng(name: str, text: str | None, errors: list[FieldError]) -> LatLng | None:
    if text is None:
        return None
    parts = text.split(",")
    # Each part a JSON number (what OpenAPI clients send for `style: form,
    # explode: false`): float() alone would also take "1_0", " 37.7", "nan"
    # or full-width digits.
    if len(parts) != 2 or not all(_NUMBER.fullmatch(part) for part in parts):
        errors.append(FieldError(name, _LATLNG_SHAPE))
        return None
    lat, lng = float(parts[0]), float(parts[1])
    if not (math.isfinite(lat) and math.isfinite(lng)):  # 1e999 parses as inf
        errors.append(FieldError(name, "must be finite numbers"))
        return None
    if not LAT_RANGE[0] <= lat <= LAT_RANGE[1]:
        errors.append(FieldError(name, f"latitude {lat} is out of range {list(LAT_RANGE)}"))
        return None
    if not LNG_RANGE[0] <= lng <= LNG_RANGE[1]:
        errors.append(FieldError(name, f"longitude {lng} is out of range {list(LNG_RANGE)}"))
        return None
    return LatLng(lat, lng)


def parse_json_body(model: type[M], body: bytes, content_type: str | None) -> M:
    """Validate a JSON body against `model`; errors name the field by its JSON path."""
    mimetype = (content_type or "").split(";", 1)[0].strip().lower()
    if mimetype != JSON:
        raise UnsupportedMediaType(f"send the body as {JSON} (got {mimetype or 'no content type'})")
    if not body:
        raise MalformedBody("the request body is empty; send a JSON object")
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise MalformedBody(f"the body is not valid JSON: {errors[0]['msg']}") from None
        raise InvalidRequest([_field_error(e) for e in errors]) from None


def _field_error(error: Mapping[str, object]) -> FieldError:
    loc = error.get("loc") or ()
    path = ""
    for part in loc:  # type: ignore[attr-defined]
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return FieldError(path or "body", str(error.get("msg", "is invalid")))
