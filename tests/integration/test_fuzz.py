"""Bad input, through the real Envoy: the API is fuzzed from its own /openapi.json
(schemathesis, every check, with this project's schemathesis.toml) and hit with
hand-written malformed requests. No 5xx; every 4xx is an application/problem+json
naming the problem; responses conform to the spec; size limits answer 413/431/422
both at Envoy and in the app.
"""

from __future__ import annotations

import http.client as httpclient
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stack.launch import Stack
from tests.integration.support.http import fixed_latency, http, reset_upstreams
from tests.integration.support.schemathesis_hooks import problem_issues
from tests.samples import DESTINATION, ORIGIN, RIDE
from toolkit.fetch import Reply

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]  # where schemathesis.toml is
FIXED_SEED = 90210
MAX_EXAMPLES = 80  # per operation and phase, as in the README's command
MIN_CASES = 400  # fewer means operations went untested


@pytest.fixture(scope="module")
def stack(split_stack: Stack) -> Iterator[Stack]:
    """The split stack with every upstream answering in ~1 ms: no 503/504 expected."""
    reset_upstreams(split_stack)
    fixed_latency(split_stack, 1)
    yield split_stack
    reset_upstreams(split_stack)


def assert_problem(
    reply: Reply, status: int, *, field: str | None = None, via_envoy: bool = True
) -> dict[str, Any]:
    content_type = reply.headers.get("content-type", "")
    assert reply.status == status, (reply.status, reply.body[:300])
    assert problem_issues(reply.status, content_type, reply.body, via_envoy=via_envoy) == []
    doc: dict[str, Any] = reply.json()
    if field is not None:
        fields = [e["field"] for e in doc["errors"]]
        assert any(f == field or f.startswith(field) for f in fields), (field, fields)
    return doc


# --- schemathesis ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", [FIXED_SEED, random.randrange(2**31)], ids=["fixed", "random"])
def test_schemathesis_runs_every_check_and_finds_nothing(stack: Stack, seed: int) -> None:
    """`schemathesis run --checks all`, as a user of the live API would, plus this
    project's own checks (schemathesis_hooks.py). The random seed is printed, and in
    the failure message, so that a failure can be replayed."""
    print(f"\nschemathesis seed: {seed}")
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{stack.url}/openapi.json",
        "--url",
        stack.url,
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(seed),
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.integration.support.schemathesis_hooks"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    summary = output[output.find("= SUMMARY =") - 40 :] if "= SUMMARY =" in output else output
    print(summary)
    assert result.returncode == 0, f"seed {seed}: schemathesis reported problems\n{output}"
    # (warnings.fail-on in schemathesis.toml makes any warning fail the run too.)
    generated = re.search(r"(\d+) generated", output)
    assert generated is not None and int(generated.group(1)) >= MIN_CASES, summary


# --- hand-written malformed requests ----------------------------------------------


def raw(
    stack: Stack,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    chunked: bool = False,
    to: str | None = None,
) -> Reply:
    """One request through http.client, for what urllib will not send (chunked
    bodies, no content type, any bytes); `to` sends it straight to a pool."""
    host, port = (to or stack.url).removeprefix("http://").split(":")
    conn = httpclient.HTTPConnection(host, int(port), timeout=10)
    started = time.monotonic()
    try:
        conn.request(
            method,
            path,
            body=iter([body]) if chunked and body is not None else body,
            headers=headers or {},
            encode_chunked=chunked,
        )
        resp = conn.getresponse()
        payload = resp.read()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        return Reply(resp.status, hdrs, payload, time.monotonic() - started)
    finally:
        conn.close()


def offer_path(query: str, mode: str = "bike") -> str:
    return f"/v1/offers/{mode}?{query}"


GOOD_POINTS = f"origin={ORIGIN}&destination={DESTINATION}"

# (query, the field the 422 must name)
BAD_QUERIES = [
    ("", "origin"),
    ("origin=abc,def&destination=37.78,-122.41&user_id=u", "origin"),  # wrong type
    ("origin=37.77&destination=37.78,-122.41&user_id=u", "origin"),  # one number
    ("origin=1e308,1e308&destination=37.78,-122.41&user_id=u", "origin"),  # huge
    ("origin=99999999999999999999999,0&destination=37.78,-122.41&user_id=u", "origin"),
    ("origin=nan,nan&destination=37.78,-122.41&user_id=u", "origin"),
    ("origin=inf,-inf&destination=37.78,-122.41&user_id=u", "origin"),
    ("origin=37.77,%20-122.42&destination=37.78,-122.41&user_id=u", "origin"),  # space
    ("origin=%EF%BC%93%EF%BC%97.77,-122.42&destination=37.78,-122.41&user_id=u", "origin"),
    ("origin=37.77,-122.42,1&destination=37.78,-122.41&user_id=u", "origin"),
    ("origin=%00&destination=37.78,-122.41&user_id=u", "origin"),  # NUL
    (f"{GOOD_POINTS}&user_id=%F0%9F%9A%B2", "user_id"),  # unicode (a bike emoji)
    (f"{GOOD_POINTS}&user_id=u-1%0A", "user_id"),  # trailing newline
    (f"{GOOD_POINTS}&user_id=" + "x" * 2000, "user_id"),  # absurdly long
    (f"{GOOD_POINTS}&user_id=", "user_id"),  # empty
    (f"{GOOD_POINTS}&user_id", "user_id"),  # no value at all
    (f"{GOOD_POINTS}&user_id=a&user_id=b", "user_id"),  # repeated
    (f"{GOOD_POINTS}&user_id=u" + "&origin=37.77,-122.42" * 150, "origin"),  # repeated x150
    (f"{GOOD_POINTS}&user_id=u&region=atlantis", "region"),
    (f"{GOOD_POINTS}&user_id=u&region=", "region"),
    (f"{GOOD_POINTS}&user_id=u&region=nyc", "origin"),  # both ends outside nyc
    ("origin=0,0&destination=0,0&user_id=u", "origin"),  # no service area there
]


@pytest.mark.parametrize(("query", "field"), BAD_QUERIES, ids=range(len(BAD_QUERIES)))
def test_bad_offer_query_is_a_422_problem_naming_the_field(
    stack: Stack, query: str, field: str
) -> None:
    reply = raw(stack, "GET", offer_path(query, "scooter"))
    assert_problem(reply, 422, field=field)
    assert reply.headers["x-pricing-pool"] == "io"


def test_absurd_but_harmless_query_parameters_are_ignored(stack: Stack) -> None:
    # Unknown parameters are allowed (OpenAPI query parameters are open), even many.
    junk = "&".join(f"junk{i}=%FF%FE{i}" for i in range(200))
    reply = raw(stack, "GET", offer_path(f"{GOOD_POINTS}&user_id=u-1&{junk}"))
    assert reply.status == 200, reply.body[:300]
    assert reply.json()["mode"] == "bike"


RIDE_BAD_BODIES: list[tuple[Any, int, str | None]] = [
    # (body, status, field the 422 names)
    ({**RIDE, "origin": {"lat": "37.7", "lng": -122.4}}, 422, "origin.lat"),  # wrong type
    ({**RIDE, "user_id": 42}, 422, "user_id"),
    ({**RIDE, "origin": [37.7, -122.4]}, 422, "origin"),
    ({k: v for k, v in RIDE.items() if k != "user_id"}, 422, "user_id"),  # missing
    ({**RIDE, "origin": {"lat": 37.7}}, 422, "origin.lng"),
    ({**RIDE, "origin": {"lat": 1e308, "lng": 0}}, 422, "origin.lat"),  # huge
    ({**RIDE, "origin": {"lat": -1e-320, "lng": 1e-320}}, 422, "origin"),  # subnormal
    ({**RIDE, "user_id": "ü🚲\u202e"}, 422, "user_id"),  # unicode
    ({**RIDE, "user_id": "u" * 10_000}, 422, "user_id"),
    ({**RIDE, "region": "atlantis"}, 422, "region"),
    ({**RIDE, "region": 7}, 422, "region"),
    ({**RIDE, "surprise": {"nested": [1, 2, 3]}}, 422, "surprise"),  # unknown field
    ({**RIDE, "requested_at": "2026-11-21T10:00:00"}, 422, "requested_at"),  # no offset
    ({**RIDE, "requested_at": "2026-13-45T99:00:00Z"}, 422, "requested_at"),
    ({**RIDE, "requested_at": "9999-12-31T23:59:59-14:00"}, 422, "requested_at"),  # overflow
    ({**RIDE, "requested_at": "0001-01-01T00:00:00+14:00"}, 422, "requested_at"),
    ({**RIDE, "requested_at": 1_700_000_000}, 422, "requested_at"),
    (None, 422, "body"),  # JSON null
    ([], 422, "body"),
    ("a string", 422, "body"),
    (b"", 400, None),  # empty body
    (b"{", 400, None),  # bad JSON
    (b'{"origin": {"lat": NaN, "lng": Infinity}}', 422, "origin.lat"),
    (b'{"origin": {"lat": 1' + b"0" * 5000 + b', "lng": 0}}', 400, None),  # 10**5000
    (b"\xff\xfe{}", 400, None),  # not UTF-8
    (b'{"user_id": "\\ud800"}', 400, None),  # lone surrogate
    (b"[" * 30_000 + b"]" * 30_000, 400, None),  # nesting bomb (under the size limit)
]


@pytest.mark.parametrize(
    ("body", "status", "field"), RIDE_BAD_BODIES, ids=range(len(RIDE_BAD_BODIES))
)
def test_bad_rideshare_body_is_a_4xx_problem(
    stack: Stack, body: Any, status: int, field: str | None
) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = raw(stack, "POST", "/v1/offers/rideshare", data, {"content-type": "application/json"})
    assert_problem(reply, status, field=field)
    assert reply.headers["x-pricing-pool"] == "cpu"


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; b=x",
        "application/jsonx",
        "json",
    ],
)
def test_wrong_content_type_is_415(stack: Stack, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    reply = raw(stack, "POST", "/v1/offers/rideshare", json.dumps(RIDE).encode(), headers)
    doc = assert_problem(reply, 415)
    assert "application/json" in doc["detail"]


def test_wrong_method_is_405_with_allow(stack: Stack) -> None:
    for method, path, allowed in (
        ("POST", offer_path(f"{GOOD_POINTS}&user_id=u"), "GET"),
        ("DELETE", "/v1/offers/scooter", "GET"),
        ("GET", "/v1/offers/rideshare", "POST"),
        ("PUT", "/v1/quotes/batch", "POST"),
    ):
        reply = raw(stack, method, path, b"{}" if method != "GET" else None)
        assert_problem(reply, 405)
        assert allowed in reply.headers["allow"]


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("QUERY", {}),  # Envoy 1.40 refuses this one before routing, unless told otherwise
        ("QUERY", {"content-type": "application/json"}),
        ("TRACE", {}),
        ("FOO", {}),  # a method HTTP/1 does not know
    ],
    ids=["QUERY", "QUERY+content-type", "TRACE", "FOO"],
)
def test_every_path_answers_other_methods_405_with_allow(
    stack: Stack, method: str, headers: dict[str, str]
) -> None:
    for route in stack.config.routes:
        reply = raw(stack, method, route.path, headers=headers)
        doc = assert_problem(reply, 405)
        assert reply.headers["allow"] == ", ".join(route.answered_methods), route.path
        assert doc["request_id"] == reply.headers["x-request-id"]
        assert "x-pricing-pool" not in reply.headers  # the pools never see it


def test_envoys_early_refusals_carry_a_request_id(stack: Stack) -> None:
    """Replies Envoy makes before it has given the request an id get a fresh one."""
    path = offer_path(f"{GOOD_POINTS}&user_id=u-1")
    replies = [
        raw(stack, "GET", path, headers={"x_underscore": "1"}),  # 400
        raw(stack, "GET", path, headers={f"x-h{i}": "1" for i in range(150)}),  # 431
        raw(stack, "QUERY", "/no/such/path"),  # 400 query_missing_content_type
        raw(stack, "GET", "/no/such/path"),  # 404, routed: Envoy's own id
    ]
    ids = set()
    for reply in replies:
        doc = assert_problem(reply, reply.status)
        assert doc["request_id"] == reply.headers["x-request-id"]
        ids.add(doc["request_id"])
    assert len(ids) == len(replies)


def test_batch_length_is_limited_to_16_with_a_422(stack: Stack) -> None:
    from pricing.web.schemas import MAX_BATCH_QUOTES

    ok = http("POST", f"{stack.url}/v1/quotes/batch", {"quotes": [RIDE] * MAX_BATCH_QUOTES})
    assert ok.status == 200
    assert ok.json()["count"] == MAX_BATCH_QUOTES
    for quotes in ([RIDE] * (MAX_BATCH_QUOTES + 1), [], [{"user_id": "u"}] * 600):
        reply = http("POST", f"{stack.url}/v1/quotes/batch", {"quotes": quotes})
        doc = assert_problem(reply, 422, field="quotes")
        assert reply.elapsed_s < 5  # refused before any quote is priced
    # A bad item inside a valid batch is that item's problem, by index.
    bad = {**RIDE, "origin": {"lat": "x", "lng": 0}}
    reply = http("POST", f"{stack.url}/v1/quotes/batch", {"quotes": [RIDE, bad]})
    doc = assert_problem(reply, 422, field="quotes[1].origin.lat")
    assert doc["status"] == 422
    reply = http("POST", f"{stack.url}/v1/quotes/batch", {"quotes": {"a": RIDE}})
    assert_problem(reply, 422, field="quotes")


# --- limits at Envoy and in the app -----------------------------------------------


def test_oversized_body_is_413_from_envoy_and_from_the_app(stack: Stack) -> None:
    limit = stack.config.listener.max_request_bytes
    big = json.dumps({**RIDE, "pad": "x" * (limit + 1000)}).encode()
    headers = {"content-type": "application/json"}
    # Envoy's buffer filter, with and without a content-length.
    for chunked in (False, True):
        reply = raw(stack, "POST", "/v1/offers/rideshare", big, headers, chunked=chunked)
        doc = assert_problem(reply, 413)
        assert "x-pricing-pool" not in reply.headers  # Envoy answered, the pool never saw it
        assert doc["instance"] == "/v1/offers/rideshare"
    # The app enforces the same limit when reached directly (e.g. a misrouted request).
    for path in ("/v1/offers/rideshare", "/v1/quotes/batch"):
        reply = raw(stack, "POST", path, big, headers, to=stack.pool_url("cpu"))
        assert_problem(reply, 413, via_envoy=False)
        assert reply.headers["x-pricing-pool"] == "cpu"
    # Just under the limit is not refused for its size.
    fits = json.dumps({**RIDE, "pad": "x" * (limit - 2000)}).encode()
    reply = raw(stack, "POST", "/v1/offers/rideshare", fits, headers)
    assert_problem(reply, 422, field="pad")


def test_oversized_headers_are_431_from_envoy(stack: Stack) -> None:
    path = offer_path(f"{GOOD_POINTS}&user_id=u-1")
    kb = stack.config.listener.max_request_headers_kb
    too_big = {f"x-pad-{i}": "y" * 1000 for i in range(kb + 2)}
    reply = raw(stack, "GET", path, headers=too_big)
    assert_problem(reply, 431)
    from routing.envoy import MAX_REQUEST_HEADERS

    # Envoy's count limit, below gunicorn's (100), so the pool's HTML 431 never shows.
    for count in (MAX_REQUEST_HEADERS + 1, 97, 150):
        reply = raw(stack, "GET", path, headers={f"x-h{i}": "1" for i in range(count)})
        assert_problem(reply, 431)
    many = {f"x-h{i}": "1" for i in range(MAX_REQUEST_HEADERS - 10)}
    assert raw(stack, "GET", path, headers=many).status == 200
    reply = raw(stack, "GET", path, headers={"x_underscore": "1"})  # rejected by policy
    assert_problem(reply, 400)
    # A URL longer than every header budget.
    reply = raw(stack, "GET", path + "&pad=" + "p" * (kb * 1024 + 10))
    assert_problem(reply, 431)


def test_requests_envoy_admits_never_get_an_html_error_from_the_pool(stack: Stack) -> None:
    path = offer_path(f"{GOOD_POINTS}&user_id=u-1")
    replies = {
        "one 10 KB header": raw(stack, "GET", path, headers={"x-pad": "y" * 10_000}),
        "a 6 KB URL": raw(stack, "GET", path + "&pad=" + "p" * 6000),
        "a 5 KB user_id": raw(stack, "GET", offer_path(f"{GOOD_POINTS}&user_id=" + "x" * 5000)),
        "origin given 300 times": raw(
            stack, "GET", offer_path(f"{GOOD_POINTS}&user_id=u" + "&origin=1,2" * 300)
        ),
        "500 unknown parameters": raw(
            stack, "GET", path + "&" + "&".join(f"junk{i}=%FF{i}" for i in range(500))
        ),
    }
    wrong = {
        what: (reply.status, reply.headers.get("content-type"), reply.body[:120])
        for what, reply in replies.items()
        if reply.status != 200
        and problem_issues(reply.status, reply.headers.get("content-type", ""), reply.body)
    }
    assert wrong == {}


def test_envoy_answers_unknown_paths_and_garbage_with_problems(stack: Stack) -> None:
    for path in ("/", "/v1", "/v1/offers/bike/extra", "/%2e%2e/etc/passwd", "/v1/offers/%00"):
        reply = raw(stack, "GET", path)
        assert reply.status in (400, 404), (path, reply.status)
        assert_problem(reply, reply.status)
    # Not HTTP at all: Envoy closes or answers 400, and keeps serving.
    with socket.create_connection(
        tuple(stack.url.removeprefix("http://").split(":")),
        timeout=5,  # type: ignore[arg-type]
    ) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n")
        answer = sock.recv(4096)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400")
    assert http("GET", f"{stack.url}{offer_path(f'{GOOD_POINTS}&user_id=u-1')}").status == 200
