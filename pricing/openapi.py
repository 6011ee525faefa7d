"""/openapi.json: the API description, built from the route config and the schemas.

Paths and methods come from routes.toml (so they cannot disagree with what
Envoy routes); shapes come from `pricing.schemas`.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Flask
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from pricing import schemas
from pricing.problems import PROBLEM_JSON
from pricing.regions import REGIONS
from routing.model import Route, RouteConfig

API_VERSION = "1.0.0"
LATLNG_PATTERN = schemas.LATLNG_PATTERN

_PROBLEM_STATUSES = {
    400: "Malformed request (bad JSON)",
    404: "Not found",
    413: "Request body too large",
    415: "Unsupported media type (send application/json)",
    421: "Misdirected: the endpoint lives in another pool (bypassed Envoy)",
    422: "Invalid field (the problem's `errors` name each field)",
    503: "A required upstream failed, or the pool is overloaded (see Retry-After)",
    504: "A required upstream did not answer within the deadline",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _problems(*statuses: int) -> dict[str, Any]:
    return {
        str(s): {
            "description": _PROBLEM_STATUSES[s],
            "content": {PROBLEM_JSON: {"schema": _ref(schemas.Problem)}},
        }
        for s in statuses
    }


def _offer_parameters() -> list[dict[str, Any]]:
    latlng = {"type": "string", "pattern": LATLNG_PATTERN, "examples": ["37.7749,-122.4194"]}
    return [
        {
            "name": "origin",
            "in": "query",
            "required": True,
            "schema": latlng,
            "description": "lat,lng in decimal degrees; must lie in a service area",
        },
        {
            "name": "destination",
            "in": "query",
            "required": True,
            "schema": latlng,
            "description": "lat,lng in decimal degrees; same region as the origin",
        },
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
            "description": "service area; inferred from the origin when absent",
        },
    ]


def _operation(route: Route) -> dict[str, Any]:
    ep = route.endpoint
    if ep in {"offers.bike", "offers.scooter"}:
        return {
            "summary": f"Price a {ep.split('.')[1]} offer (I/O-heavy: calls three upstreams)",
            "parameters": _offer_parameters(),
            "responses": {
                "200": {"description": "The offer", "content": _json(schemas.MicromobilityOffer)},
                **_problems(404, 421, 422, 503, 504),
            },
        }
    if ep == "offers.rideshare":
        return {
            "summary": "Quote a rideshare fare (CPU-heavy: shortest path + surge)",
            "requestBody": {"required": True, "content": _json(schemas.RideshareRequest)},
            "responses": {
                "200": {"description": "The quote", "content": _json(schemas.RideshareQuote)},
                **_problems(400, 413, 415, 421, 422),
            },
        }
    if ep == "quotes.batch":
        return {
            "summary": f"Quote up to {schemas.MAX_BATCH_QUOTES} rideshare fares in one call",
            "requestBody": {"required": True, "content": _json(schemas.BatchRequest)},
            "responses": {
                "200": {
                    "description": "One item per requested quote, in order: a quote or a problem",
                    "content": _json(schemas.BatchResponse),
                },
                **_problems(400, 413, 415, 421, 422),
            },
        }
    raise KeyError(ep)


def build_spec(config: RouteConfig) -> dict[str, Any]:
    _, defs = models_json_schema(
        [(m, "validation") for m in (schemas.RideshareRequest, schemas.BatchRequest)]
        + [
            (m, "serialization")
            for m in (
                schemas.MicromobilityOffer,
                schemas.RideshareQuote,
                schemas.BatchResponse,
                schemas.Problem,
                schemas.Health,
            )
        ],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, Any] = {}
    for route in config.app_routes():
        for method in route.methods:
            op = _operation(route)
            op["operationId"] = f"{route.endpoint}.{method.lower()}"
            op["x-pricing-pool"] = route.pool
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
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "pricingservice",
            "version": API_VERSION,
            "description": "Prices bike, scooter and rideshare offers. Errors are RFC 9457 "
            "problem details (application/problem+json). Every response names the pool "
            "that served it in the x-pricing-pool header. Each pool also answers "
            f"GET {meta.healthz} and {meta.readyz} (schema Health) on its own loopback "
            "address, for Envoy's health checks; they are not routed through Envoy.",
        },
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {})},
    }


def init_app(app: Flask) -> None:
    config: RouteConfig = app.extensions["pricing.routes"]
    app.extensions["pricing.openapi"] = json.dumps(build_spec(config), indent=1)
