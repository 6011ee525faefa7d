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
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack import jaeger
from stack.procfs import tcp_sockets
from stack.procs import Proc
from tests.integration.support import jaeger_api
from toolkit.fetch import fetch
from toolkit.wait import wait_for

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


@pytest.mark.integration
def test_span_sent_over_otlp_http_comes_back_from_query_api(tmp_path: Path) -> None:
    binary = _jaeger_binary()
    # Free ports, not the defaults: a developer's Jaeger may already hold 4317/16686.
    ports = jaeger.JaegerPorts.free()
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

    span = _otlp_json_span(trace_id, span_id, test_id)
    sent = fetch(f"{ports.otlp_http_url}/v1/traces", method="POST", body=span, timeout_s=5)
    assert sent.status == 200

    traces: list[dict[str, Any]] = wait_for(
        lambda: jaeger_api.v1(ports.query_url, "/api/traces", service=SERVICE, limit=20) or [],
        10,
        0.1,
    )
    assert traces, f"span not found in Jaeger after 10 s; log:\n{proc.log_tail()}"

    assert SERVICE in jaeger_api.v1(ports.query_url, "/api/services")
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
    listening = {
        (ip, port) for ip, port, _, _, state in tcp_sockets([proc.pid]) if state == "LISTEN"
    }
    assert listening == expected


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


# --- the web UI (deploy/jaeger/build-ui.sh) -------------------------------------------

UI_SCRIPT = jaeger.UI_BUILD_SCRIPT


def _ui_pin(name: str) -> str:
    match = re.search(rf'^{name}="([^"]+)"$', UI_SCRIPT.read_text(), re.MULTILINE)
    assert match, f"build-ui.sh no longer pins {name} the expected way"
    return match.group(1)


def _run_ui_script(
    tmp_path: Path, path: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """build-ui.sh with its own cache root, so a developer's cached UI is not used."""
    full_env = {
        **os.environ,
        "PRICING_CACHE_DIR": str(tmp_path / "cache"),
        "JAEGER_VERSION": jaeger.JAEGER_VERSION,
        **env,
    }
    full_env.pop("JAEGER_UI_SOURCE", None)
    full_env.update({k: v for k, v in env.items() if k == "JAEGER_UI_SOURCE"})
    if path is not None:
        full_env["PATH"] = path
    return subprocess.run(
        ["/bin/bash", str(UI_SCRIPT)],
        capture_output=True,
        text=True,
        env=full_env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stdout == "", "nothing but a built UI's path goes to stdout"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_ui_is_pinned_to_the_release_of_our_jaeger() -> None:
    assert _ui_pin("JAEGER_UI_TAG") == jaeger.JAEGER_VERSION
    assert re.fullmatch(r"[0-9a-f]{40}", _ui_pin("JAEGER_UI_COMMIT"))
    assert re.fullmatch(r"[0-9a-f]{64}", _ui_pin("JAEGER_UI_TARBALL_SHA256"))


def test_without_node_the_ui_build_says_so_in_one_line(tmp_path: Path) -> None:
    result = _run_ui_script(tmp_path, path=str(tmp_path / "empty-bin"))
    assert result.returncode == jaeger.UI_UNAVAILABLE_EXIT
    line = _one_line(result)
    assert "Node.js and npm not found" in line and "API only" in line


def test_too_old_a_node_is_said_in_one_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("node", "echo v18.19.0"), ("npm", "echo 9.2.0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    result = _run_ui_script(tmp_path, path=f"{bin_dir}:/usr/bin:/bin")
    assert result.returncode == jaeger.UI_UNAVAILABLE_EXIT
    assert "Node.js v18.19.0 is too old" in _one_line(result)


def test_an_unreachable_clone_leaves_the_api_only(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("git") is None:
        pytest.skip("needs node and git on PATH to get as far as the clone")
    result = _run_ui_script(tmp_path, JAEGER_UI_REPO=str(tmp_path / "no-such-repo"))
    assert result.returncode == jaeger.UI_UNAVAILABLE_EXIT
    assert result.stdout == ""
    # (a progress line "cloning ..." comes first)
    line = result.stderr.strip().splitlines()[-1]
    assert "could not clone" in line and "JAEGER_UI_SOURCE" in line and "API only" in line


def test_a_tarball_with_the_wrong_checksum_is_refused(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("needs node on PATH to get as far as the source")
    fake = tmp_path / "jaeger-ui-v1.76.0.tar.gz"
    fake.write_bytes(b"not the release")
    result = _run_ui_script(tmp_path, JAEGER_UI_SOURCE=str(fake))
    assert result.returncode == 1
    assert "sha256" in result.stderr and _ui_pin("JAEGER_UI_TARBALL_SHA256") in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "cache" / "jaeger" / jaeger.JAEGER_VERSION / "ui").exists()


def test_a_source_directory_of_another_release_is_refused(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("needs node on PATH to get as far as the source")
    package = tmp_path / "src" / "packages" / "jaeger-ui" / "package.json"
    package.parent.mkdir(parents=True)
    package.write_text('{\n  "name": "jaeger-ui",\n  "version": "1.70.0"\n}\n')
    result = _run_ui_script(tmp_path, JAEGER_UI_SOURCE=str(tmp_path / "src"))
    assert result.returncode == 1
    assert "jaeger-ui '1.70.0', pinned 1.76.0" in result.stderr


def test_a_cached_ui_is_reused_until_the_pin_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ui = tmp_path / "cache" / "jaeger" / jaeger.JAEGER_VERSION / "ui"
    ui.mkdir(parents=True)
    (ui / "index.html").write_text("<html></html>")
    (ui / ".pin").write_text(f"{_ui_pin('JAEGER_UI_TAG')} {_ui_pin('JAEGER_UI_COMMIT')}\n")
    started = time.monotonic()
    result = _run_ui_script(tmp_path, path=str(tmp_path / "empty-bin"))  # no node needed
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{ui}\n"
    assert time.monotonic() - started < 2
    monkeypatch.setenv("PRICING_CACHE_DIR", str(tmp_path / "cache"))
    assert jaeger.cached_ui() == ui

    (ui / ".pin").write_text("v1.75.0 0000000000000000000000000000000000000000\n")
    assert jaeger.cached_ui() is None
    result = _run_ui_script(tmp_path, path=str(tmp_path / "empty-bin"))
    assert result.returncode == jaeger.UI_UNAVAILABLE_EXIT  # stale: a rebuild is due


def test_build_ui_tells_unavailable_from_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "build-ui.sh"
    monkeypatch.setattr(jaeger, "UI_BUILD_SCRIPT", script)
    script.write_text("echo 'jaeger-ui: no Node; API only' >&2; exit 2\n")
    with pytest.raises(jaeger.JaegerUIUnavailable, match="no Node; API only"):
        jaeger.build_ui()
    script.write_text("echo 'npm ERR! boom' >&2; exit 1\n")
    with pytest.raises(jaeger.JaegerBuildError, match="boom"):
        jaeger.build_ui()
    (tmp_path / "ui").mkdir()
    script.write_text(f"echo progress >&2; echo {tmp_path / 'ui'}\n")
    assert jaeger.build_ui() == tmp_path / "ui"


def test_config_serves_the_ui_only_when_given(tmp_path: Path) -> None:
    with_ui = jaeger.config_dict(1, 2, 3, 4, ui_assets=tmp_path)
    assert with_ui["extensions"]["jaeger_query"]["ui"] == {"assets_path": str(tmp_path)}
    assert "ui" not in jaeger.config_dict(1, 2, 3, 4)["extensions"]["jaeger_query"]


@pytest.mark.integration
def test_compose_runs_the_jaeger_release_we_build() -> None:
    """docker-compose users get the UI from the image: the same release as our binary
    (build.sh stamps the v2 release number into it, as Jaeger's own build does)."""
    binary = _jaeger_binary()
    compose_file = jaeger.REPO_ROOT / "deploy" / "compose" / "docker-compose.yml"
    compose = yaml.safe_load(compose_file.read_text())
    image = compose["services"]["jaeger"]["image"]
    version = subprocess.run(
        [str(binary), "version"], capture_output=True, text=True, timeout=30, check=True
    )
    built = json.loads(version.stdout.strip().splitlines()[-1])["gitVersion"]
    assert image == f"jaegertracing/jaeger:{built.removeprefix('v')}", (image, built)
