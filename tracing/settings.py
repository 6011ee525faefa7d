"""How tracing is switched and where spans go: environment variables, read once.

The standard OpenTelemetry variables are honoured where one exists; the SDK reads
most of them itself (``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` in
``Resource.create``, the exporter's headers, timeout, compression and certificates
in ``OTLPSpanExporter``, ``OTEL_TRACES_SAMPLER``/``_ARG`` in ``TracerProvider``).
Read here: which exporter (``OTEL_TRACES_EXPORTER``: otlp, console, none; the span
file when neither it nor an endpoint is set), over which protocol
(``OTEL_EXPORTER_OTLP_PROTOCOL``: grpc, http/protobuf), the span processor's limits
(``OTEL_BSP_*``), and what must be refused before the SDK would silently fall back
(an unknown sampler, a sampler that ignores Envoy's decision, an exporter or protocol
that is not installed). ``PRICING_*`` only where no standard name exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from toolkit.contract import OTLP_ENDPOINT_ENV, SPAN_FILE_ENV, TRACING_ENV, WAIT_SPANS_ENV

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


#: A traced call's (or request's inbound) scheduling delay from which its wait is drawn
#: as child spans (``PRICING_TRACE_WAIT_SPANS_MS``, ms): long enough that a call merely
#: sharing the loop gets none, short enough that any wait a person would look for does.
DEFAULT_WAIT_SPANS_MS: Final = 10

DEFAULT_SPAN_FILE = Path(__file__).resolve().parent.parent / ".run" / "spans.jsonl"

# The standard names (OpenTelemetry's SDK environment specification).
SDK_DISABLED_ENV: Final = "OTEL_SDK_DISABLED"
OTLP_TRACES_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"  # used as is
SAMPLER_ENV: Final = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_ENV: Final = "OTEL_TRACES_SAMPLER_ARG"
TRACES_EXPORTER_ENV: Final = "OTEL_TRACES_EXPORTER"
OTLP_PROTOCOL_ENV: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTLP_TRACES_PROTOCOL_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"  # wins over the above
BSP_SCHEDULE_DELAY_ENV: Final = "OTEL_BSP_SCHEDULE_DELAY"  # ms
BSP_EXPORT_TIMEOUT_ENV: Final = "OTEL_BSP_EXPORT_TIMEOUT"  # ms
BSP_MAX_QUEUE_SIZE_ENV: Final = "OTEL_BSP_MAX_QUEUE_SIZE"  # spans
BSP_MAX_EXPORT_BATCH_SIZE_ENV: Final = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"  # spans
TRACES_PATH: Final = "/v1/traces"
# The contrib Flask/WSGI instrumentation's (opentelemetry-util-http, _semconv): honoured
# by the pools' server span (``ServerSpanSettings``).
FLASK_EXCLUDED_URLS_ENV: Final = "OTEL_PYTHON_FLASK_EXCLUDED_URLS"  # wins over the next
EXCLUDED_URLS_ENV: Final = "OTEL_PYTHON_EXCLUDED_URLS"
CAPTURE_REQUEST_HEADERS_ENV: Final = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST"
CAPTURE_RESPONSE_HEADERS_ENV: Final = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_RESPONSE"
SANITIZE_HEADERS_ENV: Final = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS"
SEMCONV_OPT_IN_ENV: Final = "OTEL_SEMCONV_STABILITY_OPT_IN"

#: Samplers that keep Envoy's decision (``traceparent``'s sampled flag) and decide only
#: for requests that arrive without one. The others would cut traces in half: Envoy's
#: span kept and the pool's dropped, or the reverse.
PARENT_BASED_SAMPLERS: Final = (
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
_OTHER_SAMPLERS: Final = ("always_on", "always_off", "traceidratio")


class Exporter(StrEnum):
    """Where spans go: ``OTEL_TRACES_EXPORTER``'s values, and the span file."""

    OTLP = "otlp"
    CONSOLE = "console"  # the SDK's console exporter, one JSON object per span and line
    NONE = "none"  # spans are made (the timing and metrics still run), never exported
    FILE = "file"  # PRICING_SPAN_FILE: neither OTEL_TRACES_EXPORTER nor an endpoint set


class Protocol(StrEnum):
    """``OTEL_EXPORTER_OTLP_PROTOCOL``'s values the installed exporters speak."""

    GRPC = "grpc"
    HTTP_PROTOBUF = "http/protobuf"


@dataclass(frozen=True)
class BatchSettings:
    """The span processor's limits (``OTEL_BSP_*``). Defaults: the queue and delay are
    the project's (a span reaches Jaeger within half a second, and a 4096-span queue
    holds two seconds of a busy io worker's sampled spans), batch size and timeout the
    specification's."""

    schedule_delay_s: float = 0.5
    max_queue_size: int = 4096
    max_export_batch_size: int = 512
    #: The longest a flush or a shutdown waits for the exporter thread.
    export_timeout_s: float = 30.0

    @classmethod
    def from_env(cls) -> BatchSettings:
        """ValueError, naming the variable, on a value that is not a positive integer,
        or a batch larger than the queue."""
        default = cls()
        out = cls(
            schedule_delay_s=_positive_int(BSP_SCHEDULE_DELAY_ENV, default.schedule_delay_s * 1000)
            / 1000,
            max_queue_size=_positive_int(BSP_MAX_QUEUE_SIZE_ENV, default.max_queue_size),
            max_export_batch_size=_positive_int(
                BSP_MAX_EXPORT_BATCH_SIZE_ENV, default.max_export_batch_size
            ),
            export_timeout_s=_positive_int(BSP_EXPORT_TIMEOUT_ENV, default.export_timeout_s * 1000)
            / 1000,
        )
        if out.max_export_batch_size > out.max_queue_size:
            raise ValueError(
                f"{BSP_MAX_EXPORT_BATCH_SIZE_ENV}={out.max_export_batch_size} is larger than "
                f"{BSP_MAX_QUEUE_SIZE_ENV}={out.max_queue_size}"
            )
        return out


def _positive_int(name: str, default: float) -> int:
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return int(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: a positive whole number")
    return value


class Semconv(StrEnum):
    """Which HTTP attribute names a server span carries (``OTEL_SEMCONV_STABILITY_OPT_IN``)."""

    #: Unset: the stable names the project always used (the contrib's default is the
    #: old names alone; the project's readers and dashboards read the stable ones).
    PROJECT = "project"
    HTTP = "http"  # the stable names, as the contrib emits them (client.* included)
    HTTP_DUP = "http/dup"  # those and the old ones (http.method, http.target, ...)


@dataclass(frozen=True)
class ServerSpanSettings:
    """The contrib Flask/WSGI instrumentation's settings, read once as the worker starts:
    excluded URLs (regexes searched in the request's full URL), the request and
    response headers captured on the server span (regexes matched against the whole
    name, any case), those whose values are redacted (searched, any case), and the
    attribute names. None: not set."""

    excluded_urls: re.Pattern[str] | None = None
    request_headers: re.Pattern[str] | None = None
    response_headers: re.Pattern[str] | None = None
    sanitize: re.Pattern[str] | None = None
    semconv: Semconv = Semconv.PROJECT

    @classmethod
    def from_env(cls) -> ServerSpanSettings:
        """As the contrib reads them (``opentelemetry.util.http``); ValueError, naming
        the variable, on a pattern that does not compile."""
        flask = os.environ.get(FLASK_EXCLUDED_URLS_ENV)
        excluded = (
            (FLASK_EXCLUDED_URLS_ENV, flask)
            if flask is not None
            else (EXCLUDED_URLS_ENV, os.environ.get(EXCLUDED_URLS_ENV))
        )
        return cls(
            excluded_urls=_patterns(*excluded),
            request_headers=_patterns(
                CAPTURE_REQUEST_HEADERS_ENV, os.environ.get(CAPTURE_REQUEST_HEADERS_ENV), re.I
            ),
            response_headers=_patterns(
                CAPTURE_RESPONSE_HEADERS_ENV, os.environ.get(CAPTURE_RESPONSE_HEADERS_ENV), re.I
            ),
            sanitize=_patterns(SANITIZE_HEADERS_ENV, os.environ.get(SANITIZE_HEADERS_ENV), re.I),
            semconv=_semconv(os.environ.get(SEMCONV_OPT_IN_ENV)),
        )


def _patterns(name: str, raw: str | None, flags: int = 0) -> re.Pattern[str] | None:
    """A comma-separated list of regexes as one alternation, as the contrib joins them."""
    if not raw:
        return None
    try:
        return re.compile("|".join(item.strip() for item in raw.split(",")), flags)
    except re.error as exc:
        raise ValueError(f"{name}={raw!r}: not a list of regular expressions ({exc})") from None


def _semconv(raw: str | None) -> Semconv:
    """http/dup wins over http, as in the contrib; other values (database, ...) are not
    about HTTP."""
    values = [item.strip() for item in (raw or "").split(",")]
    if Semconv.HTTP_DUP.value in values:
        return Semconv.HTTP_DUP
    return Semconv.HTTP if Semconv.HTTP.value in values else Semconv.PROJECT


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
    #: OTEL_TRACES_EXPORTER when set; None: OTLP when an endpoint is set, else the file.
    exporter: Exporter | None = None
    protocol: Protocol = Protocol.HTTP_PROTOBUF
    batch: BatchSettings = field(default_factory=BatchSettings)
    #: The contrib instrumentation's settings the server span honours.
    server: ServerSpanSettings = field(default_factory=ServerSpanSettings)
    #: Seconds of scheduling delay from which the wait gets child spans; None: never.
    wait_spans_s: float | None = DEFAULT_WAIT_SPANS_MS / 1000

    @property
    def traces_exporter(self) -> Exporter:
        if self.exporter is not None:
            return self.exporter
        return Exporter.OTLP if self.otlp_endpoint else Exporter.FILE

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
        protocol = _protocol()
        return cls(
            mode=mode,
            otlp_endpoint=otlp_endpoint(protocol),
            span_file=span_file,
            sampler=_sampler(),
            exporter=_exporter(),
            protocol=protocol,
            batch=BatchSettings.from_env(),
            server=ServerSpanSettings.from_env(),
            wait_spans_s=_wait_spans_s(),
        )


def otlp_endpoint(protocol: Protocol = Protocol.HTTP_PROTOBUF) -> str | None:
    """The traces endpoint the OTLP exporter sends to, resolved as the SDK does: the
    signal-specific variable as is, else the base one (plus ``/v1/traces`` over HTTP;
    gRPC takes it as is). Empty values count as unset (the benchmark blanks both to
    keep spans in the file). None: the exporter's own default (localhost)."""
    traces = (os.environ.get(OTLP_TRACES_ENDPOINT_ENV) or "").strip()
    if traces:
        return traces
    base = (os.environ.get(OTLP_ENDPOINT_ENV) or "").strip()
    if not base:
        return None
    return base if protocol is Protocol.GRPC else base.rstrip("/") + TRACES_PATH


def _wait_spans_s() -> float | None:
    raw = (os.environ.get(WAIT_SPANS_ENV) or "").strip().lower()
    if not raw:
        return DEFAULT_WAIT_SPANS_MS / 1000
    if raw == "off":
        return None
    try:
        ms = float(raw)
    except ValueError:
        ms = -1.0
    if not 0 <= ms < float("inf"):
        raise ValueError(f"{WAIT_SPANS_ENV}={raw!r}: milliseconds (0 or more), or off")
    return ms / 1000


def _exporter() -> Exporter | None:
    raw = (os.environ.get(TRACES_EXPORTER_ENV) or "").strip().lower()
    if not raw:
        return None
    choices = (Exporter.OTLP, Exporter.CONSOLE, Exporter.NONE)
    if raw not in choices:
        raise ValueError(f"{TRACES_EXPORTER_ENV}={raw!r}: use one of {', '.join(choices)}")
    return Exporter(raw)


def _protocol() -> Protocol:
    for name in (OTLP_TRACES_PROTOCOL_ENV, OTLP_PROTOCOL_ENV):
        raw = (os.environ.get(name) or "").strip().lower()
        if raw:
            try:
                return Protocol(raw)
            except ValueError:
                raise ValueError(
                    f"{name}={raw!r}: use one of {', '.join(Protocol)} "
                    "(the Python SDK has no http/json exporter)"
                ) from None
    return Protocol.HTTP_PROTOBUF


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
