"""A failing hook is logged, but not once per request."""

from __future__ import annotations

import logging

import pytest

from tracing.timing import hook_errors


def test_logs_once_per_interval_per_hook(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tracing"):
        for _ in range(100):
            hook_errors.swallow("socket wait accounting", RuntimeError("boom"))
        hook_errors.swallow("switch tracer", RuntimeError("bang"))
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "socket wait accounting" in messages[0]
    assert caplog.records[0].exc_info is not None
