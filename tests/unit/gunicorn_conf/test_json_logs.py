"""gunicorn's access log as JSON lines: written directly when the handlers allow it,
through logging otherwise, the same line either way; PRICING_ACCESS_LOG=off."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn.config import Config

from gunicorn_conf import common
from gunicorn_conf.json_logs import JsonLogger
from tracing.logs import ENVIRON_KEY, RequestIds

IDS = RequestIds("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "GET /v1/offers/bike")
ENVIRON = {
    "REQUEST_METHOD": "GET",
    "PATH_INFO": "/v1/offers/bike",
    "HTTP_X_REQUEST_ID": "req-1",
    ENVIRON_KEY: IDS,
}


@pytest.fixture
def access_file(tmp_path: Path) -> Iterator[tuple[JsonLogger, Path]]:
    path = tmp_path / "access.log"
    cfg = Config()
    cfg.set("accesslog", str(path))
    cfg.set("errorlog", str(tmp_path / "error.log"))
    logger = JsonLogger(cfg)
    try:
        yield logger, path
    finally:
        for log in (logger.access_log, logger.error_log):
            for handler in list(log.handlers):
                handler.close()
                log.removeHandler(handler)
            log.filters.clear()
        root = logging.getLogger()
        for handler in list(root.handlers):
            if getattr(handler, "_pricing_json", False):
                root.removeHandler(handler)


def access(logger: JsonLogger, status: int = 503) -> None:
    resp = SimpleNamespace(status_code=status)
    logger.access(resp, None, ENVIRON, datetime.timedelta(seconds=0.25))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_access_line_is_written_directly_to_gunicorns_file(
    access_file: tuple[JsonLogger, Path],
) -> None:
    logger, path = access_file
    assert logger.direct_access is not None  # gunicorn's own file handler: direct
    access(logger)
    (line,) = lines(path)
    assert line["logger"] == "gunicorn.access" and line["severity_text"] == "INFO"
    assert line["severity_number"] == 9 and line["service.name"]
    assert line["body"] == "GET /v1/offers/bike 503"
    assert (line["trace_id"], line["span_id"]) == (IDS.trace_id, IDS.span_id)
    assert line["trace_flags"] == "00"  # not sampled
    assert line["http.route"] == "/v1/offers/bike" and line["url.path"] == "/v1/offers/bike"
    assert line["http.request.method"] == "GET"
    assert line["http.response.status_code"] == 503
    assert line["duration_ms"] == 250.0 and line["request_id"] == "req-1"
    assert None not in line.values()


def test_the_access_line_has_envoys_field_names() -> None:
    """Both access lines carry a request under the same names (routing.logfields)."""
    from routing.envoy import ACCESS_LOG_JSON

    request_fields = {
        "timestamp",
        "severity_text",
        "severity_number",
        "body",
        "logger",
        "service.name",
        "trace_id",
        "request_id",
        "pool",
        "http.request.method",
        "url.path",
        "http.response.status_code",
        "duration_ms",
    }
    assert request_fields <= set(ACCESS_LOG_JSON)


def test_a_line_outside_a_request_has_no_null_fields(
    access_file: tuple[JsonLogger, Path],
) -> None:
    logger, _ = access_file
    line = json.loads(logger.formatter.line(0.0, "WARNING", "x", "hello", 1, None))
    assert line["severity_number"] == 13 and line["timestamp"] == "1970-01-01T00:00:00.000Z"
    assert "trace_id" not in line and None not in line.values()


def test_with_a_filter_the_line_goes_through_logging_and_reads_the_same(
    access_file: tuple[JsonLogger, Path],
) -> None:
    logger, path = access_file
    access(logger)
    dropped: list[str] = []

    def keep_all_but_note(record: logging.LogRecord) -> bool:
        dropped.append(record.getMessage())
        return True

    logger.access_log.addFilter(keep_all_but_note)
    logger.setup(logger.cfg)  # the handlers are chosen at set-up
    assert logger.direct_access is None
    access(logger)
    assert dropped == ["GET /v1/offers/bike 503"]
    direct, via_logging = lines(path)
    for line in (direct, via_logging):
        del line["timestamp"]
    assert direct == via_logging


def test_pricing_access_log_off_turns_the_line_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRICING_ACCESS_LOG", "off")
    assert common.settings_for("io")["accesslog"] is None
    monkeypatch.setenv("PRICING_ACCESS_LOG", "on")
    assert common.settings_for("io")["accesslog"] == "-"
    monkeypatch.setenv("PRICING_ACCESS_LOG", "no")
    with pytest.raises(SystemExit, match="PRICING_ACCESS_LOG must be on or off"):
        common.settings_for("io")
