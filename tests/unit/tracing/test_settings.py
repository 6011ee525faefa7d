"""Tracing switches from the environment: PRICING_TRACING, the OTLP endpoint, the span file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracing.settings import (
    DEFAULT_SPAN_FILE,
    OTLP_ENDPOINT_ENV,
    SPAN_FILE_ENV,
    TRACING_ENV,
    Mode,
    TracingSettings,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (TRACING_ENV, OTLP_ENDPOINT_ENV, SPAN_FILE_ENV):
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_full_tracing_into_the_default_span_file() -> None:
    settings = TracingSettings.from_env()
    assert settings == TracingSettings(
        mode=Mode.FULL, otlp_endpoint=None, span_file=DEFAULT_SPAN_FILE
    )
    assert DEFAULT_SPAN_FILE.name == "spans.jsonl"
    assert DEFAULT_SPAN_FILE.parent.name == ".run"


@pytest.mark.parametrize(
    ("raw", "mode"),
    [
        ("off", Mode.OFF),
        ("0", Mode.OFF),
        ("false", Mode.OFF),
        ("no", Mode.OFF),
        ("on", Mode.FULL),
        ("1", Mode.FULL),
        ("true", Mode.FULL),
        ("full", Mode.FULL),
        ("spans", Mode.SPANS),
        ("  SPANS \n", Mode.SPANS),
        ("Off", Mode.OFF),
        ("TRUE", Mode.FULL),
    ],
)
def test_modes_and_aliases(monkeypatch: pytest.MonkeyPatch, raw: str, mode: Mode) -> None:
    monkeypatch.setenv(TRACING_ENV, raw)
    assert TracingSettings.from_env().mode is mode


@pytest.mark.parametrize("raw", ["bogus", "yes please", "2", "enabled"])
def test_junk_is_rejected_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(TRACING_ENV, raw)
    with pytest.raises(ValueError, match=TRACING_ENV) as info:
        TracingSettings.from_env()
    message = str(info.value)
    assert repr(raw.strip().lower()) in message
    assert "off, spans, full" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_otlp_endpoint_and_span_file_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(OTLP_ENDPOINT_ENV, "http://127.0.0.1:4318")
    monkeypatch.setenv(SPAN_FILE_ENV, str(tmp_path / "s.jsonl"))
    settings = TracingSettings.from_env()
    assert settings.otlp_endpoint == "http://127.0.0.1:4318"
    assert settings.span_file == tmp_path / "s.jsonl"


def test_empty_endpoint_and_span_file_mean_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTLP_ENDPOINT_ENV, "")
    monkeypatch.setenv(SPAN_FILE_ENV, "")
    settings = TracingSettings.from_env()
    assert settings.otlp_endpoint is None
    assert settings.span_file == DEFAULT_SPAN_FILE
