"""The Jaeger binary we build from its Go module takes OTLP and serves it back.

The first run builds Jaeger (~4-5 min cold, see deploy/jaeger/build.sh); later
runs reuse the cached binary. A missing Go toolchain is a FAILURE, not a skip:
without Jaeger the tracing part of the project is untested.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from stack import jaeger
from stack.procs import Proc, free_port

SERVICE = "pricing-jaeger-selftest"
OPERATION = "GET /quote"


def _jaeger_binary() -> Path:
    """Build or reuse the binary. Called in the test body, not a fixture, so that a
    failed build (e.g. no Go) is reported as a test FAILURE rather than a setup error."""
    try:
        return jaeger.build()
    except jaeger.JaegerBuildError as exc:
        error = str(exc)
    pytest.fail(f"could not build Jaeger {jaeger.JAEGER_VERSION}: {error}", pytrace=False)


def _otlp_json_span(trace_id: str, span_id: str, test_id: str) -> dict[str, Any]:
    now_ns = time.time_ns()
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": SERVICE}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "test_jaeger_build"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "name": OPERATION,
                                "kind": 2,  # SERVER
                                "startTimeUnixNano": str(now_ns - 5_000_000),
                                "endTimeUnixNano": str(now_ns),
                                "attributes": [
                                    {"key": "pricing.test_id", "value": {"stringValue": test_id}},
                                    {
                                        "key": "http.response.status_code",
                                        "value": {"intValue": "200"},
                                    },
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def _listening_tcp(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets in LISTEN state that pid holds (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found: set[tuple[str, int]] = set()
    for table, is_v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            if is_v6:
                addr = "::" if int(hex_addr, 16) == 0 else f"v6:{hex_addr}"
            else:
                addr = ".".join(str(b) for b in reversed(bytes.fromhex(hex_addr)))
            found.add((addr, int(hex_port, 16)))
    return found


@pytest.mark.integration
def test_span_sent_over_otlp_http_comes_back_from_query_api(tmp_path: Path) -> None:
    binary = _jaeger_binary()
    # Free ports, not the defaults: a developer's Jaeger may already hold 4317/16686.
    ports = jaeger.JaegerPorts(free_port(), free_port(), free_port(), free_port())
    proc, ports = jaeger.start(tmp_path, binary=binary, ports=ports)
    try:
        _check_round_trip(proc, ports)
    finally:
        proc.stop()


def _check_round_trip(proc: Proc, ports: jaeger.JaegerPorts) -> None:
    # Jaeger's v1 API prints trace IDs without leading zeros: keep the first nibble non-zero.
    trace_id = "f" + secrets.token_hex(16)[1:]
    span_id = secrets.token_hex(8)
    test_id = secrets.token_hex(6)

    request = urllib.request.Request(
        f"{ports.otlp_http_url}/v1/traces",
        data=json.dumps(_otlp_json_span(trace_id, span_id, test_id)).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 200

    traces: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not traces:
        traces = _get_json(f"{ports.query_url}/api/traces?service={SERVICE}&limit=20")["data"] or []
        if not traces:
            time.sleep(0.1)
    assert traces, f"span not found in Jaeger after 10 s; log:\n{proc.log_tail()}"

    assert SERVICE in _get_json(f"{ports.query_url}/api/services")["data"]
    (trace,) = traces
    assert trace["traceID"] == trace_id
    (span,) = trace["spans"]
    assert span["spanID"] == span_id
    assert span["operationName"] == OPERATION
    assert trace["processes"][span["processID"]]["serviceName"] == SERVICE
    tags = {tag["key"]: tag["value"] for tag in span["tags"]}
    assert tags["pricing.test_id"] == test_id
    assert tags["http.response.status_code"] == 200

    # Only the four configured ports, and only on loopback.
    expected = {
        ("127.0.0.1", p)
        for p in (ports.otlp_grpc, ports.otlp_http, ports.query_http, ports.query_grpc)
    }
    assert _listening_tcp(proc.pid) == expected


def test_build_script_pins_the_same_version() -> None:
    script = jaeger.BUILD_SCRIPT.read_text()
    match = re.search(r'JAEGER_VERSION="\$\{JAEGER_VERSION:-(v[0-9.]+)\}"', script)
    assert match, "build.sh no longer pins JAEGER_VERSION the expected way"
    assert match.group(1) == jaeger.JAEGER_VERSION


def test_checked_in_compose_config_is_the_generated_one() -> None:
    """deploy/jaeger/config.yaml (used by docker-compose) = config_yaml() on default ports."""
    p = jaeger.JaegerPorts.defaults()
    generated = jaeger.config_yaml(p.otlp_grpc, p.otlp_http, p.query_http, p.query_grpc)
    checked_in = (jaeger.REPO_ROOT / "deploy" / "jaeger" / "config.yaml").read_text()
    assert checked_in.split("\n\n", 1)[1] == generated, (
        "deploy/jaeger/config.yaml is stale; regenerate with "
        "python -m stack.jaeger config > deploy/jaeger/config.yaml"
    )
