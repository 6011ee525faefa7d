"""How tracing is switched and where spans go: environment variables, read once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

TRACING_ENV = "PRICING_TRACING"
OTLP_ENDPOINT_ENV = "PRICING_OTLP_ENDPOINT"
SPAN_FILE_ENV = "PRICING_SPAN_FILE"
DEFAULT_SPAN_FILE = Path(__file__).resolve().parent.parent / ".run" / "spans.jsonl"


class Mode(StrEnum):
    OFF = "off"  # no spans at all
    SPANS = "spans"  # spans, without the gevent timing instrumentation
    FULL = "full"  # spans with network / scheduling-delay split and culprits


@dataclass(frozen=True)
class TracingSettings:
    mode: Mode
    otlp_endpoint: str | None  # http://host:port of an OTLP/HTTP receiver (Jaeger :4318)
    span_file: Path  # used when there is no OTLP endpoint

    @classmethod
    def from_env(cls) -> TracingSettings:
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
        endpoint = os.environ.get(OTLP_ENDPOINT_ENV) or None
        span_file = Path(os.environ.get(SPAN_FILE_ENV) or DEFAULT_SPAN_FILE)
        return cls(mode=mode, otlp_endpoint=endpoint, span_file=span_file)
