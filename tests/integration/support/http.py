"""One request through the stack, and the simulator's control API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from routing.model import Route
from stack.launch import Stack
from tests.samples import OFFER_QUERY, RIDE, RIDE_BODY
from toolkit.fetch import Reply, fetch

UPSTREAMS = ("vehicles", "routing", "promotions")
FAST_MS = 5  # an upstream that answers at once, as far as the tests tell


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Reply:
    """One request; HTTP errors are returned, not raised."""
    return fetch(url, method=method, body=body, headers=headers, timeout_s=timeout_s)


@dataclass(frozen=True)
class Client:
    """Requests to one stack through its Envoy, by path, as Flask's test client sends
    them to an app; HTTP errors are returned, not raised."""

    stack: Stack

    def get(
        self, path: str, headers: dict[str, str] | None = None, timeout_s: float = 10.0
    ) -> Reply:
        return http("GET", f"{self.stack.url}{path}", None, headers, timeout_s)

    def post(
        self,
        path: str,
        body: Any,
        headers: dict[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> Reply:
        """`body`: bytes as they are, anything else as JSON."""
        return http("POST", f"{self.stack.url}{path}", body, headers, timeout_s)


def set_upstream(stack: Stack, name: str, **settings: Any) -> None:
    reply = http("PUT", f"{stack.simulator_url}/_control/upstreams/{name}", settings)
    assert reply.status == 200, reply.body


def reset_upstreams(stack: Stack) -> None:
    assert http("POST", f"{stack.simulator_url}/_control/reset", {}).status == 200


def fixed_latency(stack: Stack, ms: int) -> None:
    """Every upstream answers after exactly `ms`."""
    for name in UPSTREAMS:
        set_upstream(stack, name, latency={"dist": "fixed", "ms": ms})


def call_endpoint(url: str, route: Route) -> tuple[int, str]:
    """(status, the pool that answered) of one valid request to `route`'s endpoint."""
    endpoint = route.endpoint
    if endpoint in ("offers.bike", "offers.scooter"):
        mode = endpoint.split(".")[1]
        reply = http("GET", f"{url}/v1/offers/{mode}?{OFFER_QUERY}")
    elif endpoint == "offers.rideshare":
        reply = http("POST", f"{url}/v1/offers/rideshare", RIDE)
    elif endpoint == "quotes.batch":
        reply = http("POST", f"{url}/v1/quotes/batch", {"quotes": [RIDE, RIDE]})
    else:  # the others take no input: /v1/regions, /openapi.json
        reply = http("GET", f"{url}{route.path}")
    return reply.status, reply.headers.get("x-pricing-pool", "")


def ride(stack: Stack) -> Reply:
    """One rideshare quote through Envoy."""
    return http(
        "POST",
        f"{stack.url}/v1/offers/rideshare",
        RIDE_BODY,
        {"content-type": "application/json"},
        timeout_s=10,
    )
