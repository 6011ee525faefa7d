"""Query values out of span URLs, keys and allow-listed values kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider

from toolkit.contract import QUERY_ALLOW_ENV
from tracing.redact import QueryRedactor, allow_from_env, redact_query, redact_url


def test_values_are_redacted_unless_allowed() -> None:
    url = "http://h:1/v1/offers/bike?origin=1,2&user_id=u-1&region=sf&flag#frag"
    assert redact_url(url) == (
        "http://h:1/v1/offers/bike?origin=REDACTED&user_id=REDACTED&region=sf&flag#frag"
    )
    assert redact_url("/v1/regions") == "/v1/regions"


def _item_by_item(query: str, allowed: frozenset[str]) -> str:
    """The rule, stated plainly: each item's value goes unless its key is allowed."""
    items = query.split("&")
    return "&".join(
        item
        if "=" not in item or item.partition("=")[0] in allowed
        else item.partition("=")[0] + "=REDACTED"
        for item in items
    )


@given(
    st.text(alphabet="ab=&#rgion_", max_size=40),
    st.frozensets(st.sampled_from(["a", "region", "b=", "", "ab"]), max_size=3),
)
def test_every_query_is_redacted_by_the_rule(query: str, allowed: frozenset[str]) -> None:
    """The one-pass path (no allowed key in the query) and the item-by-item one agree
    with the rule on any query: keys that merely contain an allowed key, empty items and
    values, several "=" in an item."""
    assert redact_query(query, allowed) == _item_by_item(query, allowed)


def test_allow_list_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(QUERY_ALLOW_ENV, "region, origin")
    assert allow_from_env() == {"region", "origin"}
    monkeypatch.setenv(QUERY_ALLOW_ENV, "")
    assert allow_from_env() == frozenset()


def test_the_processor_rewrites_a_span_started_with_a_url() -> None:
    provider = TracerProvider()
    provider.add_span_processor(QueryRedactor())
    span = provider.get_tracer("t").start_span(
        "GET", attributes={"url.full": "http://h/p?user_id=u-1", "url.query": "user_id=u-2"}
    )
    assert span.attributes["url.full"] == "http://h/p?user_id=REDACTED"
    assert span.attributes["url.query"] == "user_id=REDACTED"
    span.end()
