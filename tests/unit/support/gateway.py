"""A fake upstream gateway: the app's upstream calls answered from a table, in
process (no network), with the calls and their deadline recorded."""

from __future__ import annotations

from collections.abc import Sequence

from pricing.domain.deadline import Deadline
from pricing.domain.errors import UpstreamFailure
from pricing.upstream.gateway import Answer, Call

VEHICLES = {
    "vehicles": [
        {
            "id": "bike-far",
            "mode": "bike",
            "lat": 37.77,
            "lng": -122.41,
            "battery_pct": 90,
            "distance_m": 300,
        },
        {
            "id": "bike-near",
            "mode": "bike",
            "lat": 37.77,
            "lng": -122.41,
            "battery_pct": 55,
            "distance_m": 130,
        },
    ]
}
ROUTE = {"mode": "bike", "distance_m": 1840, "duration_s": 520}
PROMOS = {"promotions": [{"code": "BIKE10", "percent_off": 10, "max_discount_minor": 300}]}


class FakeGateway:
    """Answers each upstream from a table; records the calls and the deadline."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {
            "vehicles": VEHICLES,
            "routing": ROUTE,
            "promotions": PROMOS,
        }
        self.calls: list[Call] = []
        self.deadlines: list[Deadline] = []

    def fail(self, upstream: str, reason: str = "error") -> None:
        self.answers[upstream] = UpstreamFailure(upstream, reason, f"fake {reason}")

    def fetch_all(self, calls: Sequence[Call], deadline: Deadline) -> dict[str, Answer]:
        self.calls.extend(calls)
        self.deadlines.append(deadline)
        return {c.upstream: self.answers[c.upstream] for c in calls}
