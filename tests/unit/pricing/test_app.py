"""The Flask app class the pools serve."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from flask import Flask

from pricing import PricingApp


def test_ensure_sync_is_asked_once_per_function_and_every_time_for_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[Any] = []
    flask_ensure_sync = Flask.ensure_sync

    def counting(self: Flask, func: Any) -> Any:
        asked.append(func)
        return flask_ensure_sync(self, func)

    monkeypatch.setattr(Flask, "ensure_sync", counting)
    app = PricingApp(__name__)

    def hook() -> str:
        return "ran"

    assert app.ensure_sync(hook)() == "ran"
    assert app.ensure_sync(hook)() == "ran"
    assert asked == [hook]  # remembered
    partial = functools.partial(hook)
    app.ensure_sync(partial)
    app.ensure_sync(partial)
    assert asked == [hook, partial, partial]  # not a plain function: asked each time
    assert len(app._sync) == 1


def test_the_pools_apps_are_pricing_apps(io_client: Any) -> None:
    assert isinstance(io_client.application, PricingApp)
    assert io_client.get("/healthz").status_code == 200
