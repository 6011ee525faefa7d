"""stack.jaeger: where the built binary is looked for, and the config it is given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from stack import jaeger
from stack.jaeger import JaegerPorts


def test_no_binary_in_an_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRICING_CACHE_DIR", str(tmp_path))
    assert jaeger.binary_path() == tmp_path / "jaeger" / jaeger.JAEGER_VERSION / "jaeger"
    assert jaeger.cached_binary() is None
    jaeger.binary_path().parent.mkdir(parents=True)
    jaeger.binary_path().write_text("#!/bin/sh\n")
    assert jaeger.cached_binary() is None  # not executable: not a finished build
    os.chmod(jaeger.binary_path(), 0o755)
    assert jaeger.cached_binary() == jaeger.binary_path()


def test_config_listens_only_where_it_is_told() -> None:
    doc = yaml.safe_load(jaeger.config_yaml(1, 2, 3, 4, host="127.0.0.1"))
    otlp = doc["receivers"]["otlp"]["protocols"]
    assert otlp == {"grpc": {"endpoint": "127.0.0.1:1"}, "http": {"endpoint": "127.0.0.1:2"}}
    query = doc["extensions"]["jaeger_query"]
    assert (query["http"], query["grpc"]) == (
        {"endpoint": "127.0.0.1:3"},
        {"endpoint": "127.0.0.1:4"},
    )
    assert query["enable_tracing"] is False
    assert doc["service"]["telemetry"]["metrics"] == {"level": "none"}


def test_free_ports_are_distinct_and_urls_follow_them() -> None:
    ports = JaegerPorts.free()
    assert len({ports.otlp_grpc, ports.otlp_http, ports.query_http, ports.query_grpc}) == 4
    assert ports.query_url == f"http://127.0.0.1:{ports.query_http}"
    assert ports.otlp_http_url == f"http://127.0.0.1:{ports.otlp_http}"
    assert JaegerPorts.defaults().otlp_http == 4318


def test_command_points_at_the_config(tmp_path: Path) -> None:
    assert jaeger.command(Path("/bin/jaeger"), tmp_path / "j.yaml") == [
        "/bin/jaeger",
        "--config",
        str(tmp_path / "j.yaml"),
    ]
