"""Checks of this API's own, added to every schemathesis check when the fuzz test
runs `schemathesis run` (SCHEMATHESIS_HOOKS=tests.integration.support.schemathesis_hooks).

Also usable by hand: SCHEMATHESIS_HOOKS=tests.integration.support.schemathesis_hooks
schemathesis run ... from the repository root.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from schemathesis import GenerationMode

PROBLEM_JSON = "application/problem+json"
OUTSIDE_SERVICE_AREA = "urn:pricingservice:problem:outside-service-area"


def problem_issues(
    status: int, content_type: str, body: bytes, *, via_envoy: bool = True
) -> list[str]:
    """Why an error response is not a proper problem document (empty: it is). Through
    Envoy every problem carries the request id Envoy gave the request."""
    if not content_type.startswith(PROBLEM_JSON):
        return [f"{status} has content-type {content_type!r}, not {PROBLEM_JSON}"]
    try:
        doc = json.loads(body)
    except ValueError:
        return [f"{status} body is not JSON: {body[:120]!r}"]
    issues = []
    if not isinstance(doc, dict):
        return [f"{status} problem is not an object: {doc!r}"]
    if doc.get("status") != status:
        issues.append(f"problem status {doc.get('status')!r} != HTTP {status}")
    for key in ("type", "title", "request_id") if via_envoy else ("type", "title"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            issues.append(f"{status} problem has no {key!r}: {doc}")
    if not isinstance(doc.get("detail"), str):  # may be empty: RFC 9457 makes it optional
        issues.append(f"{status} problem has no 'detail' string: {doc}")
    if status == 422:
        errors = doc.get("errors")
        if not errors or not all(isinstance(e, dict) and e.get("field") for e in errors):
            issues.append(f"422 problem does not name the invalid field(s): {doc}")
    return issues


@schemathesis.check
def problem_details(ctx: Any, response: Any, case: Any) -> None:
    """Every error, from the app or from Envoy (undeclared methods included), is an
    RFC 9457 problem that carries the request id."""
    if response.status_code < 400:
        return
    content_type = response.headers.get("content-type", [""])[0]
    issues = problem_issues(response.status_code, content_type, response.content)
    if issues:
        raise AssertionError("; ".join(issues))


@schemathesis.check
def valid_data_refused_only_for_the_area_rule(ctx: Any, response: Any, case: Any) -> None:
    """schemathesis.toml lets the offers and the rideshare quote refuse schema-valid data
    with 422, for the one rule no schema can state (both ends in the same region).
    This keeps that allowance to that rule: any other 422 on valid data is a failure."""
    meta = case.meta
    if meta is None or meta.generation.mode is not GenerationMode.POSITIVE:
        return
    if response.status_code != 422:
        return
    doc = json.loads(response.content)
    if doc.get("type") != OUTSIDE_SERVICE_AREA:
        raise AssertionError(f"schema-valid request refused: {doc}")
