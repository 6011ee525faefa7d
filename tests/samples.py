"""The sample requests the tests send: a bike offer's query and a rideshare quote's body,
and the route labels spans, metrics and the timing core give those two routes.

Unit tests send them to a Flask test client, integration tests through Envoy: one set
of values, so a change to the API's input is made here once.
"""

from __future__ import annotations

import json
from typing import Any

ORIGIN = "37.7700,-122.4200"
DESTINATION = "37.7849,-122.4094"
USER_ID = "u-42"


def offer_query(user_id: str = USER_ID) -> str:
    """The query of an offer (bike or scooter) in San Francisco, for `user_id` (the
    simulator's promotions depend on it)."""
    return f"origin={ORIGIN}&destination={DESTINATION}&user_id={user_id}"


OFFER_QUERY = offer_query()
OFFER_PATH = f"/v1/offers/bike?{OFFER_QUERY}"

RIDE: dict[str, Any] = {
    "origin": {"lat": 37.7749, "lng": -122.4194},
    "destination": {"lat": 37.8049, "lng": -122.4094},
    "user_id": USER_ID,
    "requested_at": "2026-11-20T17:30:00Z",
}
#: RIDE as the bytes a hand-made request carries.
RIDE_BODY = json.dumps(RIDE, separators=(",", ":")).encode()

#: A longer trip, posted by the tests' CPU hogs.
HOG_RIDE: dict[str, Any] = {
    "origin": {"lat": 37.7349, "lng": -122.4894},
    "destination": {"lat": 37.8049, "lng": -122.3994},
    "user_id": "hog",
    "requested_at": "2026-11-20T17:30:00Z",
}

#: The route labels ("METHOD path") of the two routes the tests use most.
BIKE_ROUTE = "GET /v1/offers/bike"
RIDE_ROUTE = "POST /v1/offers/rideshare"
