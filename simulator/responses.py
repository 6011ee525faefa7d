"""The upstream APIs' JSON bodies, built from the query string.

Each builder takes the parsed query (name -> value) and returns the JSON body as
bytes, or raises BadQuery naming the parameter. Answers are deterministic: the
same query always gives the same body, so the server may cache them. Bodies are
written with string templates rather than json.dumps (cheaper); nothing the
client sent is echoed back except validated enum values, so no escaping is needed.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable, Mapping
from typing import Final
from urllib.parse import unquote_plus

EARTH_RADIUS_M: Final = 6_371_008.8
DETOUR_FACTOR: Final = 1.3  # streets are not straight lines
SPEED_M_PER_S: Final[dict[str, float]] = {"bike": 4.2, "scooter": 5.0}
MODES: Final = ("bike", "scooter")

EMPTY_CELL_BYTE: Final = 8  # first hash byte below this -> no vehicles (8/256 ~ 3 %)
MAX_VEHICLES: Final = 5
SPREAD_MICRODEG: Final = 6000  # vehicles lie within +-0.003 deg of the cell centre
DEFAULT_LIMIT: Final = 5
MAX_LIMIT: Final = 50

NO_PROMOTION_PERCENT: Final = 35  # share of users without any promotion
# Picked so that the API docs' example user, u123, gets exactly BIKE10 for bikes.
PROMOTION_SALT: Final = b"promo11:"
# code, percent_off, max_discount_minor
PROMOTIONS: Final[dict[str, tuple[tuple[str, int, int], ...]]] = {
    "bike": (("BIKE10", 10, 300), ("BIKE20", 20, 500), ("WELCOME50", 50, 1000)),
    "scooter": (("SCOOT15", 15, 400), ("NIGHT25", 25, 600), ("WELCOME50", 50, 1000)),
}

Query = Mapping[str, str]
Builder = Callable[[Query], bytes]


class BadQuery(ValueError):
    """A query parameter is missing or invalid; `field` names it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


def parse_query(raw: bytes) -> dict[str, str]:
    """`a=1&b=x%20y` -> {"a": "1", "b": "x y"}; the last of repeated names wins."""
    out: dict[str, str] = {}
    if not raw:
        return out
    text = raw.decode("latin-1")
    if "%" in text or "+" in text:
        for part in text.split("&"):
            name, _, value = part.partition("=")
            out[unquote_plus(name)] = unquote_plus(value)
    else:
        for part in text.split("&"):
            name, _, value = part.partition("=")
            out[name] = value
    out.pop("", None)
    return out


def haversine_m(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    """Great-circle distance in metres."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((phi2 - phi1) / 2) ** 2
        + math.cos(phi1) * math.cos(phi2) * math.sin(math.radians(lng2 - lng1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


# --- vehicles ---------------------------------------------------------------------------

# (cell lat, cell lng, mode) -> the cell's vehicles as (lat, lng, JSON up to "distance_m":).
# Only the distances depend on the exact query point, so the rest is built once per cell.
_cells: dict[tuple[int, int, str], tuple[tuple[float, float, str], ...]] = {}
CELL_CACHE_MAX: Final = 100_000
_M_PER_DEG: Final = math.pi * EARTH_RADIUS_M / 180.0
_VEHICLE_BYTES: Final = struct.Struct(">3sHHB")  # id, lat offset, lng offset, battery


def vehicles_nearby(query: Query) -> bytes:
    """`GET /vehicles/v1/nearby?lat=&lng=&mode=&limit=` -> {"vehicles": [...]} by distance."""
    lat = _coordinate(query, "lat", 90.0)
    lng = _coordinate(query, "lng", 180.0)
    mode = _mode(query)
    limit = _limit(query)
    cell = vehicles_in_cell(round(lat * 1000.0), round(lng * 1000.0), mode)
    if not cell:
        return b'{"vehicles":[]}'
    # Equirectangular distance: exact enough within a few hundred metres, and cheap.
    ky = _M_PER_DEG
    kx = _M_PER_DEG * math.cos(math.radians(lat))
    rows = sorted(
        (round(math.hypot((vlat - lat) * ky, (vlng - lng) * kx)), head) for vlat, vlng, head in cell
    )
    items = ",".join([f"{head}{dist}}}" for dist, head in rows[:limit]])
    return f'{{"vehicles":[{items}]}}'.encode()


def vehicles_in_cell(
    cell_lat: int, cell_lng: int, mode: str
) -> tuple[tuple[float, float, str], ...]:
    """The vehicles of one cell (lat/lng rounded to 0.001 deg, given x1000), 0-5 of them,
    as (lat, lng, JSON object text up to and including `"distance_m":`)."""
    key = (cell_lat, cell_lng, mode)
    cell = _cells.get(key)
    if cell is not None:
        return cell
    digest = hashlib.blake2b(f"{cell_lat},{cell_lng},{mode}".encode(), digest_size=48).digest()
    vehicles = []
    if digest[0] >= EMPTY_CELL_BYTE:
        for i in range(1 + digest[1] % MAX_VEHICLES):
            vid, dlat, dlng, battery = _VEHICLE_BYTES.unpack_from(digest, 2 + 8 * i)
            # micro-degrees, so the coordinates print with at most 6 decimals
            vlat = (cell_lat * 1000 + dlat * SPREAD_MICRODEG // 65535 - SPREAD_MICRODEG // 2) / 1e6
            vlng = (cell_lng * 1000 + dlng * SPREAD_MICRODEG // 65535 - SPREAD_MICRODEG // 2) / 1e6
            head = (
                f'{{"id":"{mode}-{vid.hex()}","mode":"{mode}","lat":{vlat},"lng":{vlng},'
                f'"battery_pct":{10 + battery % 91},"distance_m":'
            )
            vehicles.append((vlat, vlng, head))
    cell = tuple(vehicles)
    if len(_cells) >= CELL_CACHE_MAX:
        _cells.clear()
    _cells[key] = cell
    return cell


# --- routing ----------------------------------------------------------------------------


def routing_eta(query: Query) -> bytes:
    """`GET /routing/v1/eta?origin=lat,lng&destination=lat,lng&mode=` -> distance and duration."""
    olat, olng = _point(query, "origin")
    dlat, dlng = _point(query, "destination")
    mode = _mode(query)
    distance = round(haversine_m(olat, olng, dlat, dlng) * DETOUR_FACTOR)
    duration = round(distance / SPEED_M_PER_S[mode])
    return f'{{"mode":"{mode}","distance_m":{distance},"duration_s":{duration}}}'.encode()


# --- promotions -------------------------------------------------------------------------


def promotions_active(query: Query) -> bytes:
    """`GET /promotions/v1/active?user_id=&mode=` -> the user's promotions (maybe none)."""
    user_id = query.get("user_id", "")
    if not user_id:
        raise BadQuery("user_id", "is required")
    if len(user_id) > 128:
        raise BadQuery("user_id", "must be at most 128 characters")
    mode = _mode(query)
    digest = hashlib.blake2b(PROMOTION_SALT + user_id.encode(), digest_size=8).digest()
    if digest[0] * 100 // 256 < NO_PROMOTION_PERCENT:
        return b'{"promotions":[]}'
    catalog = PROMOTIONS[mode]
    first = digest[1] % len(catalog)
    picked = [catalog[first]]
    if digest[2] % 3 == 0:  # a third of those users have two
        picked.append(catalog[(first + 1) % len(catalog)])
    items = ",".join(
        f'{{"code":"{code}","percent_off":{pct},"max_discount_minor":{cap}}}'
        for code, pct, cap in picked
    )
    return f'{{"promotions":[{items}]}}'.encode()


# --- parameters -------------------------------------------------------------------------


def _float(query: Query, name: str) -> float:
    raw = query.get(name)
    if raw is None or raw == "":
        raise BadQuery(name, "is required")
    try:
        value = float(raw)
    except ValueError:
        raise BadQuery(name, f"must be a number, got {raw[:32]!r}") from None
    if not math.isfinite(value):
        raise BadQuery(name, "must be a finite number")
    return value


def _coordinate(query: Query, name: str, bound: float) -> float:
    value = _float(query, name)
    if not -bound <= value <= bound:
        raise BadQuery(name, f"must be between {-bound:g} and {bound:g}")
    return value


def _point(query: Query, name: str) -> tuple[float, float]:
    raw = query.get(name)
    if not raw:
        raise BadQuery(name, "is required (lat,lng)")
    lat_s, sep, lng_s = raw.partition(",")
    try:
        lat, lng = float(lat_s), float(lng_s)
    except ValueError:
        lat = lng = math.nan
    if not sep or not (-90.0 <= lat <= 90.0 and -180.0 <= lng <= 180.0):
        raise BadQuery(name, f"must be 'lat,lng' in degrees, got {raw[:48]!r}")
    return lat, lng


def _mode(query: Query) -> str:
    mode = query.get("mode")
    if mode not in SPEED_M_PER_S:
        raise BadQuery("mode", f"must be one of {', '.join(MODES)}")
    return mode


def _limit(query: Query) -> int:
    raw = query.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:
        raise BadQuery("limit", f"must be an integer between 1 and {MAX_LIMIT}")
    return int(raw)
