"""Check that the route config and the app's endpoints agree."""

from __future__ import annotations

from collections import Counter

from routing.model import RouteConfig


def check_endpoints(
    config: RouteConfig, app_endpoints: set[str], every_pool_endpoints: set[str]
) -> list[str]:
    """Problems, one line each, naming the endpoint. Empty when all is well.

    `app_endpoints` are the endpoints the app implements and that must be
    placed in exactly one pool; `every_pool_endpoints` (health, readiness,
    the API description) are served by every pool and may be routed anywhere.
    """
    problems: list[str] = []
    counts = Counter(r.endpoint for r in config.routes)
    for endpoint in sorted(app_endpoints):
        if counts[endpoint] == 0:
            problems.append(f"endpoint {endpoint!r} has no pool: add a [[routes]] entry for it")
    for endpoint, count in sorted(counts.items()):
        if count > 1:
            pools = sorted(r.pool for r in config.routes if r.endpoint == endpoint)
            problems.append(
                f"endpoint {endpoint!r} is in {count} routes (pools: {', '.join(pools)})"
            )
    for route in config.routes:
        if route.endpoint not in app_endpoints | every_pool_endpoints:
            problems.append(
                f"route {route.endpoint!r} ({route.path}) names an endpoint the app does not have"
            )
    return problems
