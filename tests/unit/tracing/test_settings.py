"""Tracing switches from the environment: PRICING_TRACING, the OTLP endpoint, the span file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracing.settings import (
    DEFAULT_SPAN_FILE,
    OTLP_ENDPOINT_ENV,
    OTLP_TRACES_ENDPOINT_ENV,
    SAMPLER_ARG_ENV,
    SAMPLER_ENV,
    SDK_DISABLED_ENV,
    SPAN_FILE_ENV,
    TRACING_ENV,
    Mode,
    TracingSettings,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        TRACING_ENV,
        OTLP_ENDPOINT_ENV,
        OTLP_TRACES_ENDPOINT_ENV,
        SPAN_FILE_ENV,
        SAMPLER_ENV,
        SAMPLER_ARG_ENV,
        SDK_DISABLED_ENV,
    ):
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
    monkeypatch.setenv(OTLP_ENDPOINT_ENV, "http://127.0.0.1:4318/")
    monkeypatch.setenv(SPAN_FILE_ENV, str(tmp_path / "s.jsonl"))
    settings = TracingSettings.from_env()
    assert settings.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert settings.span_file == tmp_path / "s.jsonl"


def test_empty_endpoint_and_span_file_mean_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTLP_ENDPOINT_ENV, "")
    monkeypatch.setenv(OTLP_TRACES_ENDPOINT_ENV, "")
    monkeypatch.setenv(SPAN_FILE_ENV, "")
    settings = TracingSettings.from_env()
    assert settings.otlp_endpoint is None
    assert settings.span_file == DEFAULT_SPAN_FILE


def test_the_traces_endpoint_is_used_as_is_and_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTLP_ENDPOINT_ENV, "http://127.0.0.1:4318")
    monkeypatch.setenv(OTLP_TRACES_ENDPOINT_ENV, "http://collector:4318/custom/traces")
    assert TracingSettings.from_env().otlp_endpoint == "http://collector:4318/custom/traces"


def test_otel_sdk_disabled_turns_tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SDK_DISABLED_ENV, "TRUE")
    assert TracingSettings.from_env().mode is Mode.OFF


@pytest.mark.parametrize(
    "name", ["parentbased_always_on", "parentbased_always_off", "PARENTBASED_TRACEIDRATIO"]
)
def test_parent_based_samplers_are_taken(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(SAMPLER_ENV, name)
    monkeypatch.setenv(SAMPLER_ARG_ENV, "0.25")
    assert TracingSettings.from_env().sampler == name.lower()


@pytest.mark.parametrize(
    ("sampler", "arg", "says"),
    [
        ("always_on", "", "use parentbased_always_on"),
        ("traceidratio", "0.5", "ignores the sampling decision Envoy makes"),
        ("bogus", "", "use one of parentbased_always_on"),
        ("parentbased_traceidratio", "", "a ratio from 0 to 1"),
        ("parentbased_traceidratio", "1.5", "a ratio from 0 to 1"),
    ],
)
def test_samplers_that_cannot_work_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, sampler: str, arg: str, says: str
) -> None:
    monkeypatch.setenv(SAMPLER_ENV, sampler)
    monkeypatch.setenv(SAMPLER_ARG_ENV, arg)
    with pytest.raises(ValueError, match=says) as info:
        TracingSettings.from_env()
    assert "\n" not in str(info.value)
