"""A request's route as every label and span names it: ``"GET /v1/offers/bike"``, the
method and the URL rule's template (never the raw URL: low cardinality)."""

from __future__ import annotations

from typing import Any, Final

#: A request that matched no URL rule (404, or a method the rule does not take).
NO_ROUTE: Final = "<no route>"


def route_of(request: Any) -> str:
    """The route of a Flask request."""
    rule = request.url_rule
    return f"{request.method} {rule.rule}" if rule is not None else NO_ROUTE
