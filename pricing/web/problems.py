"""The one place where errors become HTTP responses (RFC 9457 problem+json).

No request may end in a traceback or an HTML error page: domain errors map
to their status, HTTP errors (404, 405, 413, ...) keep theirs, and anything
unexpected is logged and answered with a plain 500 problem.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from pricing.domain.errors import FieldError, PricingError
from toolkit.contract import LOG_REQUEST_ID, PROBLEM_JSON, REQUEST_ID_HEADER, TRACE_ID_HEADER
from tracing.logs import current_ids

PROBLEM_TYPE_PREFIX = "urn:pricingservice:problem:"
# Seconds a client should wait before retrying a 503.
RETRY_AFTER_S = 1

log = logging.getLogger(__name__)


def problem_response(
    status: int,
    title: str,
    detail: str,
    *,
    slug: str | None = None,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + slug if slug else "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.path if request else None,
    }
    request_id = request.headers.get(REQUEST_ID_HEADER) if request else None
    if request_id:
        body[LOG_REQUEST_ID] = request_id
    if errors:
        body["errors"] = [{"field": e.field, "message": e.message} for e in errors]
    headers = dict(headers or {})
    if status >= 500:
        ids = current_ids()
        trace_id = (ids.trace_id if ids else None) or request_id
        if trace_id:
            body["trace_id"] = headers[TRACE_ID_HEADER] = trace_id
    response = Response(json.dumps(body), status=status, mimetype=PROBLEM_JSON)
    if status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    for key, value in headers.items():
        response.headers[key] = value
    return response


def _pricing_error(exc: PricingError) -> Response:
    if exc.internal_detail is not None:
        # The specifics, under the trace_id the problem body and header carry.
        log.warning(
            "%s %s answered %s: %s", request.method, request.path, exc.status, exc.internal_detail
        )
    return problem_response(
        exc.status,
        exc.title,
        exc.detail,
        slug=exc.slug,
        errors=getattr(exc, "errors", None),
        headers=getattr(exc, "headers", None),
    )


def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    headers = {}
    if status == 405 and exc.valid_methods:  # type: ignore[attr-defined]
        headers["Allow"] = ", ".join(sorted(exc.valid_methods))  # type: ignore[attr-defined]
    return problem_response(status, exc.name, exc.description or exc.name, headers=headers)


def _unexpected(exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.path)
    return problem_response(
        500, "Internal Server Error", "an unexpected error was logged under this trace_id"
    )


def init_app(app: Flask) -> None:
    app.register_error_handler(PricingError, _pricing_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
