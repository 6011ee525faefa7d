"""Bad input gets a 4xx problem naming the field: never a 500."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

from pricing.web.schemas import MAX_BATCH_QUOTES
from tests.samples import OFFER_QUERY, ORIGIN, RIDE
from tests.unit.support.problems import problem


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("", ["origin", "destination", "user_id"]),
        ("origin=37.77&destination=37.78,-122.40&user_id=u", ["origin"]),
        ("origin=abc,def&destination=37.78,-122.40&user_id=u", ["origin"]),
        ("origin=91,0&destination=37.78,-122.40&user_id=u", ["origin"]),
        ("origin=nan,1&destination=37.78,-122.40&user_id=u", ["origin"]),
        ("origin=37.77,-122.41&destination=37.78,-200&user_id=u", ["destination"]),
        ("origin=37.77,-122.41&destination=37.78,-122.40&user_id=" + "x" * 65, ["user_id"]),
        ("origin=37.77,-122.41&destination=37.78,-122.40&user_id=a%20b", ["user_id"]),
        (OFFER_QUERY + "&region=mars", ["region"]),
        (OFFER_QUERY + "&origin=37.7,-122.4", ["origin"]),
        ("origin=0,0&destination=0,0&user_id=u", ["origin"]),  # no service area there
        ("origin=37.77,-122.41&destination=40.7,-74.0&user_id=u", ["destination"]),
        (OFFER_QUERY + "&region=nyc", ["origin", "destination"]),
    ],
)
def test_bad_offer_query_is_422_naming_the_field(
    io_client: FlaskClient, query: str, fields: list[str]
) -> None:
    response = io_client.get(f"/v1/offers/bike?{query}")
    assert response.status_code == 422
    body = problem(response)
    assert [e["field"] for e in body["errors"]] == fields


INVALID = "urn:pricingservice:problem:invalid-request"
OUTSIDE = "urn:pricingservice:problem:outside-service-area"


@pytest.mark.parametrize(
    ("query", "type_"),
    [
        ("origin=0,0&destination=0,0&user_id=u", OUTSIDE),  # no service area there
        ("origin=37.77,-122.41&destination=40.7,-74.0&user_id=u", OUTSIDE),  # sf -> nyc
        (OFFER_QUERY + "&region=nyc", OUTSIDE),  # both ends in sf
        (OFFER_QUERY + "&region=mars", INVALID),
        ("origin=91,0&destination=37.78,-122.40&user_id=u", INVALID),
    ],
)
def test_area_rules_have_their_own_problem_type(
    io_client: FlaskClient, query: str, type_: str
) -> None:
    response = io_client.get(f"/v1/offers/bike?{query}")
    assert response.status_code == 422
    assert problem(response)["type"] == type_


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        # JSON numbers, as OpenAPI clients write the array items.
        ("37.7749,-122.4194", True),
        ("3.77749e1,-1.224194E+2", True),
        ("37.77490000000000000000000000000000000000001,-122.4194", True),  # no length limit
        ("+37.7749,-122.4194", False),
        ("037.7749,-122.4194", False),
        ("37.,-122.4194", False),
        (".5,-122.4194", False),
        ("37.7749,-122.4194,", False),
        ("1e999,0", False),  # inf
    ],
)
def test_coordinates_are_json_numbers(io_client: FlaskClient, origin: str, ok: bool) -> None:
    query = OFFER_QUERY.replace(ORIGIN, quote(origin, safe=","))
    response = io_client.get(f"/v1/offers/bike?{query}")
    assert response.status_code == (200 if ok else 422), response.data


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**RIDE, "origin": {"lat": "37.7", "lng": -122.4}}, "origin.lat"),
        ({**RIDE, "origin": {"lat": 100, "lng": -122.4}}, "origin.lat"),
        ({**RIDE, "origin": {"lat": True, "lng": -122.4}}, "origin.lat"),
        ({k: v for k, v in RIDE.items() if k != "destination"}, "destination"),
        ({**RIDE, "surprise": 1}, "surprise"),
        ({**RIDE, "region": "mars"}, "region"),
        ({**RIDE, "requested_at": "2026-11-21T10:00:00"}, "requested_at"),  # no offset
        ({**RIDE, "origin": {"lat": 1e308, "lng": 0}}, "origin.lat"),
        ({**RIDE, "user_id": ""}, "user_id"),
    ],
)
def test_bad_rideshare_body_is_422_naming_the_field(
    cpu_client: FlaskClient, body: dict, field: str
) -> None:
    response = cpu_client.post("/v1/offers/rideshare", json=body)
    assert response.status_code == 422, response.data
    assert field in [e["field"] for e in problem(response)["errors"]]


@pytest.mark.parametrize(
    ("requested_at", "ok"),
    [
        ("1970-01-01T00:00:00Z", True),
        ("2099-12-31T23:59:59-23:59", True),
        ("2024-02-29T12:00:00.123456789+05:30", True),
        ("1969-12-31T23:59:59Z", False),
        ("2100-01-01T00:00:00Z", False),
        ("2023-02-29T12:00:00Z", False),
        ("2026-11-20 17:30:00Z", False),  # pydantic alone takes these four
        ("2026-11-20t17:30:00z", False),
        ("2026-11-20T17:30:00+0530", False),
        ("2026-11-20T17:30Z", False),
        (1_700_000_000, False),
    ],
)
def test_requested_at_is_exactly_its_documented_pattern(
    cpu_client: FlaskClient, requested_at: object, ok: bool
) -> None:
    response = cpu_client.post("/v1/offers/rideshare", json={**RIDE, "requested_at": requested_at})
    assert response.status_code == (200 if ok else 422), response.data
    if not ok:
        assert [e["field"] for e in problem(response)["errors"]] == ["requested_at"]


def test_rideshare_outside_its_region_is_its_own_problem_type(cpu_client: FlaskClient) -> None:
    nyc = {"lat": 40.7, "lng": -74.0}
    response = cpu_client.post("/v1/offers/rideshare", json={**RIDE, "destination": nyc})
    assert response.status_code == 422
    assert problem(response)["type"] == OUTSIDE


def test_a_batch_quote_outside_the_areas_is_that_items_problem(cpu_client: FlaskClient) -> None:
    far = {**RIDE, "origin": {"lat": 0, "lng": 0}}
    response = cpu_client.post("/v1/quotes/batch", json={"quotes": [RIDE, far]})
    assert response.status_code == 200, response.data
    first, second = response.get_json()["quotes"]
    assert "quote" in first
    assert second["problem"]["type"] == OUTSIDE
    assert second["problem"]["errors"][0]["field"] == "quotes[1].origin"


def test_problems_carry_the_request_id(io_client: FlaskClient) -> None:
    response = io_client.get("/v1/offers/bike?origin=1", headers={"x-request-id": "rid-1"})
    assert problem(response)["request_id"] == "rid-1"
    assert "request_id" not in problem(io_client.get("/v1/offers/bike?origin=1"))


def test_nan_in_json_is_rejected(cpu_client: FlaskClient) -> None:
    raw = json.dumps(RIDE).replace("37.7749", "NaN")
    response = cpu_client.post("/v1/offers/rideshare", data=raw, content_type="application/json")
    assert response.status_code in (400, 422)
    problem(response)


@pytest.mark.parametrize(
    ("data", "content_type", "status"),
    [
        ("{not json", "application/json", 400),
        ("", "application/json", 400),
        (json.dumps(RIDE), "text/plain", 415),
        (json.dumps(RIDE), None, 415),
        ("[1, 2]", "application/json", 422),
        ("x" * 70_000, "application/json", 413),
    ],
)
def test_malformed_bodies(
    cpu_client: FlaskClient, data: str, content_type: str | None, status: int
) -> None:
    response = cpu_client.post("/v1/offers/rideshare", data=data, content_type=content_type)
    assert response.status_code == status
    problem(response)


def test_oversized_batch_is_422(cpu_client: FlaskClient) -> None:
    response = cpu_client.post("/v1/quotes/batch", json={"quotes": [RIDE] * (MAX_BATCH_QUOTES + 1)})
    assert response.status_code == 422
    assert problem(response)["errors"][0]["field"] == "quotes"


def test_wrong_pool_is_421(io_client: FlaskClient, cpu_client: FlaskClient) -> None:
    response = io_client.post("/v1/offers/rideshare", json=RIDE)
    assert response.status_code == 421
    assert "'cpu' pool" in problem(response)["detail"]
    response = cpu_client.get(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 421
    assert response.headers["x-pricing-pool"] == "cpu"


def test_shared_pool_serves_everything(shared_client: FlaskClient) -> None:
    assert shared_client.get(f"/v1/offers/bike?{OFFER_QUERY}").status_code == 200
    assert shared_client.post("/v1/offers/rideshare", json=RIDE).status_code == 200


def test_unknown_path_and_method_are_problems(io_client: FlaskClient) -> None:
    response = io_client.get("/v1/nothing")
    assert response.status_code == 404
    problem(response)
    response = io_client.delete(f"/v1/offers/bike?{OFFER_QUERY}")
    assert response.status_code == 405
    assert "GET" in response.headers["Allow"]
    problem(response)


def test_meta_endpoints_on_every_pool(io_client: FlaskClient, cpu_client: FlaskClient) -> None:
    for client, pool in ((io_client, "io"), (cpu_client, "cpu")):
        assert client.get("/healthz").get_json() == {"status": "ok", "pool": pool}
        assert client.get("/readyz").status_code == 200
        spec = client.get("/openapi.json").get_json()
        assert spec["openapi"] == "3.1.0"
