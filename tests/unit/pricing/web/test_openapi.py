"""/openapi.json says what the code checks: problem types, areas, ranges, statuses."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from pricing.domain import errors
from pricing.domain.regions import REGIONS
from pricing.web.openapi import PROBLEM_TYPES, build_spec, problem_type
from pricing.web.schemas import Regions
from routing.model import RouteConfig


@pytest.fixture(scope="module")
def spec(routes: RouteConfig) -> dict[str, Any]:
    return build_spec(routes)


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def test_every_problem_the_domain_raises_is_documented() -> None:
    slugs = {c.slug for c in _subclasses(errors.PricingError) if c is not errors.PricingError}
    slugs |= {"upstream-timeout"}  # UpstreamUnavailable's other face
    assert slugs <= set(PROBLEM_TYPES)


def test_each_operation_lists_its_statuses_with_their_problem_types(spec: dict) -> None:
    def types(path: str, method: str, status: str) -> list[str]:
        response = spec["paths"][path][method]["responses"][status]
        schema = response["content"]["application/problem+json"]["schema"]
        return schema["allOf"][1]["properties"]["type"]["enum"]

    bike = spec["paths"]["/v1/offers/bike"]["get"]["responses"]
    assert sorted(bike) == ["200", "400", "404", "413", "421", "422", "431", "503", "504"]
    assert types("/v1/offers/bike", "get", "422") == [
        problem_type("invalid-request"),
        problem_type("outside-service-area"),
    ]
    assert types("/v1/offers/bike", "get", "404") == [problem_type("no-vehicle-nearby")]
    assert "Retry-After" in bike["503"]["headers"]
    assert problem_type("no-route") in types("/v1/offers/rideshare", "post", "422")
    # A batch refuses only a body that breaks its schema; areas are per-item problems.
    assert types("/v1/quotes/batch", "post", "422") == [problem_type("invalid-request")]


def test_query_points_are_number_pairs_in_a_service_area(spec: dict) -> None:
    (origin,) = (
        p for p in spec["paths"]["/v1/offers/bike"]["get"]["parameters"] if p["name"] == "origin"
    )
    assert (origin["style"], origin["explode"]) == ("form", False)
    schema = origin["schema"]
    assert [(i["minimum"], i["maximum"]) for i in schema["prefixItems"]] == [
        (-90, 90),
        (-180, 180),
    ]
    areas = {a["title"]: a["prefixItems"] for a in schema["anyOf"]}
    for name, region in REGIONS.items():
        lat, lng = areas[f"{name} service area"]
        assert (lat["minimum"], lat["maximum"]) == (region.bbox.south, region.bbox.north)
        assert (lng["minimum"], lng["maximum"]) == (region.bbox.west, region.bbox.east)


def test_regions_are_published(io_client: FlaskClient) -> None:
    response = io_client.get("/v1/regions")
    assert response.status_code == 200
    regions = Regions.model_validate(response.get_json()).regions
    assert {r.name: r.area.south for r in regions} == {
        name: r.bbox.south for name, r in REGIONS.items()
    }
