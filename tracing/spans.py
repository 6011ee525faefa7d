"""Spans read back from Jaeger's query API or from the local OTLP JSON-lines file, in
one shape: the one reader of the span file, for `pricingctl traces` and the benchmark."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def from_jaeger(
    base_url: str,
    *,
    service: str | None = None,
    limit: int = 200,
    lookback: str = "1h",
    trace_id: str | None = None,
    timeout_s: float = 10.0,
) -> list[Span]:
    if trace_id is not None:
        url = f"{base_url.rstrip('/')}/api/traces/{urllib.parse.quote(trace_id)}"
    else:
        # By default the name the pools' spans carry here (OTEL_SERVICE_NAME, ...).
        service = service or service_name()
        query = urllib.parse.urlencode({"service": service, "limit": limit, "lookback": lookback})
        url = f"{base_url.rstrip('/')}/api/traces?{query}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            payload = json.load(resp)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and trace_id is not None:
            raise SpanSourceError(f"trace {trace_id} not found in Jaeger at {base_url}") from None
        raise SpanSourceError(f"Jaeger at {base_url} answered HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SpanSourceError(f"cannot reach Jaeger at {base_url}: {reason}") from None
    return list(_jaeger_spans(payload.get("data") or []))


def jaeger_trace_url(base_url: str, trace_id: str, span_id: str | None = None) -> str:
    """A trace's page in Jaeger's web UI; with span_id that span is highlighted (and its
    detail opened)."""
    url = f"{base_url.rstrip('/')}/trace/{urllib.parse.quote(trace_id)}"
    return f"{url}?uiFind={urllib.parse.quote(span_id)}" if span_id else url


def _jaeger_spans(traces: Iterable[dict[str, Any]]) -> Iterator[Span]:
    for trace in traces:
        processes = trace.get("processes") or {}
        for raw in trace.get("spans") or []:
            tags = {t["key"]: _jaeger_value(t) for t in raw.get("tags") or []}
            parent = next(
                (
                    r["spanID"]
                    for r in raw.get("references") or []
                    if r.get("refType") == "CHILD_OF"
                ),
                None,
            )
            service = (processes.get(raw.get("processID")) or {}).get("serviceName", "?")
            yield Span(
                trace_id=raw["traceID"],
                span_id=raw["spanID"],
                parent_id=parent,
                service=service,
                name=raw.get("operationName", ""),
                kind=str(tags.pop("span.kind", "internal")),
                start_us=int(raw.get("startTime", 0)),
                duration_us=int(raw.get("duration", 0)),
                attributes=tags,
            )


def _jaeger_value(tag: dict[str, Any]) -> Any:
    value = tag.get("value")
    # Jaeger stores OTLP array attributes as a JSON string.
    if isinstance(value, str) and value.startswith("["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


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
