"""The endpoints. Each is made from its route (so it knows its own timeout);
which URL it answers and in which pool comes from the route config, not from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import Response, current_app, request

from pricing.domain.errors import FieldError, InvalidRequest, NotReady, PricingError
from pricing.domain.regions import REGIONS
from pricing.upstream.gateway import Gateway
from pricing.web.admission import current_deadline
from pricing.web.offers import Mode, build_offer, offer_calls
from pricing.web.schemas import BatchQuote, BatchRequest, RideshareRequest
from pricing.web.validation import parse_json_body, parse_offer_query, resolve_region
from routing.model import Route
from toolkit.contract import JSON, POOL_ENV

View = Callable[..., Response]
ViewFactory = Callable[[Route], View]


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype=JSON)


def _gateway() -> Gateway:
    gateway: Gateway = current_app.extensions["pricing.gateway"]
    return gateway


def micromobility_offer(mode: Mode) -> ViewFactory:
    def factory(route: Route) -> View:
        def view() -> Response:
            query = parse_offer_query(request.args.to_dict(flat=False))
            answers = _gateway().fetch_all(offer_calls(mode, query), current_deadline())
            return json_response(build_offer(mode, query, answers))

        return view

    return factory


def _quote(body: BatchQuote) -> dict[str, Any]:
    from pricing.domain.fares import RideshareQuoteInput, quote_rideshare
    from pricing.domain.geo import LatLng

    origin = LatLng(body.origin.lat, body.origin.lng)
    destination = LatLng(body.destination.lat, body.destination.lng)
    region = resolve_region(origin, destination, body.region)
    requested_at = body.requested_at or datetime.now(UTC).replace(second=0, microsecond=0)
    requested_at = requested_at.astimezone(UTC)
    quote = quote_rideshare(RideshareQuoteInput(origin, destination, region, requested_at))
    return {
        "mode": "rideshare",
        "region": quote.region,
        "price": {
            "amount_minor": quote.amount_minor,
            "currency": quote.currency,
            "discount_minor": 0,
        },
        "surge_multiplier": quote.surge_multiplier,
        "trip": {"distance_m": quote.distance_m, "duration_s": quote.duration_s},
        "requested_at": requested_at.isoformat().replace("+00:00", "Z"),
    }


def rideshare_offer(route: Route) -> View:
    def view() -> Response:
        body = parse_json_body(
            RideshareRequest, request.get_data(cache=False), request.content_type
        )
        return json_response(_quote(body))

    return view


def quotes_batch(route: Route) -> View:
    def view() -> Response:
        body = parse_json_body(BatchRequest, request.get_data(cache=False), request.content_type)
        items: list[dict[str, Any]] = []
        for index, item in enumerate(body.quotes):
            try:
                items.append({"quote": _quote(item)})
            except PricingError as exc:
                items.append({"problem": _item_problem(exc, index)})
        return json_response({"count": len(items), "quotes": items})

    return view


def _item_problem(exc: PricingError, index: int) -> dict[str, Any]:
    from pricing.web.problems import PROBLEM_TYPE_PREFIX

    problem: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + exc.slug,
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
    }
    if isinstance(exc, InvalidRequest):
        problem["errors"] = [
            {"field": f"quotes[{index}].{e.field}", "message": e.message} for e in exc.errors
        ]
    return problem


def regions(route: Route) -> View:
    """The regions and their service areas: where a trip's two ends must lie."""
    body = {
        "regions": [
            {
                "name": region.name,
                "currency": region.currency,
                "area": {
                    "south": region.bbox.south,
                    "west": region.bbox.west,
                    "north": region.bbox.north,
                    "east": region.bbox.east,
                },
            }
            for _, region in sorted(REGIONS.items())
        ]
    }

    def view() -> Response:
        return json_response(body)

    return view


def healthz() -> Response:
    """Alive: the process answers. Nothing else is checked."""
    return json_response({"status": "ok", "pool": current_app.config[POOL_ENV]})


# What ready means, and the app.extensions key each step leaves behind.
READY_WHEN = {
    "app built": "pricing.ready",
    "upstream clients built": "pricing.gateway",
    "tracing set up": "tracing",
}


def readyz() -> Response:
    """Ready: every step of READY_WHEN is done (tracing may have ended up off; it only
    has to have been set up). Envoy health-checks each pool here."""
    waiting = [step for step, key in READY_WHEN.items() if key not in current_app.extensions]
    if waiting:
        raise NotReady(f"waiting for: {', '.join(waiting)}")
    return healthz()


def openapi() -> Response:
    return Response(current_app.extensions["pricing.web.openapi"], mimetype=JSON)


# Endpoint name -> view factory. routes.toml places each in exactly one pool.
ENDPOINTS: dict[str, ViewFactory] = {
    "offers.bike": micromobility_offer("bike"),
    "offers.scooter": micromobility_offer("scooter"),
    "offers.rideshare": rideshare_offer,
    "quotes.batch": quotes_batch,
    "regions.list": regions,
}


# Meta routes: every pool serves them, at the paths [meta] in routes.toml gives them
# (meta.metrics is served by tracing.metrics, whatever the tracing mode).
META_VIEWS: dict[str, View] = {
    "meta.healthz": healthz,
    "meta.readyz": readyz,
    "meta.openapi": openapi,
}

__all__ = ["ENDPOINTS", "META_VIEWS", "FieldError", "json_response"]
