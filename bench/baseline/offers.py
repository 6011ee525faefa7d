"""What the stock apps share with the service: the offer's query, its upstream calls
and the offer built from their answers (``pricing.web``'s domain functions), so an arm
differs from the project's io pool only in framework, HTTP client and tracing."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pricing.domain.errors import PricingError, UpstreamFailure
from pricing.upstream.gateway import Answer
from pricing.web.offers import Mode, build_offer, offer_calls
from pricing.web.validation import OfferQuery, parse_offer_query
from toolkit.contract import UPSTREAM_URL_ENV
from tracing.settings import SDK_DISABLED_ENV

#: The offer's budget, as the io pool's route timeout (seconds).
BUDGET_S = 0.5
MODES: tuple[Mode, ...] = ("bike", "scooter")


def upstream_url() -> str:
    return os.environ[UPSTREAM_URL_ENV].rstrip("/")


def tracing_on() -> bool:
    """False when ``OTEL_SDK_DISABLED=true``: the app runs without OpenTelemetry."""
    return (os.environ.get(SDK_DISABLED_ENV) or "").strip().lower() != "true"


def calls(
    mode: Mode, args: Mapping[str, Sequence[str]]
) -> tuple[OfferQuery, list[tuple[str, str]]]:
    """The parsed query and (upstream, path) per call; PricingError on a bad query."""
    query = parse_offer_query(args)
    return query, [(c.upstream, c.path) for c in offer_calls(mode, query)]


def failed(upstream: str, exc: BaseException | None) -> UpstreamFailure:
    reason = "timeout" if exc is None or "imeout" in type(exc).__name__ else "error"
    return UpstreamFailure(upstream, reason, str(exc or "timed out"))


def offer(mode: Mode, query: OfferQuery, answers: Mapping[str, Answer]) -> tuple[int, Any]:
    """(status, JSON body) of the offer."""
    try:
        return 200, build_offer(mode, query, answers)
    except PricingError as exc:
        return exc.status, {"title": str(exc)}
