"""The fake upstream APIs' bodies: shape, determinism, validation."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from simulator import responses
from simulator.responses import (
    BadQuery,
    haversine_m,
    parse_query,
    promotions_active,
    routing_eta,
    vehicles_nearby,
)


def _json(body: bytes) -> Any:
    return json.loads(body)


# --- query strings ---------------------------------------------------------------------


def test_parse_query() -> None:
    assert parse_query(b"") == {}
    assert parse_query(b"lat=37.77&lng=-122.41&mode=bike") == {
        "lat": "37.77",
        "lng": "-122.41",
        "mode": "bike",
    }
    assert parse_query(b"origin=37.77%2C-122.41&user_id=a+b") == {
        "origin": "37.77,-122.41",
        "user_id": "a b",
    }
    assert parse_query(b"a=1&&a=2&flag") == {"a": "2", "flag": ""}


# --- vehicles --------------------------------------------------------------------------


def _vehicles(lat: float, lng: float, mode: str = "bike", **extra: str) -> list[dict[str, Any]]:
    query = {"lat": str(lat), "lng": str(lng), "mode": mode, **extra}
    return _json(vehicles_nearby(query))["vehicles"]


def test_vehicles_shape_and_order() -> None:
    seen = 0
    for i in range(200):
        lat, lng = 37.70 + i * 0.0007, -122.50 + i * 0.0004
        vehicles = _vehicles(lat, lng, "scooter")
        assert len(vehicles) <= 5
        distances = [v["distance_m"] for v in vehicles]
        assert distances == sorted(distances)
        for v in vehicles:
            seen += 1
            assert set(v) == {"id", "mode", "lat", "lng", "battery_pct", "distance_m"}
            assert v["mode"] == "scooter"
            assert v["id"].startswith("scooter-") and len(v["id"]) == len("scooter-") + 6
            assert 10 <= v["battery_pct"] <= 100
            assert isinstance(v["distance_m"], int)
            assert abs(v["lat"] - lat) < 0.004 and abs(v["lng"] - lng) < 0.004
            # the cheap planar distance agrees with the great circle at this scale
            assert v["distance_m"] == pytest.approx(
                haversine_m(lat, lng, v["lat"], v["lng"]), abs=2
            )
            for coordinate in (v["lat"], v["lng"]):
                assert len(repr(coordinate).split(".")[1]) <= 6
    assert seen > 400


def test_vehicles_are_deterministic() -> None:
    first = vehicles_nearby({"lat": "37.7749", "lng": "-122.4194", "mode": "bike"})
    responses._cells.clear()  # recomputed from scratch, not served from the cell cache
    assert vehicles_nearby({"lat": "37.7749", "lng": "-122.4194", "mode": "bike"}) == first
    # the same cell, other mode: other vehicles
    assert _vehicles(37.7749, -122.4194, "scooter") != _json(first)["vehicles"]


def test_vehicles_limit() -> None:
    full = None
    for i in range(100):  # find a cell with several vehicles
        full = _vehicles(37.75 + i * 0.001, -122.45)
        if len(full) >= 3:
            break
    assert full is not None and len(full) >= 3
    lat = 37.75 + i * 0.001
    assert _vehicles(lat, -122.45, limit="2") == full[:2]
    assert _vehicles(lat, -122.45, limit="50") == full


def test_about_three_percent_of_cells_have_no_vehicle() -> None:
    rng = random.Random(5)
    cells = 6000
    empty = sum(
        not _vehicles(37.6 + rng.random() * 0.3, -122.6 + rng.random() * 0.3, "bike")
        for _ in range(cells)
    )
    assert 0.015 <= empty / cells <= 0.05


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"lng": "-122.41", "mode": "bike"}, "lat"),
        ({"lat": "", "lng": "-122.41", "mode": "bike"}, "lat"),
        ({"lat": "north", "lng": "-122.41", "mode": "bike"}, "lat"),
        ({"lat": "91", "lng": "-122.41", "mode": "bike"}, "lat"),
        ({"lat": "nan", "lng": "-122.41", "mode": "bike"}, "lat"),
        ({"lat": "37.77", "lng": "-181", "mode": "bike"}, "lng"),
        ({"lat": "37.77", "lng": "-122.41"}, "mode"),
        ({"lat": "37.77", "lng": "-122.41", "mode": "car"}, "mode"),
        ({"lat": "37.77", "lng": "-122.41", "mode": "bike", "limit": "0"}, "limit"),
        ({"lat": "37.77", "lng": "-122.41", "mode": "bike", "limit": "51"}, "limit"),
        ({"lat": "37.77", "lng": "-122.41", "mode": "bike", "limit": "five"}, "limit"),
    ],
)
def test_vehicles_invalid_query(query: dict[str, str], field: str) -> None:
    with pytest.raises(BadQuery) as info:
        vehicles_nearby(query)
    assert info.value.field == field


# --- routing ---------------------------------------------------------------------------


def test_routing_eta_is_the_detoured_great_circle_at_mode_speed() -> None:
    query = {"origin": "37.77,-122.41", "destination": "37.78,-122.40"}
    straight = haversine_m(37.77, -122.41, 37.78, -122.40)
    bike = _json(routing_eta({**query, "mode": "bike"}))
    assert bike == {
        "mode": "bike",
        "distance_m": round(straight * 1.3),
        "duration_s": round(round(straight * 1.3) / 4.2),
    }
    scooter = _json(routing_eta({**query, "mode": "scooter"}))
    assert scooter["distance_m"] == bike["distance_m"]
    assert scooter["duration_s"] == round(bike["distance_m"] / 5.0)
    assert 1800 <= bike["distance_m"] <= 1900  # ~1.4 km as the crow flies in San Francisco


def test_routing_same_point_is_zero() -> None:
    body = routing_eta({"origin": "37.77,-122.41", "destination": "37.77,-122.41", "mode": "bike"})
    assert _json(body) == {"mode": "bike", "distance_m": 0, "duration_s": 0}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"destination": "37.78,-122.40", "mode": "bike"}, "origin"),
        ({"origin": "37.77", "destination": "37.78,-122.40", "mode": "bike"}, "origin"),
        ({"origin": "37.77,x", "destination": "37.78,-122.40", "mode": "bike"}, "origin"),
        ({"origin": "37.77,-122.41", "destination": "95,-122.40", "mode": "bike"}, "destination"),
        ({"origin": "37.77,-122.41", "destination": "37.78,-122.40", "mode": "walk"}, "mode"),
    ],
)
def test_routing_invalid_query(query: dict[str, str], field: str) -> None:
    with pytest.raises(BadQuery) as info:
        routing_eta(query)
    assert info.value.field == field


# --- promotions ------------------------------------------------------------------------


def test_documented_example_user_gets_bike10() -> None:
    assert _json(promotions_active({"user_id": "u123", "mode": "bike"})) == {
        "promotions": [{"code": "BIKE10", "percent_off": 10, "max_discount_minor": 300}]
    }


def test_promotions_are_deterministic_and_some_users_have_none() -> None:
    counts = {0: 0, 1: 0, 2: 0}
    for i in range(3000):
        query = {"user_id": f"user-{i}", "mode": "scooter"}
        body = promotions_active(query)
        assert promotions_active(query) == body
        promotions = _json(body)["promotions"]
        counts[len(promotions)] += 1
        for p in promotions:
            assert set(p) == {"code", "percent_off", "max_discount_minor"}
            assert 0 < p["percent_off"] <= 100 and p["max_discount_minor"] > 0
    assert 0.25 <= counts[0] / 3000 <= 0.45
    assert counts[1] > 0 and counts[2] > 0


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"mode": "bike"}, "user_id"),
        ({"user_id": "", "mode": "bike"}, "user_id"),
        ({"user_id": "u" * 129, "mode": "bike"}, "user_id"),
        ({"user_id": "u1"}, "mode"),
    ],
)
def test_promotions_invalid_query(query: dict[str, str], field: str) -> None:
    with pytest.raises(BadQuery) as info:
        promotions_active(query)
    assert info.value.field == field
