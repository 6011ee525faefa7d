"""pricingservice's domain and HTTP layer, in three rooms, bottom first: `domain`
(fares, surge, road graphs, regions; no Flask), `upstream` (the client of the upstream
services), `web` (the Flask views, validation, OpenAPI, problems, URL rules).

`create_app(pool)` builds the Flask app one pool serves: only wiring here; each module
brings its own `init_app`. Domain errors live in `domain.errors`, their HTTP mapping in
`web.problems`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import FunctionType
from typing import TYPE_CHECKING, Any

from flask import Flask, Response

from routing.load import load_routes
from routing.model import Layout, RouteConfig, layout_of
from toolkit.contract import (
    POOL_ENV,
    POOL_HEADER,
    UPSTREAM_CA_FILE_ENV,
    UPSTREAM_URL_ENV,
)

if TYPE_CHECKING:
    from pricing.upstream.gateway import ClientFactory
    from pricing.web.views import ViewFactory


class PricingApp(Flask):
    """Flask, with ``ensure_sync``'s answer remembered per plain function. Flask asks it
    for every hook and the view on every request (``inspect.iscoroutinefunction``: ~0.7
    us each, five to eight times a request here), and for a function the answer never
    changes. Anything else (a bound method, a partial) is asked every time, as Flask
    does: those may be made afresh per call and must not pile up here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sync: dict[FunctionType, Any] = {}

    def ensure_sync(self, func: Any) -> Any:
        if type(func) is not FunctionType:
            return super().ensure_sync(func)
        sync = self._sync.get(func)
        if sync is None:
            sync = self._sync[func] = super().ensure_sync(func)
        return sync


def create_app(
    pool: str | None = None,
    *,
    config: RouteConfig | None = None,
    gateway: object | None = None,
    extra_endpoints: Mapping[str, ViewFactory] | None = None,
    upstream_client: ClientFactory | None = None,
) -> Flask:
    """The app for `pool` (default: $PRICING_POOL, else "shared").

    `config` defaults to the route config file; `gateway` (the upstream
    client) defaults to the real one, pointed at the config's upstreams or
    $PRICING_UPSTREAM_URL, its clients made by `upstream_client` (default: the
    project's own). `extra_endpoints` (endpoint name -> view factory) are served beside
    the service's own where the route config places them: the benchmark's synthetic
    service comes in this way, through its own app entry (`bench.pool_app`).
    """
    from pricing.upstream.gateway import HttpGateway
    from pricing.upstream.httpclient import HostClient
    from pricing.web import openapi, problems, urls
    from tracing import logs, metrics
    from tracing import server as tracing
    from tracing.flask_tracing import FlaskTracing

    pool = pool or os.environ.get(POOL_ENV) or "shared"
    config = config or load_routes()
    layout = layout_of(pool)
    config.pool(pool, layout)  # fails early, naming the pool, if it is unknown

    app = PricingApp(__name__, static_folder=None)  # the pools serve no files
    app.config[POOL_ENV] = pool
    app.config["MAX_CONTENT_LENGTH"] = config.listener.max_request_bytes
    app.extensions["pricing.routes"] = config
    # Spans for this app, when the worker set tracing up (gunicorn post_fork); the
    # pool's metrics whatever the tracing mode.
    meta = config.meta
    untraced = (meta.healthz, meta.readyz, meta.metrics)
    observer = FlaskTracing(tracing.current(), untraced).instrument(app)
    pool_metrics = metrics.init_app(app, metrics_path=meta.metrics, config=config)
    logs.init_app(app)  # after tracing's: the request's span is current
    app.extensions["pricing.gateway"] = gateway or HttpGateway(
        os.environ.get(UPSTREAM_URL_ENV) or config.upstream_base_url,
        observer=observer,
        metrics=pool_metrics,
        client=upstream_client or HostClient,
        ca_file=os.environ.get(UPSTREAM_CA_FILE_ENV) or None,
    )
    problems.init_app(app)
    urls.register_routes(app, config, pool, layout, pool_metrics, extra_endpoints)
    openapi.init_app(app, extra=tuple(extra_endpoints or ()))
    _warm_up(config, pool, layout)

    @app.after_request
    def tag_pool(response: Response) -> Response:
        response.headers[POOL_HEADER] = pool
        return response

    app.extensions["pricing.ready"] = True  # the last step: /readyz says so from now on
    return app


def _warm_up(config: RouteConfig, pool: str, layout: Layout) -> None:
    """Build the road graphs before the first request, in pools that quote rides."""
    if any(
        r.endpoint in {"offers.rideshare", "quotes.batch"} for r in config.routes_of(pool, layout)
    ):
        from pricing.domain.regions import REGIONS
        from pricing.domain.roadgraph import graph_for

        for region in REGIONS.values():
            graph_for(region)
