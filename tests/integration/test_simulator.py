"""The upstream simulator as a real process on a free loopback port."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stack.procs import Proc, free_port
from toolkit.fetch import http_ok

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
VEHICLES = "/vehicles/v1/nearby?lat=37.77&lng=-122.41&mode=bike&limit=5"
ROUTING = "/routing/v1/eta?origin=37.77,-122.41&destination=37.78,-122.40&mode=bike"
PROMOTIONS = "/promotions/v1/active?user_id=u123&mode=bike"
ZERO = {"dist": "fixed", "ms": 0}


def simulator_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "simulator", *args]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    port = free_port()
    log = tmp_path_factory.mktemp("simulator") / "simulator.log"
    proc = Proc("simulator", simulator_argv("--bind", f"127.0.0.1:{port}"), log, cwd=REPO_ROOT)
    proc.start()
    try:
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 20.0, "serving")
        yield ("127.0.0.1", port)
    finally:
        proc.stop()


@pytest.fixture(autouse=True)
def fresh(sim: tuple[str, int]) -> Iterator[None]:
    call(sim, "POST", "/_control/reset")
    yield
    call(sim, "POST", "/_control/reset")


class Reply:
    def __init__(self, resp: http.client.HTTPResponse, body: bytes, elapsed_s: float) -> None:
        self.status = resp.status
        self.content_type = resp.getheader("content-type", "")
        self.body = body
        self.elapsed_s = elapsed_s

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    sim: tuple[str, int],
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Reply:
    conn = http.client.HTTPConnection(*sim, timeout=timeout_s)
    try:
        return call_on(conn, method, path, body, headers)
    finally:
        conn.close()


def call_on(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body))
    started = time.monotonic()
    conn.request(method, path, body=payload, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    return Reply(resp, data, time.monotonic() - started)


def configure(sim: tuple[str, int], name: str, **settings: Any) -> None:
    reply = call(sim, "PUT", f"/_control/upstreams/{name}", settings)
    assert reply.status == 200, reply.body


def raw_exchange(sim: tuple[str, int], path: str, timeout_s: float = 5.0) -> tuple[bytes, str]:
    """Send one GET on a bare socket; what came back and how the connection ended."""
    with socket.create_connection(sim, timeout=timeout_s) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: sim\r\n\r\n".encode())
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except ConnectionResetError:
            return got, "reset"
        except TimeoutError:
            return got, "timeout"
        return got, "eof"


# --- the upstream APIs -------------------------------------------------------------------


def test_each_upstream_answers_json(sim: tuple[str, int]) -> None:
    for name in ("vehicles", "routing", "promotions"):
        configure(sim, name, latency=ZERO)
    vehicles = call(sim, "GET", VEHICLES)
    assert vehicles.status == 200 and vehicles.content_type == "application/json"
    assert isinstance(vehicles.json()["vehicles"], list)
    routing = call(sim, "GET", ROUTING)
    assert routing.status == 200
    assert set(routing.json()) == {"mode", "distance_m", "duration_s"}
    promotions = call(sim, "GET", PROMOTIONS)
    assert promotions.status == 200
    assert promotions.json()["promotions"][0]["code"] == "BIKE10"
    assert call(sim, "GET", "/vehicles/v1/nearby?lat=1").status == 400
    missing = call(sim, "GET", "/payments/v1/charge")
    assert missing.status == 404 and missing.content_type == "application/problem+json"


def test_keep_alive(sim: tuple[str, int]) -> None:
    configure(sim, "vehicles", latency=ZERO)
    conn = http.client.HTTPConnection(*sim, timeout=5)
    try:
        call_on(conn, "GET", VEHICLES)
        sock = conn.sock
        assert sock is not None
        local = sock.getsockname()
        for path in (VEHICLES, "/healthz", "/_control/stats", VEHICLES):
            assert call_on(conn, "GET", path).status == 200
            assert conn.sock is sock and sock.getsockname() == local  # no reconnect
    finally:
        conn.close()


def test_fixed_latency_is_honoured_and_recorded(sim: tuple[str, int]) -> None:
    configure(sim, "vehicles", latency={"dist": "fixed", "ms": 100})
    since = time.time_ns()
    traceparents = []
    for _ in range(3):
        tp = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
        traceparents.append(tp)
        reply = call(sim, "GET", VEHICLES, headers={"traceparent": tp})
        assert reply.status == 200
        assert reply.elapsed_s >= 0.100
    records = call(sim, "GET", f"/_control/records?upstream=vehicles&since_ns={since}").json()
    by_tp = {r["traceparent"]: r for r in records["records"]}
    assert set(traceparents) <= set(by_tp)
    spans_ms = [(by_tp[tp]["sent_ns"] - by_tp[tp]["received_ns"]) / 1e6 for tp in traceparents]
    assert statistics.median(spans_ms) == pytest.approx(100.0, abs=5.0), spans_ms
    for tp in traceparents:
        assert by_tp[tp]["delay_ms"] == 100 and by_tp[tp]["status"] == 200


def test_error_rate_one_gives_the_error_status(sim: tuple[str, int]) -> None:
    configure(sim, "routing", latency=ZERO, error_rate=1.0)
    reply = call(sim, "GET", ROUTING)
    assert reply.status == 503
    assert reply.content_type == "application/problem+json"
    assert reply.json()["status"] == 503
    configure(sim, "routing", error_status=429)
    assert call(sim, "GET", ROUTING).status == 429
    stats = call(sim, "GET", "/_control/stats").json()
    assert stats["errors"]["routing"] >= 2
    assert stats["cpu_s"] > 0


# --- faults ------------------------------------------------------------------------------


def test_fault_reset_sends_part_of_the_answer_then_rst(sim: tuple[str, int]) -> None:
    configure(sim, "vehicles", latency=ZERO, fault="reset")
    got, ending = raw_exchange(sim, VEHICLES)
    assert ending == "reset"
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    assert 0 < len(body) < length
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
        call(sim, "GET", VEHICLES)


def test_fault_malformed_is_a_200_that_is_not_json(sim: tuple[str, int]) -> None:
    configure(sim, "promotions", latency=ZERO, fault="malformed")
    reply = call(sim, "GET", PROMOTIONS)
    assert reply.status == 200 and reply.body
    with pytest.raises(ValueError):
        json.loads(reply.body)


def test_fault_close_answers_nothing(sim: tuple[str, int]) -> None:
    configure(sim, "routing", latency=ZERO, fault="close")
    assert raw_exchange(sim, ROUTING) == (b"", "eof")
    with pytest.raises(http.client.RemoteDisconnected):
        call(sim, "GET", ROUTING)


def test_fault_trickle_sends_the_body_byte_by_byte(sim: tuple[str, int]) -> None:
    configure(sim, "routing", latency=ZERO, fault="trickle", trickle_ms=5)
    reply = call(sim, "GET", ROUTING)
    assert reply.status == 200
    body = reply.json()
    assert body["mode"] == "bike"
    assert reply.elapsed_s >= (len(reply.body) - 1) * 0.005


def test_fault_hang_never_answers(sim: tuple[str, int]) -> None:
    configure(sim, "vehicles", latency=ZERO, fault="hang")
    assert raw_exchange(sim, VEHICLES, timeout_s=0.5) == (b"", "timeout")


# --- the control API ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/_control/upstreams/payments", {"fault": "reset"}, 404),
        ("/_control/upstreams/vehicles", b"{oops", 400),
        ("/_control/upstreams/vehicles", {"latency": {"dist": "zipf"}}, 422),
        ("/_control/upstreams/vehicles", {"error_rate": 7}, 422),
    ],
)
def test_control_validation_errors_are_problems(
    sim: tuple[str, int], path: str, body: Any, status: int
) -> None:
    reply = call(sim, "PUT", path, body)
    assert reply.status == status
    assert reply.content_type == "application/problem+json"
    doc = reply.json()
    assert doc["status"] == status and doc["title"] and doc["detail"]
    if status == 422:
        assert doc["field"] in doc["detail"]


def test_reset_restores_the_start_settings(sim: tuple[str, int]) -> None:
    start = call(sim, "GET", "/_control/upstreams").json()
    configure(sim, "promotions", fault="hang", error_rate=0.5)
    assert call(sim, "GET", "/_control/upstreams").json() != start
    assert call(sim, "POST", "/_control/reset").json() == start


# --- the command line --------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        simulator_argv(*args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
    )


def test_cli_refuses_non_loopback_bind() -> None:
    result = run_cli("--bind", "0.0.0.0:8200")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "loopback" in result.stderr


def test_cli_port_in_use(sim: tuple[str, int]) -> None:
    result = run_cli("--bind", f"127.0.0.1:{sim[1]}")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "already in use" in result.stderr


def test_cli_bad_config_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "sim.toml"
    config.write_text('[upstreams.routing]\nlatency = { dist = "longtail", tail_p = 3 }\n')
    result = run_cli("--bind", f"127.0.0.1:{free_port()}", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "upstreams.routing.latency.tail_p" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_sigterm_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    argv = simulator_argv("--bind", f"127.0.0.1:{port}", "--config", "simulator.toml")
    proc = Proc("simulator", argv, tmp_path / "sim.log", cwd=REPO_ROOT).start()
    try:
        proc.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 20.0, "serving")
        # an open connection with a pending (hung) request must not hold up the exit
        hung = socket.create_connection(("127.0.0.1", port))
        call(("127.0.0.1", port), "PUT", "/_control/upstreams/vehicles", {"fault": "hang"})
        hung.sendall(f"GET {VEHICLES} HTTP/1.1\r\nHost: sim\r\n\r\n".encode())
        proc.signal(signal.SIGTERM)
        assert proc.popen is not None
        assert proc.popen.wait(timeout=10) == 0
        hung.close()
        log = proc.log_tail()
        assert f"simulator listening on http://127.0.0.1:{port}" in log
        assert "Traceback" not in log
    finally:
        proc.stop()
