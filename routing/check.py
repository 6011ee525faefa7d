"""Check that the route config and the app's endpoints agree."""

from __future__ import annotations

from collections import Counter

from routing.model import RouteConfig


def check_endpoints(
    config: RouteConfig, app_endpoints: set[str], meta_endpoints: set[str]
) -> list[str]:
    """Problems, one line each, naming the endpoint. Empty when all is well.

    `app_endpoints` are the endpoints the app implements and that must be placed in
    exactly one pool; `meta_endpoints` are the meta routes it can serve in every pool
    (health, readiness, the API description, metrics): each one [meta] declares must
    be among them. The caller hands both in: routing imports no app.
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
    for route in config.app_routes():
        if route.endpoint not in app_endpoints:
            problems.append(
                f"route {route.endpoint!r} ({route.path}) names an endpoint the app does not have"
            )
    for endpoint, path in sorted(config.meta.endpoints().items()):
        if endpoint not in meta_endpoints:
            problems.append(f"meta route {endpoint!r} ({path}) has no view in the app")
    return problems
