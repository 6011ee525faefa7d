"""tracing.route: a request's route, one string object per route."""

from __future__ import annotations

from flask import Flask, request

from tracing.route import NO_ROUTE, route_of


def _app() -> Flask:
    app = Flask("route-test")
    app.add_url_rule("/v1/offers/<mode>", "offers", lambda mode: mode, methods=["GET", "POST"])
    return app


def test_a_route_is_its_method_and_url_template() -> None:
    app = _app()
    with app.test_request_context("/v1/offers/bike?user_id=u-1", method="POST") as ctx:
        ctx.match_request()
        assert route_of(request) == "POST /v1/offers/<mode>"
    with app.test_request_context("/nowhere") as ctx:
        ctx.match_request()
        assert route_of(request) == NO_ROUTE


def test_every_request_of_a_route_gets_the_same_string_object() -> None:
    """The compiled tracer keys a route's CPU by its label's identity first: a new string
    per request would fill its run table and send every switch to the dict."""
    app = _app()
    seen = []
    for path in ("/v1/offers/bike", "/v1/offers/scooter", "/v1/offers/bike"):
        with app.test_request_context(path) as ctx:
            ctx.match_request()
            seen.append(route_of(request))
    assert seen[0] == "GET /v1/offers/<mode>"
    assert seen[0] is seen[1] is seen[2]
