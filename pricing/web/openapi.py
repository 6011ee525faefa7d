"""/openapi.json: the API description, built from the route config and the schemas.

Paths and methods come from routes.toml (so they cannot disagree with what
Envoy routes); shapes come from `pricing.web.schemas`. The description is meant to
say exactly what the API accepts: every constraint the code checks on a single
value is in a schema (ranges, service areas, patterns), and every status an
operation can answer is listed with its problem types. What no schema can say
(that the two ends of a trip lie in the same region) is a problem type of its
own, `outside-service-area`, described where it can occur.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from flask import Flask
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from pricing.domain import errors
from pricing.domain.regions import REGIONS
from pricing.web import schemas
from pricing.web.problems import PROBLEM_TYPE_PREFIX
from routing.model import Route, RouteConfig
from toolkit.contract import JSON, LOG_REQUEST_ID, POOL_HEADER, PROBLEM_JSON, REQUEST_ID_HEADER

API_VERSION = "1.2.0"
ABOUT_BLANK = "about:blank"

# Each problem type and when it is answered. The slugs are the domain errors'
# own (pricing.domain.errors); `about:blank` is plain HTTP semantics (RFC 9457): the
# status says it all, from the app (404/405/413) or from Envoy (400, 404, 405,
# 413, 431, 503, 504; its `title` is Envoy's response code detail).
PROBLEM_TYPES: dict[str, str] = {
    errors.InvalidRequest.slug: "a field is missing or does not match its schema; "
    "`errors[].field` names each",
    errors.OutsideServiceArea.slug: "a point lies outside every service area, or the two "
    "ends of a trip are not in the same region (the one named in `region`, when given). "
    "GET /v1/regions lists the areas",
    errors.NoRoute.slug: "no road route between origin and destination",
    errors.MalformedBody.slug: "the body is empty or not JSON",
    errors.UnsupportedMediaType.slug: f"the body is not sent as {JSON}",
    errors.NoVehicleNearby.slug: "no bike or scooter is available near the origin",
    errors.Misdirected.slug: "the request reached a pool that does not serve its path "
    "(it bypassed Envoy)",
    errors.NotReady.slug: "the pool answers but is not ready yet (its readiness path, on "
    "the pool's own address; Envoy keeps such a pool out of rotation)",
    "upstream-unavailable": "a required upstream (vehicles, routing) failed; retry after "
    "Retry-After seconds",
    "upstream-timeout": "a required upstream did not answer within the deadline",
    errors.Overloaded.slug: "the pool is past its capacity: the request waited in queues "
    "until too little of its timeout was left to answer it, and was not worked on; retry "
    "after Retry-After seconds",
    ABOUT_BLANK: "plain HTTP semantics: the status says it all",
}


def problem_type(slug: str) -> str:
    """The problem's `type` member for a slug."""
    return ABOUT_BLANK if slug == ABOUT_BLANK else PROBLEM_TYPE_PREFIX + slug


# What each status means, and the problem types it comes with. An operation
# lists the statuses it can answer and, for some, fewer types than these.
_STATUSES: dict[int, tuple[str, tuple[str, ...]]] = {
    400: (
        "Malformed request: the body is not JSON (app), or the HTTP request itself is "
        "refused by Envoy (e.g. a header name with an underscore)",
        (errors.MalformedBody.slug, ABOUT_BLANK),
    ),
    404: ("No vehicle nearby", (errors.NoVehicleNearby.slug,)),
    413: ("Request body too large (Envoy's limit, also enforced by the app)", (ABOUT_BLANK,)),
    415: (f"Unsupported media type: send {JSON}", (errors.UnsupportedMediaType.slug,)),
    421: (
        "Misdirected: the endpoint lives in another pool (the request bypassed Envoy)",
        (errors.Misdirected.slug,),
    ),
    422: ("Invalid field(s), named in `errors`", (errors.InvalidRequest.slug,)),
    431: ("Request headers too large or too many (Envoy)", (ABOUT_BLANK,)),
    503: (
        "A required upstream failed, or the pool is overloaded or down (Envoy); see Retry-After",
        ("upstream-unavailable", errors.Overloaded.slug, ABOUT_BLANK),
    ),
    504: (
        "A required upstream did not answer in time, or the pool did not (Envoy)",
        ("upstream-timeout", ABOUT_BLANK),
    ),
}
# A 503 from an app route without upstreams: shed by the pool (too little budget left
# when its handler started) or by Envoy (over the pool's limit, or the pool down).
_SHED = (errors.Overloaded.slug, ABOUT_BLANK)
# Every operation: what Envoy may answer itself, before or instead of the app.
_ENVOY_STATUSES = (400, 413, 431, 503, 504)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _header(description: str, *, required: bool = True) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": {"type": "string"}}


_REQUEST_ID = _header(f"Envoy's request id; problems carry it as `{LOG_REQUEST_ID}`")


def _ok(description: str, model: type[BaseModel]) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {
            POOL_HEADER: _header("the pool that served the request"),
            REQUEST_ID_HEADER: _REQUEST_ID,
        },
        "content": {JSON: {"schema": _ref(model)}},
    }


def _problem(status: int, types: tuple[str, ...] | None = None) -> dict[str, Any]:
    description, default_types = _STATUSES[status]
    types = types or default_types
    lines = [f"- `{problem_type(t)}`: {PROBLEM_TYPES[t]}" for t in types]
    headers = {REQUEST_ID_HEADER: _REQUEST_ID}
    if status == 503:
        headers["Retry-After"] = _header("seconds to wait before retrying")
    schema = {
        "allOf": [
            _ref(schemas.Problem),
            {
                "properties": {
                    "type": {"enum": [problem_type(t) for t in types]},
                    "status": {"const": status},
                }
            },
        ]
    }
    return {
        "description": description + ". Problem types:\n" + "\n".join(lines),
        "headers": headers,
        "content": {PROBLEM_JSON: {"schema": schema}},
    }


def _problems(*statuses: int, **types: tuple[str, ...]) -> dict[str, Any]:
    """Responses for `statuses` and Envoy's; `s422=(...)` narrows a status's types."""
    return {
        str(s): _problem(s, types.get(f"s{s}"))
        for s in sorted(set(statuses) | set(_ENVOY_STATUSES))
    }


def _point_parameter(name: str, description: str) -> dict[str, Any]:
    lat_min, lat_max = schemas.LAT_RANGE
    lng_min, lng_max = schemas.LNG_RANGE
    return {
        "name": name,
        "in": "query",
        "required": True,
        # `origin=37.7749,-122.4194`: an array of two numbers, comma-separated.
        "style": "form",
        "explode": False,
        "description": f"{description}: `lat,lng` in decimal degrees (WGS84), each a JSON "
        "number; the point must lie in a service area (GET /v1/regions)",
        "schema": {
            "type": "array",
            "prefixItems": [
                {"type": "number", "minimum": lat_min, "maximum": lat_max, "title": "lat"},
                {"type": "number", "minimum": lng_min, "maximum": lng_max, "title": "lng"},
            ],
            "items": False,
            "minItems": 2,
            "maxItems": 2,
            "anyOf": schemas.service_areas("pair"),
            "examples": [[37.7749, -122.4194]],
        },
    }


def _offer_parameters() -> list[dict[str, Any]]:
    return [
        _point_parameter("origin", "where the trip starts"),
        _point_parameter("destination", "where the trip ends; in the same region as the origin"),
        {
            "name": "user_id",
            "in": "query",
            "required": True,
            "schema": {"type": "string", "pattern": schemas.USER_ID_PATTERN},
        },
        {
            "name": "region",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "enum": sorted(REGIONS)},
            "description": "the region both ends lie in; inferred from the origin when absent",
        },
    ]


_TRIP_RULE = (
    " Both ends must lie in the same region's service area, the one named in `region` "
    "when given; a schema of separate fields cannot say so, so a trip that breaks this "
    "rule is refused with 422 `outside-service-area`."
)


def _operation(route: Route, extra: Collection[str]) -> dict[str, Any]:
    ep = route.endpoint
    area_rule = (errors.InvalidRequest.slug, errors.OutsideServiceArea.slug)
    if ep in {"offers.bike", "offers.scooter"}:
        return {
            "summary": f"Price a {ep.split('.')[1]} offer (I/O-heavy: calls three upstreams)",
            "description": "Calls vehicles, routing and promotions in parallel within the "
            "route's deadline." + _TRIP_RULE,
            "parameters": _offer_parameters(),
            "responses": {
                "200": _ok("The offer", schemas.MicromobilityOffer),
                **_problems(404, 421, 422, s400=(ABOUT_BLANK,), s422=area_rule),
            },
        }
    if ep == "offers.rideshare":
        return {
            "summary": "Quote a rideshare fare (CPU-heavy: shortest path + surge)",
            "description": "Deterministic for the same input." + _TRIP_RULE,
            "requestBody": {
                "required": True,
                "content": {JSON: {"schema": _ref(schemas.RideshareRequest)}},
            },
            "responses": {
                "200": _ok("The quote", schemas.RideshareQuote),
                **_problems(
                    400,
                    415,
                    421,
                    422,
                    s422=(*area_rule, errors.NoRoute.slug),
                    s503=_SHED,
                    s504=(ABOUT_BLANK,),
                ),
            },
        }
    if ep == "quotes.batch":
        return {
            "summary": f"Quote up to {schemas.MAX_BATCH_QUOTES} rideshare fares in one call",
            "description": "One item per requested quote, in order: a quote, or the problem "
            "that quote alone would have had (e.g. `outside-service-area`). The request "
            "as a whole is refused only when it does not match its schema.",
            "requestBody": {
                "required": True,
                "content": {JSON: {"schema": _ref(schemas.BatchRequest)}},
            },
            "responses": {
                "200": _ok("The quotes", schemas.BatchResponse),
                **_problems(400, 415, 421, 422, s503=_SHED, s504=(ABOUT_BLANK,)),
            },
        }
    if ep == "regions.list":
        return {
            "summary": "The regions and their service areas",
            "description": "Where a trip's two ends must lie: each region's area is a "
            "latitude/longitude box, edges included.",
            "responses": {
                "200": _ok("The regions", schemas.Regions),
                **_problems(421, s400=(ABOUT_BLANK,), s503=_SHED, s504=(ABOUT_BLANK,)),
            },
        }
    if ep in extra:
        return {
            "summary": f"{ep}: an extra endpoint (create_app's extra_endpoints), not the service's",
            "responses": {"200": {"description": "OK"}, **_problems(421)},
        }
    raise KeyError(ep)


def build_spec(config: RouteConfig, extra: Collection[str] = ()) -> dict[str, Any]:
    """The OpenAPI document of *config*'s routes; *extra* names the endpoints the app
    was given beside the service's own (``create_app(extra_endpoints=...)``)."""
    _, defs = models_json_schema(
        [(m, "validation") for m in (schemas.RideshareRequest, schemas.BatchRequest)]
        + [
            (m, "serialization")
            for m in (
                schemas.MicromobilityOffer,
                schemas.RideshareQuote,
                schemas.BatchResponse,
                schemas.Problem,
                schemas.Regions,
                schemas.Health,
            )
        ],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, Any] = {}
    for route in config.app_routes():
        for method in route.methods:
            op = _operation(route, extra)
            op["operationId"] = f"{route.endpoint}.{method.lower()}"
            op[POOL_HEADER] = route.pool  # an extension under the header's name
            paths.setdefault(route.path, {})[method.lower()] = op
    # Health and readiness are not listed: every pool answers them on its own
    # address for Envoy's health checks, but Envoy does not route them (a
    # client would get 404). The description says so instead.
    meta = config.meta
    paths[meta.openapi] = {
        "get": {
            "operationId": "meta.openapi",
            "summary": "This document",
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1",
                    "headers": {REQUEST_ID_HEADER: _REQUEST_ID},
                    "content": {JSON: {"schema": {"type": "object"}}},
                },
                **_problems(s400=(ABOUT_BLANK,), s503=(ABOUT_BLANK,), s504=(ABOUT_BLANK,)),
            },
        }
    }
    types = "\n".join(f"- `{problem_type(slug)}`: {text}" for slug, text in PROBLEM_TYPES.items())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "pricingservice",
            "version": API_VERSION,
            "description": "Prices bike, scooter and rideshare offers in the service areas "
            "GET /v1/regions lists.\n\n"
            f"Errors are RFC 9457 problem details ({PROBLEM_JSON}), from the app "
            f"and from Envoy alike, each with the request's `{LOG_REQUEST_ID}` (also the "
            f"{REQUEST_ID_HEADER} response header). Problem types:\n"
            f"{types}\n\n"
            "A method a path does not declare is answered 405 with an Allow header. Every "
            f"response the app makes names the pool that served it in the {POOL_HEADER} "
            f"header. Each pool also answers GET {meta.healthz} and {meta.readyz} (schema "
            "Health) on its own loopback address, for Envoy's health checks; they are not "
            "routed through Envoy.",
        },
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {})},
    }


def init_app(app: Flask, extra: Collection[str] = ()) -> None:
    config: RouteConfig = app.extensions["pricing.routes"]
    app.extensions["pricing.web.openapi"] = json.dumps(build_spec(config, extra), indent=1)
