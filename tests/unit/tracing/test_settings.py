"""Tracing switches from the environment: PRICING_TRACING, the OTLP endpoint, the span file."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.contract import OTLP_ENDPOINT_ENV, SPAN_FILE_ENV, TRACING_ENV
from tracing.export import make_exporter
from tracing.settings import (
    BSP_EXPORT_TIMEOUT_ENV,
    BSP_MAX_EXPORT_BATCH_SIZE_ENV,
    BSP_MAX_QUEUE_SIZE_ENV,
    BSP_SCHEDULE_DELAY_ENV,
    DEFAULT_SPAN_FILE,
    OTLP_PROTOCOL_ENV,
    OTLP_TRACES_ENDPOINT_ENV,
    OTLP_TRACES_PROTOCOL_ENV,
    SAMPLER_ARG_ENV,
    SAMPLER_ENV,
    SDK_DISABLED_ENV,
    TRACES_EXPORTER_ENV,
    BatchSettings,
    Exporter,
    Mode,
    Protocol,
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
        TRACES_EXPORTER_ENV,
        OTLP_PROTOCOL_ENV,
        OTLP_TRACES_PROTOCOL_ENV,
        BSP_SCHEDULE_DELAY_ENV,
        BSP_EXPORT_TIMEOUT_ENV,
        BSP_MAX_QUEUE_SIZE_ENV,
        BSP_MAX_EXPORT_BATCH_SIZE_ENV,
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


# --- OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_BSP_* ------------------------


@pytest.mark.parametrize(
    ("env", "exporter", "endpoint"),
    [
        ({}, Exporter.FILE, None),
        (
            {OTLP_ENDPOINT_ENV: "http://127.0.0.1:4318"},
            Exporter.OTLP,
            "http://127.0.0.1:4318/v1/traces",
        ),
        (
            {OTLP_ENDPOINT_ENV: "http://127.0.0.1:4317", OTLP_PROTOCOL_ENV: "grpc"},
            Exporter.OTLP,
            "http://127.0.0.1:4317",  # gRPC takes the base as is
        ),
        ({TRACES_EXPORTER_ENV: "otlp"}, Exporter.OTLP, None),  # the exporter's default
        ({TRACES_EXPORTER_ENV: "Console"}, Exporter.CONSOLE, None),
        ({TRACES_EXPORTER_ENV: "none", OTLP_ENDPOINT_ENV: "http://x:4318"}, Exporter.NONE, None),
    ],
)
def test_the_exporter_follows_otel_traces_exporter_then_the_endpoint(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], exporter: Exporter, endpoint: str | None
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = TracingSettings.from_env()
    assert settings.traces_exporter is exporter
    if exporter is Exporter.OTLP:
        assert settings.otlp_endpoint == endpoint


def test_each_exporter_is_the_sdks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    def made(**env: str) -> object:
        for name in (TRACES_EXPORTER_ENV, OTLP_PROTOCOL_ENV, OTLP_ENDPOINT_ENV):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return make_exporter(TracingSettings.from_env())

    endpoint = {OTLP_ENDPOINT_ENV: "http://127.0.0.1:9"}
    assert isinstance(made(**endpoint), HttpExporter)
    assert isinstance(made(**endpoint, **{OTLP_PROTOCOL_ENV: "http/protobuf"}), HttpExporter)
    # Fed protobuf written straight from the queue's records (tracing.otlp_protobuf).
    assert made(**endpoint).takes_records  # type: ignore[attr-defined]
    grpc = made(**endpoint, **{OTLP_PROTOCOL_ENV: "grpc"})
    assert isinstance(grpc, GrpcExporter)
    assert grpc.takes_records  # type: ignore[attr-defined]
    grpc.shutdown()  # type: ignore[attr-defined]
    assert isinstance(made(**{TRACES_EXPORTER_ENV: "console"}), ConsoleSpanExporter)
    assert made(**{TRACES_EXPORTER_ENV: "none"}) is None


def test_the_traces_protocol_wins_over_the_general_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTLP_PROTOCOL_ENV, "http/protobuf")
    monkeypatch.setenv(OTLP_TRACES_PROTOCOL_ENV, "grpc")
    assert TracingSettings.from_env().protocol is Protocol.GRPC


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        (TRACES_EXPORTER_ENV, "zipkin", "use one of otlp, console, none"),
        (OTLP_PROTOCOL_ENV, "http/json", "no http/json exporter"),
        (BSP_MAX_QUEUE_SIZE_ENV, "-1", "a positive whole number"),
        (BSP_SCHEDULE_DELAY_ENV, "soon", "a positive whole number"),
        (BSP_MAX_EXPORT_BATCH_SIZE_ENV, "99999", "larger than OTEL_BSP_MAX_QUEUE_SIZE"),
    ],
)
def test_a_value_that_cannot_work_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str, says: str
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=name) as caught:
        TracingSettings.from_env()
    assert says in str(caught.value)


def test_the_span_processor_limits_follow_otel_bsp(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TracingSettings.from_env().batch == BatchSettings()
    monkeypatch.setenv(BSP_SCHEDULE_DELAY_ENV, "2000")
    monkeypatch.setenv(BSP_EXPORT_TIMEOUT_ENV, "1500")
    monkeypatch.setenv(BSP_MAX_QUEUE_SIZE_ENV, "64")
    monkeypatch.setenv(BSP_MAX_EXPORT_BATCH_SIZE_ENV, "8")
    assert TracingSettings.from_env().batch == BatchSettings(
        schedule_delay_s=2.0, max_queue_size=64, max_export_batch_size=8, export_timeout_s=1.5
    )
