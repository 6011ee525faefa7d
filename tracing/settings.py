"""How tracing is switched and where spans go: environment variables, read once.

The standard OpenTelemetry variables are honoured where one exists; the SDK reads
most of them itself (``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` in
``Resource.create``, the exporter's headers, timeout, compression and certificates
in ``OTLPSpanExporter``, ``OTEL_TRACES_SAMPLER``/``_ARG`` in ``TracerProvider``).
Read here: what decides between the OTLP exporter and the span file, and what must
be refused before the SDK would silently fall back (an unknown sampler, a sampler
that ignores Envoy's decision). ``PRICING_*`` only where no standard name exists.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

#: service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES says otherwise.
DEFAULT_SERVICE_NAME: Final = "pricingservice"


def resource_from_env(defaults: Mapping[str, Any]) -> Resource:
    """A resource of *defaults* overridden by the standard variables (OTEL_SERVICE_NAME,
    then OTEL_RESOURCE_ATTRIBUTES), which the SDK's own detector reads. The pools' spans
    and whoever reads them back (``pricingctl traces``) resolve names alike."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    # Resource.create lets the attributes given win over the environment; the
    # environment must win over the defaults, so it is merged once more on top.
    return Resource.create(dict(defaults)).merge(OTELResourceDetector().detect())


def service_name() -> str:
    """The ``service.name`` the pools' spans carry in this environment."""
    from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME

    resource = resource_from_env({SERVICE_NAME: DEFAULT_SERVICE_NAME})
    return str(resource.attributes[SERVICE_NAME])


TRACING_ENV: Final = "PRICING_TRACING"
SPAN_FILE_ENV: Final = "PRICING_SPAN_FILE"
DEFAULT_SPAN_FILE = Path(__file__).resolve().parent.parent / ".run" / "spans.jsonl"

# The standard names (OpenTelemetry's SDK environment specification).
SDK_DISABLED_ENV: Final = "OTEL_SDK_DISABLED"
OTLP_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"  # base URL; /v1/traces is added
OTLP_TRACES_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"  # used as is
SAMPLER_ENV: Final = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_ENV: Final = "OTEL_TRACES_SAMPLER_ARG"
TRACES_PATH: Final = "/v1/traces"

#: Samplers that keep Envoy's decision (``traceparent``'s sampled flag) and decide only
#: for requests that arrive without one. The others would cut traces in half: Envoy's
#: span kept and the pool's dropped, or the reverse.
PARENT_BASED_SAMPLERS: Final = (
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
_OTHER_SAMPLERS: Final = ("always_on", "always_off", "traceidratio")


class Mode(StrEnum):
    OFF = "off"  # no spans at all
    SPANS = "spans"  # spans, without the gevent timing instrumentation
    FULL = "full"  # spans with network / scheduling-delay split and culprits


@dataclass(frozen=True)
class TracingSettings:
    mode: Mode
    #: Full URL of an OTLP/HTTP traces receiver (Jaeger :4318/v1/traces); None: span file.
    otlp_endpoint: str | None
    span_file: Path  # used when there is no OTLP endpoint
    #: OTEL_TRACES_SAMPLER when set (validated; the SDK builds it, with its _ARG);
    #: None: the route config's [tracing].sample_percent for requests without a decision.
    sampler: str | None = None

    @classmethod
    def from_env(cls) -> TracingSettings:
        """The settings; ValueError, naming the variable, on a value that cannot work."""
        raw = (os.environ.get(TRACING_ENV) or "full").strip().lower()
        aliases = {
            "0": "off",
            "false": "off",
            "no": "off",
            "1": "full",
            "on": "full",
            "true": "full",
        }
        try:
            mode = Mode(aliases.get(raw, raw))
        except ValueError:
            raise ValueError(f"{TRACING_ENV}={raw!r}: use one of off, spans, full") from None
        if (os.environ.get(SDK_DISABLED_ENV) or "").strip().lower() == "true":
            mode = Mode.OFF
        span_file = Path(os.environ.get(SPAN_FILE_ENV) or DEFAULT_SPAN_FILE)
        return cls(
            mode=mode, otlp_endpoint=otlp_endpoint(), span_file=span_file, sampler=_sampler()
        )


def otlp_endpoint() -> str | None:
    """The traces URL the OTLP exporter sends to, resolved as the SDK does: the
    signal-specific variable as is, else the base one plus ``/v1/traces``. Empty
    values count as unset (the benchmark blanks both to keep spans in the file)."""
    traces = (os.environ.get(OTLP_TRACES_ENDPOINT_ENV) or "").strip()
    if traces:
        return traces
    base = (os.environ.get(OTLP_ENDPOINT_ENV) or "").strip()
    return base.rstrip("/") + TRACES_PATH if base else None


def _sampler() -> str | None:
    raw = (os.environ.get(SAMPLER_ENV) or "").strip().lower()
    if not raw:
        return None
    if raw in _OTHER_SAMPLERS:
        raise ValueError(
            f"{SAMPLER_ENV}={raw!r} ignores the sampling decision Envoy makes for the whole "
            f"trace: use parentbased_{raw}"
        )
    if raw not in PARENT_BASED_SAMPLERS:
        raise ValueError(f"{SAMPLER_ENV}={raw!r}: use one of {', '.join(PARENT_BASED_SAMPLERS)}")
    if raw == "parentbased_traceidratio":
        arg = (os.environ.get(SAMPLER_ARG_ENV) or "").strip()
        try:
            ratio = float(arg)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"{SAMPLER_ARG_ENV}={arg!r}: a ratio from 0 to 1 (0.01 is 1 %)")
    return raw
