"""The contrib Flask instrumentation's settings, honoured by the pools' server span: the
same requests, under the same environment, go to a tiny Flask app instrumented by the
contrib itself (opentelemetry-instrumentation-flask, in-memory exporter) and to the same
app instrumented by the project; both must export the same spans with the same HTTP
attributes, for a span started live and for one built when its request ends."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

import tracing.server
from tracing.flask_tracing import FlaskTracing
from tracing.readback.spans import from_file
from tracing.settings import (
    CAPTURE_REQUEST_HEADERS_ENV,
    CAPTURE_RESPONSE_HEADERS_ENV,
    EXCLUDED_URLS_ENV,
    FLASK_EXCLUDED_URLS_ENV,
    SANITIZE_HEADERS_ENV,
    SEMCONV_OPT_IN_ENV,
    Mode,
    Semconv,
    ServerSpanSettings,
    TracingSettings,
)

flask_instrumentation = pytest.importorskip("opentelemetry.instrumentation.flask")

SETTINGS_ENV = (
    FLASK_EXCLUDED_URLS_ENV,
    EXCLUDED_URLS_ENV,
    CAPTURE_REQUEST_HEADERS_ENV,
    CAPTURE_RESPONSE_HEADERS_ENV,
    SANITIZE_HEADERS_ENV,
    SEMCONV_OPT_IN_ENV,
)
PATHS = ("/v1/offers/bike?region=sf", "/v1/offers/scooter", "/status/ready")
HEADERS = {
    "User-Agent": "probe/1",
    "X-Custom-One": "v1",
    "X-Custom-Secret": "s3cret",
    "X-Other": "not captured",
}
SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# The project's own attributes (its measurements); everything else is compared.
OWN = ("gevent.", "pricing.")


def tiny_app() -> Flask:
    app = Flask(__name__)
    for path in ("/v1/offers/bike", "/v1/offers/scooter", "/status/ready"):
        app.add_url_rule(
            path, path, lambda: ({"ok": True}, 200, {"X-Resp": "r1", "X-Session-Id": "sid"})
        )
    return app


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    tracing.server.shutdown_worker()
    yield
    tracing.server.shutdown_worker()
    _reset_contrib_semconv()


def _reset_contrib_semconv() -> None:
    """The contrib reads OTEL_SEMCONV_STABILITY_OPT_IN once per process: read it again."""
    from opentelemetry.instrumentation._semconv import (
        _OpenTelemetrySemanticConventionStability as Stability,
    )

    Stability._initialized = False


def _plain(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}


def contrib_spans(
    monkeypatch: pytest.MonkeyPatch, headers: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """url.path or route -> attributes of the contrib's server spans for PATHS."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util.http import get_excluded_urls

    _reset_contrib_semconv()
    # Read at the contrib's import; read again under this test's environment.
    monkeypatch.setattr(
        flask_instrumentation, "_excluded_urls_from_env", get_excluded_urls("FLASK")
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = tiny_app()
    flask_instrumentation.FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    try:
        client = app.test_client()
        for path in PATHS:
            assert client.get(path, headers=dict(headers)).status_code == 200
    finally:
        flask_instrumentation.FlaskInstrumentor().uninstrument_app(app)
    return {s.name: _plain(s.attributes or {}) for s in exporter.get_finished_spans()}


def project_spans(tmp_path: Path, headers: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The same for the project's server spans (their own attributes left out)."""
    span_file = tmp_path / "spans.jsonl"
    span_file.unlink(missing_ok=True)
    settings = TracingSettings(
        mode=Mode.FULL,
        otlp_endpoint=None,
        span_file=span_file,
        server=ServerSpanSettings.from_env(),
    )
    worker = tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=1.0))
    assert worker is not None
    try:
        app = tiny_app()
        FlaskTracing(worker).instrument(app)
        client = app.test_client()
        for path in PATHS:
            assert client.get(path, headers=dict(headers)).status_code == 200
        assert worker.processor.force_flush(5000)
    finally:
        tracing.server.shutdown_worker()
    spans = from_file(span_file) if span_file.exists() else []
    return {
        s.name: {k: v for k, v in s.attributes.items() if not k.startswith(OWN)}
        for s in spans
        if s.kind == "server"
    }


# Built when the request ends (a sampled traceparent), and started live (none).
WAYS = pytest.mark.parametrize("incoming", [{"traceparent": SAMPLED}, {}], ids=["built", "live"])


@WAYS
@pytest.mark.parametrize(
    "env",
    [
        {EXCLUDED_URLS_ENV: "scooter,/status/"},
        {FLASK_EXCLUDED_URLS_ENV: "bike", EXCLUDED_URLS_ENV: "scooter"},
        {FLASK_EXCLUDED_URLS_ENV: "", EXCLUDED_URLS_ENV: "scooter"},
        {EXCLUDED_URLS_ENV: r"region=sf"},  # the full URL, query included
    ],
    ids=["generic", "flask-wins", "flask-empty-wins", "query"],
)
def test_the_same_urls_are_excluded(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: dict[str, str],
    incoming: dict[str, str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    headers = {**HEADERS, **incoming}
    ours = project_spans(tmp_path, headers)
    assert set(ours) == set(contrib_spans(monkeypatch, headers))
    assert 0 < len(ours) < len(PATHS) or env.get(FLASK_EXCLUDED_URLS_ENV) == ""


@WAYS
@pytest.mark.parametrize("opt_in", ["http", "http/dup", "database,http/dup,http"])
def test_the_same_attributes_under_the_semconv_opt_in_and_captured_headers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, opt_in: str, incoming: dict[str, str]
) -> None:
    monkeypatch.setenv(SEMCONV_OPT_IN_ENV, opt_in)
    monkeypatch.setenv(CAPTURE_REQUEST_HEADERS_ENV, "x-custom-.*, User-Agent")
    monkeypatch.setenv(CAPTURE_RESPONSE_HEADERS_ENV, "content-type,X-RESP,x-session-id")
    monkeypatch.setenv(SANITIZE_HEADERS_ENV, "secret,session")
    headers = {**HEADERS, **incoming}
    ours = project_spans(tmp_path, headers)
    theirs = contrib_spans(monkeypatch, headers)
    assert set(ours) == set(theirs) and len(ours) == len(PATHS)
    for name, attrs in theirs.items():
        assert ours[name] == attrs, name
    bike = ours["GET /v1/offers/bike"]
    assert bike["http.request.header.x_custom_secret"] == ["[REDACTED]"]
    assert bike["http.response.header.x_session_id"] == ["[REDACTED]"]
    assert "http.request.header.x_other" not in bike
    assert ("http.method" in bike) is ("http/dup" in opt_in)  # dup: the old names too


def test_without_the_opt_in_the_project_keeps_its_stable_names_and_captures_alike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The one documented difference: unset, the contrib emits the old names alone."""
    monkeypatch.setenv(CAPTURE_REQUEST_HEADERS_ENV, "x-custom-one")
    monkeypatch.setenv(CAPTURE_RESPONSE_HEADERS_ENV, "x-resp")
    ours = project_spans(tmp_path, HEADERS)["GET /v1/offers/bike"]
    theirs = contrib_spans(monkeypatch, HEADERS)["GET /v1/offers/bike"]
    captured = {k: v for k, v in theirs.items() if ".header." in k}
    assert captured == {k: v for k, v in ours.items() if ".header." in k}
    assert captured  # both captured something
    assert "http.request.method" in ours and "http.method" not in ours
    assert "http.method" in theirs and "http.request.method" not in theirs


def test_settings_are_read_once_and_a_bad_pattern_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ServerSpanSettings.from_env() == ServerSpanSettings()  # nothing set: no cost
    monkeypatch.setenv(SEMCONV_OPT_IN_ENV, "database")
    assert ServerSpanSettings.from_env().semconv is Semconv.PROJECT
    monkeypatch.setenv(CAPTURE_REQUEST_HEADERS_ENV, "x-(")
    with pytest.raises(ValueError, match=CAPTURE_REQUEST_HEADERS_ENV):
        ServerSpanSettings.from_env()


@pytest.mark.parametrize(("excluded", "exported"), [("bike", 0), ("scooter", 1)])
def test_an_excluded_url_is_not_exported_as_slow_either(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, excluded: str, exported: int
) -> None:
    """No contrib equivalent: a slow request Envoy did not sample is exported from what
    was measured, unless its URL is excluded."""
    monkeypatch.setenv(EXCLUDED_URLS_ENV, excluded)
    span_file = tmp_path / "spans.jsonl"
    settings = TracingSettings(
        mode=Mode.FULL,
        otlp_endpoint=None,
        span_file=span_file,
        server=ServerSpanSettings.from_env(),
    )
    sampling = tracing.server.Sampling(ratio=0.0, slow_s={"GET /v1/offers/bike": 0.0})
    worker = tracing.server.setup_worker("io", settings, sampling)
    assert worker is not None
    app = tiny_app()
    FlaskTracing(worker).instrument(app)
    unsampled = SAMPLED[:-2] + "00"
    assert app.test_client().get(PATHS[0], headers={"traceparent": unsampled}).status_code == 200
    assert worker.processor.force_flush(5000)
    spans = from_file(span_file) if span_file.exists() else []
    assert len([s for s in spans if s.kind == "server"]) == exported
