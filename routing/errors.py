"""Errors raised while loading or checking the route config."""

from __future__ import annotations


class RouteConfigError(ValueError):
    """The route config is invalid. The message names the offending route or key."""
