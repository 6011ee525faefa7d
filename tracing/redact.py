"""Query values out of exported spans, as OpenTelemetry's HTTP conventions advise: a
span's URL keeps its path and its query's keys; each value becomes ``REDACTED`` unless
its key is allow-listed. The offers' queries carry a user id and trip coordinates.

A span processor covers every span started with its URL (the client spans' ``url.full``);
the pools' server spans (``tracing.server_span``) carry the path alone. Cost per span: a
lookup of four attribute keys, and for those present one pass over the query (a split of
it when an allowed key may be one of its keys).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from toolkit.contract import QUERY_ALLOW_ENV

DEFAULT_ALLOW = frozenset({"region"})
REDACTED = "REDACTED"
# Attributes holding a URL or a target with its query (stable and older conventions).
URL_ATTRIBUTES = ("url.full", "http.url", "http.target")
QUERY_ATTRIBUTES = ("url.query",)


def allow_from_env() -> frozenset[str]:
    raw = os.environ.get(QUERY_ALLOW_ENV)
    if raw is None:
        return DEFAULT_ALLOW
    return frozenset(key.strip() for key in raw.split(",") if key.strip())


def redact_query(query: str, allow: Iterable[str] = DEFAULT_ALLOW) -> str:
    """``user_id=u-1&region=sf`` -> ``user_id=REDACTED&region=sf``."""
    allowed = allow if isinstance(allow, frozenset) else frozenset(allow)
    if not any(marker in query for marker in _key_markers(allowed)):
        # No allowed key is one of its keys: every value goes, in one pass in C.
        return _EVERY_VALUE.sub(_REDACTED_VALUE, query)
    parts = []
    for item in query.split("&"):
        key, sep, _ = item.partition("=")
        parts.append(item if key in allowed or not sep else f"{key}={REDACTED}")
    return "&".join(parts)


# A value: from an item's first "=" to its end.
_EVERY_VALUE = re.compile("=[^&]*")
_REDACTED_VALUE = f"={REDACTED}"


@functools.lru_cache(maxsize=16)
def _key_markers(allowed: frozenset[str]) -> tuple[str, ...]:
    """What a query holding one of *allowed* as a key contains (and maybe others do)."""
    return tuple(f"{key}=" for key in allowed)


def redact_url(url: str, allow: Iterable[str] = DEFAULT_ALLOW) -> str:
    """A URL or request target with each query value not allowed replaced."""
    base, sep, rest = url.partition("?")
    if not sep:
        return url
    query, hash_sep, fragment = rest.partition("#")
    return f"{base}?{redact_query(query, allow)}{hash_sep}{fragment}"


class QueryRedactor(SpanProcessor):
    """Rewrites the URL attributes a span starts with; add it before the exporting
    processor. Never raises (tracing never breaks a request)."""

    def __init__(self, allow: Iterable[str] | None = None) -> None:
        self.allow = frozenset(allow) if allow is not None else allow_from_env()

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self.redact(span)

    def redact(self, span: Any) -> None:
        """Rewrite the URL attributes `span` has now (it must still be recording)."""
        try:
            for key, value in self.changes(span.attributes or {}).items():
                span.set_attribute(key, value)  # only what changed: setting one validates it
        except Exception:  # pragma: no cover - defensive: a span keeps its attributes
            return

    def url(self, value: str) -> str:
        """*value*, a URL or request target, redacted."""
        return redact_url(value, self.allow) if "?" in value else value

    def changes(self, attributes: Mapping[str, Any]) -> dict[str, str]:
        """The URL and query attributes of *attributes* whose redaction differs, redacted
        (a span built from a plain dict takes them with ``update``)."""
        out: dict[str, str] = {}
        for key in URL_ATTRIBUTES:
            value = attributes.get(key)
            if isinstance(value, str):
                redacted = self.url(value)
                if redacted != value:
                    out[key] = redacted
        for key in QUERY_ATTRIBUTES:
            value = attributes.get(key)
            if isinstance(value, str) and value:
                redacted = redact_query(value, self.allow)
                if redacted != value:
                    out[key] = redacted
        return out

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@functools.cache
def _default() -> QueryRedactor:
    return QueryRedactor()
