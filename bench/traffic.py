"""The requests the benchmark sends, prebuilt as bytes per kind.

Kinds are the Flask endpoint names from the route config, so paths come from
`routes.toml` and a renamed path cannot silently break the benchmark:

- offers: GET `offers.bike` and `offers.scooter` (half of the offer rate each);
  the io pool fans each out to three upstreams in parallel;
- cpu: POST `offers.rideshare`: a fastest path over a synthetic road graph plus a
  surge model, pure CPU. A quote's cost grows with the trip's length (Dijkstra
  settles every node closer than the destination); trips are drawn so that one
  quote costs ~20-40 ms of CPU on the benchmark machine (measured in-process:
  0.45 of the way across town ~18 ms, 0.5 ~21 ms, 0.6 ~26 ms, 0.7 ~37 ms);
- batch: POST `quotes.batch` with `BATCH_SIZE` such quotes (not in the benchmark's
  comparison; `routes suggest`'s validation drives it).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass

from routing.model import RouteConfig
from simulator.responses import vehicles_in_cell
from toolkit.contract import JSON

OFFER_KINDS: tuple[str, ...] = ("offers.bike", "offers.scooter")
CPU_KINDS: tuple[str, ...] = ("offers.rideshare",)
BATCH_KINDS: tuple[str, ...] = ("quotes.batch",)
# Groups the user sets rates for (`--rates cpu=30,offers=100`), and their kinds.
GROUPS: Mapping[str, tuple[str, ...]] = {
    "offers": OFFER_KINDS,
    "cpu": CPU_KINDS,
    "batch": BATCH_KINDS,
}
# Quotes per batch request.
BATCH_SIZE = 4

# San Francisco's service area (pricing.domain.regions "sf"): trips stay inside it.
_SF_SOUTH, _SF_WEST, _SF_NORTH, _SF_EAST = 37.70, -122.52, 37.82, -122.35
# Fraction of the way across town of a rideshare trip: sets its CPU cost.
_TRIP_FRACTION = (0.45, 0.70)
_VARIANTS = 64


def build_request(
    method: str,
    target: str,
    host: str,
    *,
    body: bytes = b"",
    content_type: str | None = None,
    extra_headers: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """One request as bytes, ready to send on a keep-alive connection. Not http.client:
    the generator shares the machine with what it measures, and prebuilt bytes cost
    nothing per request."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    lines.extend(f"{k}: {v}" for k, v in extra_headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(frozen=True)
class PreparedRequest:
    """A request as bytes: `head` (request line and headers, each ending CRLF, without
    the blank line) and `body`. Split so the generator can add a traceparent header."""

    head: bytes
    body: bytes

    def wire(self, extra_header: bytes = b"") -> bytes:
        return self.head + extra_header + b"\r\n" + self.body


@dataclass(frozen=True)
class Target:
    """Where one kind of request goes, and its prepared variants."""

    kind: str
    host: str
    port: int
    requests: tuple[PreparedRequest, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "host": self.host,
            "port": self.port,
            "requests": [
                [r.head.decode("latin-1"), r.body.decode("latin-1")] for r in self.requests
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Target:
        raw = data["requests"]
        assert isinstance(raw, list)
        return cls(
            kind=str(data["kind"]),
            host=str(data["host"]),
            port=int(str(data["port"])),
            requests=tuple(
                PreparedRequest(h.encode("latin-1"), b.encode("latin-1")) for h, b in raw
            ),
        )


def _prepared(raw: bytes) -> PreparedRequest:
    head, _, body = raw.partition(b"\r\n\r\n")
    return PreparedRequest(head + b"\r\n", body)


def offer_requests(
    config: RouteConfig, kind: str, host: str, seed: int = 1
) -> tuple[PreparedRequest, ...]:
    """Short bike/scooter trips around the city, from many users."""
    route = config.route_for_endpoint(kind)
    if route is None:
        raise ValueError(f"the route config has no endpoint {kind!r}")
    mode = kind.split(".")[-1]
    rng = random.Random(f"{seed}:{kind}")
    out: list[PreparedRequest] = []
    while len(out) < _VARIANTS:
        i = len(out)
        lat = round(rng.uniform(_SF_SOUTH + 0.02, _SF_NORTH - 0.04), 4)
        lng = round(rng.uniform(_SF_WEST + 0.02, _SF_EAST - 0.04), 4)
        # Some of the simulator's map cells hold no vehicle (the offer is then a
        # correct 404): the benchmark measures offers that can succeed.
        if not vehicles_in_cell(round(lat * 1000.0), round(lng * 1000.0), mode):
            continue
        to_lat, to_lng = lat + rng.uniform(0.005, 0.02), lng + rng.uniform(0.005, 0.02)
        query = f"origin={lat:.4f},{lng:.4f}&destination={to_lat:.4f},{to_lng:.4f}&user_id=u-{i}"
        out.append(_prepared(build_request("GET", f"{route.path}?{query}", host)))
    return tuple(out)


def _rideshare_quotes(seed: int) -> list[dict[str, object]]:
    rng = random.Random(f"{seed}:rideshare")
    span_lat, span_lng = 0.10, 0.14  # corner-to-corner, inside the service area
    out: list[dict[str, object]] = []
    for i in range(_VARIANTS):
        frac = rng.uniform(*_TRIP_FRACTION)
        a = (_SF_SOUTH + 0.005 + rng.random() * 0.02, _SF_WEST + 0.005 + rng.random() * 0.03)
        # South-west to north-east only: the reverse direction costs about twice as
        # much CPU for the same distance (the graph's one-way streets).
        origin, destination = a, (a[0] + frac * span_lat, a[1] + frac * span_lng)
        out.append(
            {
                "origin": {"lat": round(origin[0], 5), "lng": round(origin[1], 5)},
                "destination": {"lat": round(destination[0], 5), "lng": round(destination[1], 5)},
                "user_id": f"u-{i}",
            }
        )
    return out


def _json_posts(
    config: RouteConfig, endpoint: str, host: str, bodies: list[object]
) -> tuple[PreparedRequest, ...]:
    route = config.route_for_endpoint(endpoint)
    if route is None:
        raise ValueError(f"the route config has no endpoint {endpoint!r}")
    out = []
    for body in bodies:
        raw = build_request(
            "POST",
            route.path,
            host,
            body=json.dumps(body, separators=(",", ":")).encode(),
            content_type=JSON,
        )
        out.append(_prepared(raw))
    return tuple(out)


def rideshare_requests(
    config: RouteConfig, host: str, seed: int = 1
) -> tuple[PreparedRequest, ...]:
    """Cross-town rideshare quotes costing ~20-40 ms of CPU each."""
    return _json_posts(config, "offers.rideshare", host, list(_rideshare_quotes(seed)))


def batch_requests(config: RouteConfig, host: str, seed: int = 1) -> tuple[PreparedRequest, ...]:
    """Batches of `BATCH_SIZE` rideshare quotes (~100-150 ms of CPU each)."""
    quotes = _rideshare_quotes(seed)
    batches: list[object] = [
        {"quotes": [quotes[(i + k) % len(quotes)] for k in range(BATCH_SIZE)]}
        for i in range(0, len(quotes), BATCH_SIZE)
    ]
    return _json_posts(config, "quotes.batch", host, batches)


def kind_rates(group_rates_rps: Mapping[str, float]) -> dict[str, float]:
    """Per-kind rates from per-group rates; a group's rate is split evenly over its kinds."""
    rates: dict[str, float] = {}
    for group, rate in group_rates_rps.items():
        kinds = GROUPS[group]
        for kind in kinds:
            rates[kind] = rate / len(kinds)
    return rates


def targets_for(
    config: RouteConfig,
    host: str,
    port: int,
    kinds: tuple[str, ...],
    seed: int = 1,
) -> tuple[Target, ...]:
    hostport = f"{host}:{port}"
    targets = []
    for kind in kinds:
        if kind in OFFER_KINDS:
            requests = offer_requests(config, kind, hostport, seed)
        elif kind in CPU_KINDS:
            requests = rideshare_requests(config, hostport, seed)
        elif kind in BATCH_KINDS:
            requests = batch_requests(config, hostport, seed)
        else:
            raise ValueError(f"unknown request kind {kind!r}")
        targets.append(Target(kind, host, port, requests))
    return tuple(targets)
