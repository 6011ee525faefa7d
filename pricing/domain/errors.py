"""Domain errors. Each maps to one HTTP problem response in `pricing.web.problems`."""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.contract import SHED_HEADER


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


class PricingError(Exception):
    """Base class: every error the domain raises on purpose."""

    status = 500
    slug = "internal"
    title = "Internal error"

    #: What only our logs get (the upstream, the exception): a client reads `detail`.
    internal_detail: str | None = None

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(PricingError):
    """The request is well-formed HTTP but its fields are wrong."""

    status = 422
    slug = "invalid-request"
    title = "Invalid request"

    def __init__(self, errors: list[FieldError]) -> None:
        names = ", ".join(dict.fromkeys(e.field for e in errors))
        super().__init__(f"invalid field(s): {names}")
        self.errors = errors


class MalformedBody(PricingError):
    status = 400
    slug = "malformed-body"
    title = "Malformed request body"


class UnsupportedMediaType(PricingError):
    status = 415
    slug = "unsupported-media-type"
    title = "Unsupported media type"


class OutsideServiceArea(InvalidRequest):
    """A point lies outside every service area, or the two ends of a trip are not in
    the same region (the one named, when the request names one)."""

    slug = "outside-service-area"
    title = "Outside the service area"


class NoVehicleNearby(PricingError):
    status = 404
    slug = "no-vehicle-nearby"
    title = "No vehicle nearby"


class NoRoute(PricingError):
    """No drivable path joins the two points, or one lies outside the region's roads."""

    status = 422
    slug = "no-route"
    title = "No route between origin and destination"


class Misdirected(PricingError):
    """The endpoint exists, but in another pool (the request bypassed Envoy's routing)."""

    status = 421
    slug = "misdirected-request"
    title = "Misdirected request"


class NotReady(PricingError):
    """The pool answers but is not ready to serve (/readyz): Envoy keeps it out."""

    status = 503
    slug = "not-ready"
    title = "Not ready"


class Overloaded(PricingError):
    """The request reached its handler with too little of its deadline left to be worth
    starting (it waited in Envoy's queue or the pool's): shed, not worked on."""

    status = 503
    slug = "overloaded"
    title = "Service overloaded"
    #: Tells Envoy the request was not worked on: it may be retried on another replica.
    headers = {SHED_HEADER: "budget"}


@dataclass(frozen=True)
class UpstreamFailure:
    """Why one upstream call produced no usable answer."""

    upstream: str
    reason: str  # "timeout" | "saturated" | "error" | "bad-response"
    detail: str
    elapsed_ms: float = field(default=0.0, compare=False)
    #: Finer, for metrics (tracing.metrics.FAILURE_REASONS): refused, reset, 5xx, ...
    cause: str = field(default="error", compare=False)


class UpstreamUnavailable(PricingError):
    """A required upstream failed (503) or ran out of budget (504)."""

    slug = "upstream-unavailable"
    title = "A required upstream service is unavailable"

    def __init__(self, failure: UpstreamFailure) -> None:
        # The client gets a stable type and this fixed detail; which upstream and what
        # it did (a reset, an errno) go to the log line with the same trace_id.
        super().__init__("a service this answer needs failed; retry after Retry-After")
        self.internal_detail = f"upstream {failure.upstream!r}: {failure.detail}"
        self.failure = failure
        self.status = 504 if failure.reason == "timeout" else 503
        if failure.reason == "timeout":
            self.slug = "upstream-timeout"
            self.title = "A required upstream service did not answer in time"
            self.detail = "a service this answer needs did not answer in time"
