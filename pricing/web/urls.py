"""Where a pool is chosen: register the URL rules one pool serves, from the route config.

A pool registers only its own routes. The other pools' paths answer 421
Misdirected Request, so a request that bypassed Envoy (or a stale client
config) gets a clear answer instead of being served by the wrong pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flask import Flask, Response

from pricing.domain.errors import Misdirected
from pricing.web.admission import admitted
from pricing.web.views import ENDPOINTS, META_VIEWS, ViewFactory
from routing.errors import RouteConfigError
from routing.model import Layout, Route, RouteConfig
from tracing.metrics import PoolMetrics


def register_routes(
    app: Flask,
    config: RouteConfig,
    pool: str,
    layout: Layout,
    metrics: PoolMetrics,
    extra: Mapping[str, ViewFactory] | None = None,
) -> None:
    """The service's endpoints (``ENDPOINTS``) and *extra* ones the app was given
    (``create_app(extra_endpoints=...)``: the benchmark's synthetic service), each
    behind admission, which counts what it sheds in *metrics*."""
    meta_paths = config.meta.endpoints()
    factories = {**ENDPOINTS, **(extra or {})}
    for endpoint, view in META_VIEWS.items():
        app.add_url_rule(meta_paths[endpoint], endpoint=endpoint, view_func=view, methods=["GET"])
    for route in config.app_routes():
        if config.pool_of(route, layout) == pool:
            factory = factories.get(route.endpoint)
            if factory is None:
                raise RouteConfigError(
                    f"route {route.endpoint!r}: the app has no such endpoint "
                    f"(known: {', '.join(sorted(factories))})"
                )
            app.add_url_rule(
                route.path,
                endpoint=route.endpoint,
                view_func=admitted(route, factory(route), metrics),
                methods=list(route.methods),
            )
        else:
            app.add_url_rule(
                route.path,
                endpoint=f"misdirected.{route.endpoint}",
                view_func=_misdirected(route, config.pool_of(route, layout)),
                methods=list(route.methods),
            )


def _misdirected(route: Route, owner: str) -> Callable[[], Response]:
    def view() -> Response:
        raise Misdirected(
            f"{route.path} is served by the {owner!r} pool, not this one; send it through Envoy"
        )

    return view
