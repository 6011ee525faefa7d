"""A Flask request's route as every label and span names it (`routing.model.route_label`:
``"GET /v1/offers/bike"``), made once per route."""

from __future__ import annotations

from typing import Any, Final

from routing.model import route_label

#: A request that matched no URL rule (404, or a method the rule does not take).
NO_ROUTE: Final = "<no route>"

# (method, rule) -> route. Bounded by the app's URL map: a request matches a rule only
# with one of the methods the rule takes (else its url_rule is None).
_routes: dict[tuple[str, str], str] = {}


def route_of(request: Any) -> str:
    """The route of a Flask request: one string object per route, for the process's life.

    The timing core keys a route's CPU by its label's identity first (``_native``'s run
    table), so the same route must not come as a new string with every request.
    """
    rule = request.url_rule
    if rule is None:
        return NO_ROUTE
    key = (request.method, rule.rule)
    route = _routes.get(key)
    if route is None:
        route = _routes[key] = route_label(*key)
    return route
