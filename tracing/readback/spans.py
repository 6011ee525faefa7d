"""Spans read back from Jaeger or from the local span file, in one shape, by one OTLP
JSON reader: the file's lines and Jaeger v2's ``/api/v3/traces`` answers are both OTLP
JSON (ExportTraceServiceRequest). For `pricingctl traces`, `routes suggest` and the
benchmark."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.fetch import fetch
from tracing.settings import service_name


class SpanSourceError(RuntimeError):
    """Spans could not be read (Jaeger unreachable, unreadable file). One line."""


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    service: str
    name: str
    kind: str  # "server" | "client" | "internal" | ...
    start_us: int
    duration_us: int
    attributes: dict[str, Any] = field(default_factory=dict)


# --- Jaeger's query API -----------------------------------------------------------

#: Jaeger v2's OTLP query API: its answers are OTLP JSON, read as the span file is.
JAEGER_TRACES_PATH = "/api/v3/traces"
_LOOKBACK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def lookback_s(raw: str) -> float:
    """``"15m"``, ``"1h"``, ``"2d"`` in seconds; ValueError naming the value otherwise."""
    match = _LOOKBACK.match(raw)
    if match is None:
        raise ValueError(f"lookback {raw!r}: a number and s, m, h or d (15m, 1h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def from_jaeger(
    base_url: str,
    *,
    service: str | None = None,
    limit: int = 200,
    lookback: str = "1h",
    trace_id: str | None = None,
    timeout_s: float = 10.0,
) -> list[Span]:
    """The spans of one trace, or of the last *limit* traces of *service* within
    *lookback*, from Jaeger's ``/api/v3/traces`` (OTLP JSON)."""
    base = base_url.rstrip("/")
    if trace_id is not None:
        url = f"{base}{JAEGER_TRACES_PATH}/{urllib.parse.quote(trace_id)}"
    else:
        try:
            since_s = lookback_s(lookback)
        except ValueError as exc:
            raise SpanSourceError(str(exc)) from None
        now = time.time()
        query = urllib.parse.urlencode(
            {
                # By default the name the pools' spans carry here (OTEL_SERVICE_NAME, ...).
                "query.service_name": service or service_name(),
                "query.start_time_min": _rfc3339(now - since_s),
                "query.start_time_max": _rfc3339(now + 60),
                "query.num_traces": limit,
            }
        )
        url = f"{base}{JAEGER_TRACES_PATH}?{query}"
    try:
        reply = fetch(url, timeout_s=timeout_s)
    except OSError as exc:
        reason = getattr(exc, "reason", exc)
        raise SpanSourceError(f"cannot reach Jaeger at {base_url}: {reason}") from None
    if reply.status == 404:
        if trace_id is not None:
            raise SpanSourceError(f"trace {trace_id} not found in Jaeger at {base_url}")
        return []  # Jaeger v2 answers a search that found nothing with 404
    if not reply.ok:
        raise SpanSourceError(f"Jaeger at {base_url} answered HTTP {reply.status}")
    body = reply.text
    try:
        return [
            span
            for document in _json_documents(body)
            for span in _otlp_spans(document.get("result") or {"resourceSpans": []})
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SpanSourceError(f"Jaeger at {base_url} did not answer OTLP JSON") from None


def _rfc3339(unix_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def _json_documents(body: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a body: one, or several one after another (a streamed
    answer, one ``{"result": ...}`` per chunk)."""
    decoder = json.JSONDecoder()
    at = 0
    while True:
        while at < len(body) and body[at].isspace():
            at += 1
        if at >= len(body):
            return
        document, at = decoder.raw_decode(body, at)
        yield document


def jaeger_trace_url(base_url: str, trace_id: str, span_id: str | None = None) -> str:
    """A trace's page in Jaeger's web UI; with span_id that span is highlighted (and its
    detail opened)."""
    url = f"{base_url.rstrip('/')}/trace/{urllib.parse.quote(trace_id)}"
    return f"{url}?uiFind={urllib.parse.quote(span_id)}" if span_id else url


# --- the OTLP JSON-lines file -----------------------------------------------------

_KIND_NUMBERS: dict[int | str, str] = {
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
# OTLP/JSON writes the kind as its number or, from some exporters, its name.
_KIND_NAMES: dict[int | str, str] = {
    **_KIND_NUMBERS,
    **{f"SPAN_KIND_{name.upper()}": name for name in _KIND_NUMBERS.values()},
}


def from_file(path: Path, *, trace_id: str | None = None, strict: bool = True) -> list[Span]:
    """The spans of an OTLP JSON-lines file: one ExportTraceServiceRequest per line (a
    line holding one bare span is accepted too).

    Strict (``pricingctl traces``): a missing file or a line that is not OTLP JSON is a
    :class:`SpanSourceError` naming path and line. Not strict (the benchmark, which reads
    the file of a stack it has just stopped): a missing file has no spans, and a line
    cut short by a stopped writer, or a span without ids or times, is skipped.
    """
    try:
        # Undecodable bytes fail their own line below (path:line), not the whole read.
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        if not strict:
            return []
        raise SpanSourceError(f"no span file at {path} (is the service running?)") from None
    except OSError as exc:
        raise SpanSourceError(f"cannot read {path}: {exc.strerror}") from None
    spans: list[Span] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            spans.extend(_otlp_spans(json.loads(line), strict=strict))
        except (ValueError, KeyError, TypeError, AttributeError):
            if strict:
                raise SpanSourceError(f"{path}:{number}: not an OTLP JSON line") from None
    if trace_id is not None:
        spans = [s for s in spans if s.trace_id == trace_id]
        if not spans:
            raise SpanSourceError(f"trace {trace_id} not found in {path}")
    return spans


def _otlp_value(value: dict[str, Any]) -> Any:
    if "arrayValue" in value:
        return [_otlp_value(v) for v in value["arrayValue"].get("values", [])]
    if "intValue" in value:
        return int(value["intValue"])
    for key in ("doubleValue", "boolValue", "stringValue"):
        if key in value:
            return value[key]
    return None


def _otlp_spans(document: dict[str, Any], *, strict: bool = True) -> Iterator[Span]:
    if "traceId" in document:  # one bare span
        scopes: list[tuple[str, list[Any]]] = [("?", [document])]
    else:
        scopes = []
        for resource_spans in document["resourceSpans"]:
            resource = {
                a["key"]: _otlp_value(a["value"])
                for a in resource_spans.get("resource", {}).get("attributes", [])
            }
            service = str(resource.get("service.name", "?"))
            for scope in resource_spans.get("scopeSpans") or resource_spans.get(
                "instrumentationLibrarySpans", []
            ):
                scopes.append((service, scope.get("spans", [])))
    for service, raws in scopes:
        for raw in raws:
            try:
                yield _otlp_span(raw, service)
            except (ValueError, KeyError, TypeError, AttributeError):
                if strict:
                    raise


def _otlp_span(raw: dict[str, Any], service: str) -> Span:
    start_ns = int(raw["startTimeUnixNano"])
    return Span(
        trace_id=str(raw["traceId"]).lower(),
        span_id=raw["spanId"],
        parent_id=raw.get("parentSpanId") or None,
        service=service,
        name=raw["name"],
        kind=_KIND_NAMES.get(raw.get("kind", 0), "unspecified"),
        start_us=start_ns // 1000,
        duration_us=(int(raw["endTimeUnixNano"]) - start_ns) // 1000,
        attributes={a["key"]: _otlp_value(a["value"]) for a in raw.get("attributes", [])},
    )
