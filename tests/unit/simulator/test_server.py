"""The HTTP/1.1 protocol and control API, driven in memory (no sockets)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from simulator.model import DEFAULT_CONFIG, parse_config
from simulator.server import HttpProtocol, Simulator

ZERO_LATENCY = {
    name: {"latency": {"dist": "fixed", "ms": 0}} for name in ("vehicles", "routing", "promotions")
}
VEHICLES = b"/vehicles/v1/nearby?lat=37.77&lng=-122.41&mode=bike&limit=5"


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.out += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


def parse_replies(data: bytes) -> list[Reply]:
    replies = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        replies.append(Reply(status, headers, rest[:length]))
        data = rest[length:]
    return replies


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def sim(loop: asyncio.AbstractEventLoop) -> Simulator:
    sim = Simulator(parse_config({"upstreams": ZERO_LATENCY}), rng=random.Random(1))
    sim.loop = loop
    return sim


def connect(sim: Simulator) -> tuple[HttpProtocol, FakeTransport]:
    conn = HttpProtocol(sim)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def get(target: bytes, *headers: bytes) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: sim\r\n%s\r\n" % (
        target,
        b"".join(h + b"\r\n" for h in headers),
    )


def send(sim: Simulator, raw: bytes) -> tuple[list[Reply], FakeTransport]:
    conn, transport = connect(sim)
    conn.data_received(raw)
    return parse_replies(bytes(transport.out)), transport


def request(sim: Simulator, method: str, target: str, body: Any = None) -> Reply:
    payload = (
        b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    raw = b"%s %s HTTP/1.1\r\nHost: sim\r\nContent-Length: %d\r\n\r\n%s" % (
        method.encode(),
        target.encode(),
        len(payload),
        payload,
    )
    replies, _ = send(sim, raw)
    assert len(replies) == 1
    return replies[0]


def test_each_upstream_answers_json(sim: Simulator) -> None:
    for target in (
        VEHICLES,
        b"/routing/v1/eta?origin=37.77,-122.41&destination=37.78,-122.40&mode=bike",
        b"/promotions/v1/active?user_id=u123&mode=bike",
    ):
        [reply], transport = send(sim, get(target))
        assert reply.status == 200
        assert reply.headers["content-type"] == "application/json"
        assert isinstance(reply.json(), dict)
        assert not transport.closed
    assert sim.requests == {"vehicles": 1, "routing": 1, "promotions": 1}


def test_keep_alive_split_packets_and_pipelining(sim: Simulator) -> None:
    conn, transport = connect(sim)
    raw = get(VEHICLES)
    for i in range(0, len(raw), 7):  # one request in many small reads
        conn.data_received(raw[i : i + 7])
    conn.data_received(raw + get(b"/healthz"))  # two at once
    replies = parse_replies(bytes(transport.out))
    assert [r.status for r in replies] == [200, 200, 200]
    assert replies[0].body == replies[1].body
    assert not transport.closed


def test_connection_close_and_http10(sim: Simulator) -> None:
    [reply], transport = send(sim, get(VEHICLES, b"Connection: close"))
    assert reply.headers["connection"] == "close" and transport.closed
    [reply], transport = send(sim, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert reply.status == 200 and transport.closed
    [reply], transport = send(sim, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert not transport.closed


def test_traceparent_is_recorded(sim: Simulator) -> None:
    tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    send(sim, get(VEHICLES, b"TraceParent: " + tp))
    send(sim, get(VEHICLES))
    reply = request(sim, "GET", "/_control/records?upstream=vehicles")
    records = reply.json()["records"]
    assert [r["traceparent"] for r in records] == [tp.decode(), None]
    for r in records:
        assert r["status"] == 200
        assert r["received_ns"] <= r["sent_ns"]


def test_bad_query_is_a_problem(sim: Simulator) -> None:
    [reply], _ = send(sim, get(b"/vehicles/v1/nearby?lat=abc&lng=1&mode=bike"))
    assert reply.status == 400
    assert reply.headers["content-type"] == "application/problem+json"
    doc = reply.json()
    assert doc["status"] == 400 and doc["field"] == "lat" and "lat" in doc["detail"]
    assert {"type", "title", "status", "detail"} <= set(doc)


def test_unknown_path_and_wrong_method(sim: Simulator) -> None:
    reply = request(sim, "GET", "/nope")
    assert reply.status == 404 and reply.headers["content-type"] == "application/problem+json"
    reply = request(sim, "POST", "/vehicles/v1/nearby?lat=1&lng=1&mode=bike", {})
    assert reply.status == 405 and reply.headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NONSENSE\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    ],
)
def test_unparsable_requests_are_answered_then_closed(
    sim: Simulator, raw: bytes, status: int
) -> None:
    [reply], transport = send(sim, raw)
    assert reply.status == status
    assert reply.headers["content-type"] == "application/problem+json"
    assert transport.closed


def test_injected_errors(sim: Simulator) -> None:
    assert request(sim, "PUT", "/_control/upstreams/routing", {"error_rate": 1.0}).status == 200
    [reply], _ = send(sim, get(b"/routing/v1/eta?origin=1,1&destination=1,2&mode=bike"))
    assert reply.status == 503
    assert reply.headers["content-type"] == "application/problem+json"
    assert sim.errors["routing"] == 1


def test_control_put_get_reset(sim: Simulator) -> None:
    reply = request(
        sim, "PUT", "/_control/upstreams/vehicles", {"latency": {"dist": "fixed", "ms": 100}}
    )
    assert reply.status == 200
    assert reply.json()["latency"] == {"dist": "fixed", "ms": 100}
    upstreams = request(sim, "GET", "/_control/upstreams").json()["upstreams"]
    assert upstreams["vehicles"]["latency"] == {"dist": "fixed", "ms": 100}
    reply = request(sim, "POST", "/_control/reset")
    assert reply.status == 200
    assert reply.json()["upstreams"]["vehicles"]["latency"] == {"dist": "fixed", "ms": 0}


@pytest.mark.parametrize(
    ("target", "body", "status", "field"),
    [
        ("/_control/upstreams/payments", {"fault": "reset"}, 404, None),
        ("/_control/upstreams/vehicles", b"{not json", 400, None),
        ("/_control/upstreams/vehicles", {"fault": "explode"}, 422, "fault"),
        ("/_control/upstreams/vehicles", {"latency": {"ms": -5}}, 422, "latency.ms"),
        ("/_control/upstreams/vehicles", {"error_rate": 2}, 422, "error_rate"),
    ],
)
def test_control_validation_errors_are_problems(
    sim: Simulator, target: str, body: Any, status: int, field: str | None
) -> None:
    before = dict(sim.settings)
    reply = request(sim, "PUT", target, body)
    assert reply.status == status
    assert reply.headers["content-type"] == "application/problem+json"
    doc = reply.json()
    assert doc["status"] == status
    if field is not None:
        assert doc["field"] == field and field in doc["detail"]
    assert sim.settings == before


def test_stats(sim: Simulator) -> None:
    send(sim, get(VEHICLES))
    stats = request(sim, "GET", "/_control/stats").json()
    assert stats["requests"]["vehicles"] == 1
    assert stats["errors"] == {"vehicles": 0, "routing": 0, "promotions": 0}
    assert stats["cpu_s"] > 0 and stats["uptime_s"] >= 0


def test_records_query_validation(sim: Simulator) -> None:
    for target in (
        "/_control/records?upstream=payments",
        "/_control/records?limit=0",
        "/_control/records?since_ns=-1",
    ):
        reply = request(sim, "GET", target)
        assert reply.status == 400, target


def test_records_limit_keeps_the_latest(sim: Simulator) -> None:
    for _ in range(5):
        send(sim, get(VEHICLES))
    records = request(sim, "GET", "/_control/records?limit=2").json()["records"]
    everything = request(sim, "GET", "/_control/records").json()["records"]
    assert len(everything) == 5 and records == everything[-2:]
    since = everything[3]["received_ns"]
    assert (
        request(sim, "GET", f"/_control/records?since_ns={since}").json()["records"]
        == (everything[3:])
    )


def test_delay_is_a_timer_not_a_sleep(loop: asyncio.AbstractEventLoop) -> None:
    sim = Simulator(DEFAULT_CONFIG, rng=random.Random(1))
    sim.loop = loop
    conn, transport = connect(sim)
    conn.data_received(get(VEHICLES))
    assert transport.out == b""  # nothing yet: the answer waits on a timer
    assert conn.timer is not None
    loop.run_until_complete(asyncio.sleep(0.1))  # default vehicles latency is 25-45 ms
    [reply] = parse_replies(bytes(transport.out))
    assert reply.status == 200


def test_hang_never_answers_and_connection_loss_cancels_timers(sim: Simulator) -> None:
    request(sim, "PUT", "/_control/upstreams/vehicles", {"fault": "hang"})
    conn, transport = connect(sim)
    conn.data_received(get(VEHICLES) + get(b"/healthz"))
    assert transport.out == b""
    conn.connection_lost(None)
    assert sim.errors["vehicles"] == 1
    [record] = request(sim, "GET", "/_control/records").json()["records"]
    assert record["fault"] == "hang"
    assert record["sent_ns"] is None and record["status"] is None


def test_records_escape_odd_traceparents(sim: Simulator) -> None:
    send(sim, get(VEHICLES, b'traceparent: "quoted"\\'))
    [record] = request(sim, "GET", "/_control/records").json()["records"]
    assert record["traceparent"] == '"quoted"\\'
    assert record["fault"] is None


def test_half_closed_client_still_gets_its_answers(loop: asyncio.AbstractEventLoop) -> None:
    sim = Simulator(DEFAULT_CONFIG, rng=random.Random(1))
    sim.loop = loop
    conn, transport = connect(sim)
    conn.data_received(get(VEHICLES) + get(VEHICLES))
    assert conn.eof_received() is True  # keep the connection to answer
    assert not transport.closed
    loop.run_until_complete(asyncio.sleep(0.2))
    assert [r.status for r in parse_replies(bytes(transport.out))] == [200, 200]
    assert transport.closed
