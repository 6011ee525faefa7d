"""Bike and scooter offers: which upstreams to ask, and how their answers combine.

vehicles and routing are required: without a vehicle or a trip there is no
offer. promotions is optional: when it fails the offer is priced without a
discount and says so in `degraded`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

from pricing.domain.errors import NoVehicleNearby, UpstreamFailure, UpstreamUnavailable
from pricing.upstream.gateway import UPSTREAMS, Answer, Call
from pricing.web.validation import OfferQuery

Mode = Literal["bike", "scooter"]
WALKING_SPEED_MPS = 1.3


def offer_calls(mode: Mode, query: OfferQuery) -> list[Call]:
    o, d = query.origin, query.destination
    return [
        Call("vehicles", f"/vehicles/v1/nearby?lat={o.lat}&lng={o.lng}&mode={mode}&limit=5"),
        Call(
            "routing",
            f"/routing/v1/eta?origin={o.lat},{o.lng}&destination={d.lat},{d.lng}&mode={mode}",
        ),
        Call("promotions", f"/promotions/v1/active?user_id={quote(query.user_id)}&mode={mode}"),
    ]


def build_offer(mode: Mode, query: OfferQuery, answers: Mapping[str, Answer]) -> dict[str, Any]:
    """The offer as a JSON-ready dict (shape: pricing.web.schemas.MicromobilityOffer)."""
    _raise_for_required(answers)
    vehicles = _get(answers, "vehicles")
    trip = _get(answers, "routing")
    try:
        candidates = vehicles["vehicles"]
        distance_m = int(trip["distance_m"])
        duration_s = int(trip["duration_s"])
    except (KeyError, TypeError, ValueError):
        raise UpstreamUnavailable(
            UpstreamFailure("vehicles/routing", "bad-response", "answered an unexpected shape")
        ) from None
    if not candidates:
        raise NoVehicleNearby(f"no {mode} is available near the origin")
    try:
        vehicle = min(candidates, key=lambda v: v["distance_m"])
        vehicle_out: dict[str, Any] = {
            "id": str(vehicle["id"]),
            "battery_pct": int(vehicle["battery_pct"]),
            "distance_m": int(vehicle["distance_m"]),
        }
    except (KeyError, TypeError, ValueError):
        raise UpstreamUnavailable(
            UpstreamFailure("vehicles", "bad-response", "answered an unexpected vehicle shape")
        ) from None

    rates = query.region.bike if mode == "bike" else query.region.scooter
    minutes = max(1, math.ceil(duration_s / 60))
    gross_minor = rates.unlock_minor + rates.per_minute_minor * minutes

    degraded: list[str] = []
    promotion_out = None
    discount_minor = 0
    promotions = answers.get("promotions")
    if isinstance(promotions, dict):
        best = _best_promotion(promotions.get("promotions"))
        if best is not None:
            percent, cap, code = best
            discount_minor = min(cap, gross_minor * percent // 100)
            promotion_out = {"code": code, "percent_off": percent}
    else:
        degraded.append("promotions")

    return {
        "mode": mode,
        "region": query.region.name,
        "price": {
            "amount_minor": gross_minor - discount_minor,
            "currency": query.region.currency,
            "discount_minor": discount_minor,
        },
        "eta_s": math.ceil(vehicle_out["distance_m"] / WALKING_SPEED_MPS),
        "trip": {"distance_m": distance_m, "duration_s": duration_s},
        "vehicle": vehicle_out,
        "promotion": promotion_out,
        "degraded": degraded,
    }


def _raise_for_required(answers: Mapping[str, Answer]) -> None:
    failures = [
        a
        for name, a in answers.items()
        if isinstance(a, UpstreamFailure) and UPSTREAMS[name].required
    ]
    if failures:
        # A timeout is the more useful answer: it says "try again later" and 504.
        failures.sort(key=lambda f: f.reason != "timeout")
        raise UpstreamUnavailable(failures[0])


def _get(answers: Mapping[str, Answer], name: str) -> dict[str, Any]:
    answer = answers.get(name)
    if not isinstance(answer, dict):
        raise UpstreamUnavailable(UpstreamFailure(name, "error", "was not called"))
    return answer


def _best_promotion(raw: Any) -> tuple[int, int, str] | None:
    """(percent_off, max_discount_minor, code) of the largest valid promotion."""
    best: tuple[int, int, str] | None = None
    if not isinstance(raw, list):
        return None
    for promo in raw:
        try:
            percent = int(promo["percent_off"])
            cap = int(promo["max_discount_minor"])
            code = str(promo["code"])
        except (KeyError, TypeError, ValueError):
            continue
        if 0 < percent <= 100 and cap >= 0 and (best is None or percent > best[0]):
            best = (percent, cap, code)
    return best
