"""Reading the app's RFC 9457 problem replies from a Flask test client."""

from __future__ import annotations

from typing import Any

from toolkit.contract import PROBLEM_JSON


def problem(response: Any) -> dict[str, Any]:
    assert response.mimetype == PROBLEM_JSON, response.data
    body: dict[str, Any] = response.get_json()
    assert body["status"] == response.status_code
    return body
