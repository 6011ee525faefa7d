"""Per-worker tracing set-up and the server spans of a real Flask app (no network)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

import tracing.request_spans
import tracing.server
from pricing import create_app
from routing.load import load_routes
from routing.model import RouteConfig
from tests.prometheus import samples, total, value
from tests.samples import OFFER_PATH, OFFER_QUERY
from tests.unit.support.gateway import FakeGateway
from toolkit.contract import TRACING_ENV
from tracing import attributes
from tracing.client import TracingCallObserver
from tracing.flask_tracing import FlaskTracing
from tracing.readback.spans import Span, from_file
from tracing.settings import Mode, TracingSettings

TRACEPARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT_PARENT = "00f067aa0ba902b7"


@pytest.fixture(autouse=True)
def _reset_worker() -> Iterator[None]:
    tracing.server.shutdown_worker()
    yield
    tracing.server.shutdown_worker()


@pytest.fixture(scope="module")
def config() -> RouteConfig:
    return load_routes()


@pytest.fixture
def span_file(tmp_path: Path) -> Path:
    return tmp_path / "spans.jsonl"


@pytest.fixture
def worker(span_file: Path) -> tracing.server.WorkerTracing:
    settings = TracingSettings(mode=Mode.SPANS, otlp_endpoint=None, span_file=span_file)
    # Every request sampled (requests without traceparent are roots here).
    worker = tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=1.0))
    assert worker is not None
    return worker


def io_app(config: RouteConfig) -> Flask:
    app = create_app("io", config=config, gateway=FakeGateway())
    app.config["TESTING"] = True
    return app


def flushed(worker: tracing.server.WorkerTracing, span_file: Path) -> list[Span]:
    assert worker.processor.force_flush(5000)
    return from_file(span_file) if span_file.exists() else []


def test_setup_worker_returns_the_worker_and_makes_it_current(
    worker: tracing.server.WorkerTracing, span_file: Path
) -> None:
    assert isinstance(worker, tracing.server.WorkerTracing)
    assert tracing.server.current() is worker
    assert worker.pool == "io"
    assert worker.settings.span_file == span_file
    assert worker.instrumentor is None  # SPANS: no gevent timing instrumentation
    resource = worker.provider.resource.attributes
    assert resource["service.name"] == "pricingservice"
    assert resource["pricing.pool"] == "io"


def test_resource_has_version_and_environment_and_the_standard_variables_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import version

    defaults = tracing.server.worker_resource("io").attributes
    assert defaults["service.version"] == version("pricingservice")
    assert defaults["deployment.environment.name"] == "development"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "pricing-eu")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,team=fares")
    resource = tracing.server.worker_resource("cpu").attributes
    assert resource["service.name"] == "pricing-eu"
    assert resource["deployment.environment.name"] == "prod"
    assert resource["team"] == "fares"
    assert resource["pricing.pool"] == "cpu"


def test_otel_traces_sampler_is_built_by_the_sdk(
    monkeypatch: pytest.MonkeyPatch, span_file: Path
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    settings = TracingSettings.from_env()
    worker = tracing.server.setup_worker("io", settings, tracing.server.Sampling(ratio=1.0))
    assert worker is not None
    assert "ParentBased{root:AlwaysOffSampler" in worker.provider.sampler.get_description()


def test_server_span_is_named_after_the_route_template(
    worker: tracing.server.WorkerTracing, span_file: Path, config: RouteConfig
) -> None:
    client = io_app(config).test_client()
    response = client.get(OFFER_PATH)
    assert response.status_code == 200, response.data
    (span,) = flushed(worker, span_file)
    assert span.name == "GET /v1/offers/bike"  # not the raw URL with its query string
    assert span.kind == "server"
    assert span.service == "pricingservice"
    assert span.attributes["http.route"] == "/v1/offers/bike"
    # The stable HTTP names only.
    assert span.attributes["http.response.status_code"] == 200
    assert "http.status_code" not in span.attributes
    # The query, as the conventions ask, with its values redacted (none allow-listed).
    assert span.attributes["url.query"] == "origin=REDACTED&destination=REDACTED&user_id=REDACTED"


def test_server_span_carries_the_status_the_response_started_with(
    worker: tracing.server.WorkerTracing, span_file: Path, config: RouteConfig
) -> None:
    """The status is read from the response's start (no after_request hook): a refused
    request's span says 422, as the reply did."""
    client = io_app(config).test_client()
    response = client.get("/v1/offers/bike?region=sf")  # no coordinates
    assert response.status_code == 422, response.data
    (span,) = flushed(worker, span_file)
    assert span.attributes["http.response.status_code"] == 422


def test_server_span_continues_the_trace_of_the_incoming_traceparent(
    worker: tracing.server.WorkerTracing, span_file: Path, config: RouteConfig
) -> None:
    client = io_app(config).test_client()
    traceparent = f"00-{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}-01"
    assert client.get(OFFER_PATH, headers={"traceparent": traceparent}).status_code == 200
    (span,) = flushed(worker, span_file)
    assert span.trace_id == TRACEPARENT_TRACE
    assert span.parent_id == TRACEPARENT_PARENT


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_checks_are_not_traced(
    worker: tracing.server.WorkerTracing, span_file: Path, config: RouteConfig, path: str
) -> None:
    client = io_app(config).test_client()
    assert client.get(path).status_code == 200
    assert client.get(OFFER_PATH).status_code == 200
    names = [s.name for s in flushed(worker, span_file)]
    assert names == ["GET /v1/offers/bike"]


def test_instrument_returns_a_span_making_observer(
    worker: tracing.server.WorkerTracing, span_file: Path
) -> None:
    observer = FlaskTracing(tracing.server.current()).instrument(Flask(__name__))
    assert isinstance(observer, TracingCallObserver)
    with observer.call("vehicles", "GET", "127.0.0.1", 8200, "/vehicles/v1/nearby?x=1") as obs:
        obs.status = 200
    (span,) = flushed(worker, span_file)
    assert (span.name, span.kind) == ("GET /vehicles/v1/nearby", "client")
    assert "gevent.network.duration" not in span.attributes  # SPANS mode does not measure


def test_shutdown_worker_flushes_and_forgets_the_worker(
    worker: tracing.server.WorkerTracing, span_file: Path, config: RouteConfig
) -> None:
    assert io_app(config).test_client().get(OFFER_PATH).status_code == 200
    tracing.server.shutdown_worker()
    assert tracing.server.current() is None
    assert [s.name for s in from_file(span_file)] == ["GET /v1/offers/bike"]
    assert FlaskTracing(tracing.server.current()).instrument(Flask(__name__)) is None


def test_shutdown_worker_shuts_the_shared_exporter_down_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The tracer provider and the span builder (built spans: sampled, slow) share one
    processor: stopping a worker must not warn "Exporter already shutdown" on every exit."""
    settings = TracingSettings(
        mode=Mode.SPANS, otlp_endpoint="http://127.0.0.1:9/v1/traces", span_file=Path("unused")
    )
    worker = tracing.server.setup_worker("io", settings)
    assert worker is not None and worker.spans is not None
    with caplog.at_level(logging.WARNING):
        tracing.server.shutdown_worker()
    assert worker.processor.exporter._shutdown  # the OTLP exporter was shut down
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_mode_off_sets_nothing_up(tmp_path: Path) -> None:
    settings = TracingSettings(mode=Mode.OFF, otlp_endpoint=None, span_file=tmp_path / "s")
    assert tracing.server.setup_worker("io", settings) is None
    assert tracing.server.current() is None
    assert FlaskTracing(tracing.server.current()).instrument(Flask(__name__)) is None
    assert not (tmp_path / "s").exists()


def test_mode_off_app_still_serves(tmp_path: Path, config: RouteConfig) -> None:
    settings = TracingSettings(mode=Mode.OFF, otlp_endpoint=None, span_file=tmp_path / "s")
    tracing.server.setup_worker("io", settings)
    assert io_app(config).test_client().get(OFFER_PATH).status_code == 200


def test_broken_env_logs_and_returns_none(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(TRACING_ENV, "bogus")
    with caplog.at_level(logging.ERROR, logger="tracing.server"):
        assert tracing.server.setup_worker("io") is None
    assert tracing.server.current() is None
    assert "tracing disabled" in caplog.text
    assert TRACING_ENV in caplog.text


def test_unusable_span_file_logs_and_returns_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings = TracingSettings(
        mode=Mode.SPANS, otlp_endpoint=None, span_file=blocker / "sub" / "spans.jsonl"
    )
    with caplog.at_level(logging.ERROR, logger="tracing.server"):
        assert tracing.server.setup_worker("io", settings) is None
    assert "serving without spans" in caplog.text
    assert tracing.server.current() is None


def full_worker(span_file: Path, sampling: tracing.server.Sampling) -> tracing.server.WorkerTracing:
    settings = TracingSettings(mode=Mode.FULL, otlp_endpoint=None, span_file=span_file)
    worker = tracing.server.setup_worker("io", settings, sampling)
    assert worker is not None and worker.instrumentor is not None
    return worker


@pytest.mark.parametrize(("flag", "spans"), [("01", 1), ("00", 0)])
def test_pools_follow_the_sampled_flag_of_the_traceparent(
    span_file: Path, config: RouteConfig, flag: str, spans: int
) -> None:
    """Envoy decides: a pool samples exactly what the traceparent says, whatever its own
    ratio (here: 100 % for a request without traceparent)."""
    worker = full_worker(span_file, tracing.server.Sampling(ratio=1.0, default_slow_s=60))
    client = io_app(config).test_client()
    traceparent = f"00-{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}-{flag}"
    assert client.get(OFFER_PATH, headers={"traceparent": traceparent}).status_code == 200
    assert len(flushed(worker, span_file)) == spans


def test_a_slow_request_is_exported_whatever_the_sampling(
    span_file: Path, config: RouteConfig
) -> None:
    worker = full_worker(
        span_file,
        tracing.server.Sampling(ratio=0.0, slow_s={"GET /v1/offers/bike": 0.0}, default_slow_s=60),
    )
    client = io_app(config).test_client()
    unsampled = f"00-{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}-00"
    assert client.get(OFFER_PATH, headers={"traceparent": unsampled}).status_code == 200
    assert client.get(f"/v1/offers/scooter?{OFFER_QUERY}").status_code == 200
    (span,) = flushed(worker, span_file)  # the bike offer only: scooter is not "slow"
    assert span.name == "GET /v1/offers/bike"
    # Envoy's span was not kept: the server span is the root of the incoming trace
    # (Jaeger finds no missing parent), and names Envoy's span in an attribute.
    assert span.trace_id == TRACEPARENT_TRACE and span.parent_id is None
    assert span.attributes[attributes.EDGE_SPAN_ID] == TRACEPARENT_PARENT
    assert span.attributes["pricing.trace.reason"] == "slow"
    assert span.attributes["pricing.slow"] is True
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["gevent.handler.running"] > 0


def test_metrics_count_every_request_whatever_the_sampling(
    span_file: Path, config: RouteConfig
) -> None:
    worker = full_worker(span_file, tracing.server.Sampling(ratio=0.0, default_slow_s=60))
    client = io_app(config).test_client()
    route = "GET /v1/offers/bike"
    before = samples(client.get("/metrics").get_data(as_text=True))
    for _ in range(3):
        assert client.get(OFFER_PATH).status_code == 200
    after = samples(client.get("/metrics").get_data(as_text=True))
    assert flushed(worker, span_file) == []
    name = "pricing_handler_duration_seconds_count"
    assert value(after, name, route=route) - value(before, name, route=route) == 3
    name, labels = (
        "http_server_request_duration_seconds_count",
        {
            "http_request_method": "GET",
            "http_route": "/v1/offers/bike",
            "http_response_status_code": "200",
        },
    )
    assert total(after, name, **labels) - total(before, name, **labels) == 3


def test_metrics_say_what_each_route_costs_the_hub(span_file: Path, config: RouteConfig) -> None:
    """The families `routes suggest` reads: CPU per route from the switch tracer, the
    hub wait of every request, read back as `suggest` reads them (two scrapes)."""
    from tracing import metric_families
    from tracing.readback import usage

    worker = full_worker(span_file, tracing.server.Sampling(ratio=0.0, default_slow_s=60))
    client = io_app(config).test_client()
    before = usage.parse_text(client.get("/metrics").get_data(as_text=True))
    for _ in range(4):
        assert client.get(OFFER_PATH).status_code == 200
    worker.sync_metrics()
    after = usage.parse_text(client.get("/metrics").get_data(as_text=True))
    assert set(after) == {""}  # the pool's totals: no pid label
    counts = usage.delta(before, after)
    route = (("route", "GET /v1/offers/bike"),)
    assert counts[(metric_families.ROUTE_CPU, route)] > 0
    assert counts[(f"{metric_families.ROUTE_HUB_WAIT}_count", route)] == 4
    (bike,) = [u for u in usage.usage_from_metrics(counts, 1.0) if u.route.endswith("bike")]
    assert bike.requests == 4 and 0 < bike.cpu_s < bike.wall_s


def test_slow_exports_are_capped_per_worker(span_file: Path, config: RouteConfig) -> None:
    """An overloaded worker finds every request slow: only a budget of them is exported
    (the rest are counted), so tracing does not add CPU when there is none to spare."""
    worker = full_worker(
        span_file,
        tracing.server.Sampling(
            ratio=0.0, slow_s={"GET /v1/offers/bike": 0.0}, default_slow_s=60, slow_per_s=2
        ),
    )
    client = io_app(config).test_client()
    before = samples(client.get("/metrics").get_data(as_text=True))
    for _ in range(6):
        assert client.get(OFFER_PATH).status_code == 200
    assert len(flushed(worker, span_file)) == 2
    assert (worker.slow_budget.exported, worker.slow_budget.dropped) == (2, 4)
    worker.sync_metrics()
    after = samples(client.get("/metrics").get_data(as_text=True))
    for outcome, count in (("skipped", 4), ("exported", 2)):
        name = "pricing_slow_traces_total"
        gained = value(after, name, outcome=outcome) - value(before, name, outcome=outcome)
        assert gained == count, outcome
    exported = "pricing_spans_exported_total"
    assert value(after, exported) - value(before, exported) >= 2


def test_an_unsampled_request_creates_no_span_object(
    span_file: Path, config: RouteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Envoy's 99 %: not even a non-recording span. A request Envoy sampled gets its span
    built when it ends (``tracing.span_records``), not a live one; a request that comes
    without Envoy's decision goes through the SDK's sampler and gets a live span."""
    from opentelemetry.sdk.trace import Tracer

    started: list[str] = []
    real_start = Tracer.start_span

    def counting(self: Tracer, name: str, *args: object, **kwargs: object) -> object:
        started.append(name)
        return real_start(self, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Tracer, "start_span", counting)
    worker = full_worker(span_file, tracing.server.Sampling(ratio=1.0, default_slow_s=60))
    client = io_app(config).test_client()
    unsampled = f"00-{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}-00"
    assert client.get(OFFER_PATH, headers={"traceparent": unsampled}).status_code == 200
    assert started == []
    sampled = f"00-{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}-01"
    assert client.get(OFFER_PATH, headers={"traceparent": sampled}).status_code == 200
    assert started == []
    assert client.get(OFFER_PATH).status_code == 200  # no traceparent: the sampler's ratio, 100 %
    assert started == ["GET /v1/offers/bike"]
    spans = flushed(worker, span_file)
    assert [(s.name, s.trace_id == TRACEPARENT_TRACE) for s in spans] == [
        ("GET /v1/offers/bike", True),
        ("GET /v1/offers/bike", False),
    ]


def test_the_server_span_uses_the_stable_http_conventions(
    worker: tracing.server.WorkerTracing, span_file: Path, config: RouteConfig
) -> None:
    client = io_app(config).test_client()
    assert client.get(OFFER_PATH, headers={"User-Agent": "probe/1"}).status_code == 200
    (span,) = flushed(worker, span_file)
    attrs = span.attributes
    assert attrs["http.request.method"] == "GET"
    assert attrs["http.route"] == "/v1/offers/bike"
    assert attrs["url.path"] == "/v1/offers/bike"
    assert attrs["url.scheme"] == "http"
    assert attrs["http.response.status_code"] == 200
    assert attrs["user_agent.original"] == "probe/1"
    assert attrs["network.protocol.version"] == "1.1"
    assert "server.address" in attrs
    for old in ("http.method", "http.status_code", "http.target", "http.scheme"):
        assert old not in attrs


def test_a_sampled_request_is_extracted_by_the_configured_propagator(
    span_file: Path, config: RouteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_PROPAGATORS=b3: the traceparent precheck stands aside, B3 headers are read."""
    from opentelemetry import propagate
    from opentelemetry.propagators.textmap import TextMapPropagator

    class OnlyB3Like(TextMapPropagator):  # a stand-in reading X-Trace: <trace>-<span>
        def extract(self, carrier, context=None, getter=None):  # type: ignore[no-untyped-def]
            from opentelemetry import trace
            from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

            value = getter.get(carrier, "x-trace") if getter else None
            if not value:
                return context
            trace_id, span_id = value[0].split("-")
            parent = SpanContext(
                int(trace_id, 16), int(span_id, 16), True, TraceFlags(TraceFlags.SAMPLED)
            )
            return trace.set_span_in_context(NonRecordingSpan(parent), context)

        def inject(self, carrier, context=None, setter=None):  # type: ignore[no-untyped-def]
            pass

        @property
        def fields(self) -> set[str]:
            return {"x-trace"}

    monkeypatch.setattr(propagate, "_HTTP_TEXT_FORMAT", OnlyB3Like())
    worker = full_worker(span_file, tracing.server.Sampling(ratio=0.0, default_slow_s=60))
    client = io_app(config).test_client()
    # An unsampled traceparent means nothing to this propagator: the X-Trace parent wins.
    headers = {
        "traceparent": f"00-{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}-00",
        "x-trace": f"{TRACEPARENT_TRACE}-{TRACEPARENT_PARENT}",
    }
    assert client.get(OFFER_PATH, headers=headers).status_code == 200
    (span,) = flushed(worker, span_file)
    assert span.trace_id == TRACEPARENT_TRACE and span.parent_id == TRACEPARENT_PARENT


def test_delayed_is_the_hub_wait_along_the_critical_path_one_definition() -> None:
    """``pricing.delayed`` calls the timing core's one definition (the hub wait that
    `routes suggest` reads), not a sum of its parallel calls' delays."""
    from types import MappingProxyType, SimpleNamespace

    from tracing import attributes
    from tracing.client import RequestTotals
    from tracing.timing import server_timing
    from tracing.timing.call_state import CallTiming
    from tracing.timing.server_timing import RequestTiming

    assert tracing.request_spans.is_delayed is server_timing.is_delayed

    def offer(call_delay_s: float) -> tuple[RequestTiming, RequestTotals]:
        call = CallTiming(
            duration_s=0.1, network_s=0.05, scheduling_delay_s=call_delay_s, blocked_s=0.0
        )
        timing = RequestTiming(
            arrival_unix_ns=1,
            start_unix_ns=2,
            end_unix_ns=3,
            inbound_delay_s=0.010,
            inbound_cpu_wait_s=0.0,
            inbound_culprits=MappingProxyType({}),
            duration_s=0.12,
            running_s=0.01,
            waiting_s=0.11,
            critical=call,
            critical_upstream="vehicles",
            presend_delay_s=0.001,
            wake_delay_s=0.002,
        )
        totals = RequestTotals()
        totals.records.extend(SimpleNamespace(timing=call) for _ in range(3))  # type: ignore[misc]
        return timing, totals

    # Three parallel calls delayed 20 ms each: 70 ms summed, but the request waited
    # 10 + 1 + 20 + 2 = 33 ms for the hub.
    timing, totals = offer(0.020)
    out = tracing.request_spans.request_attributes("GET /v1/offers/bike", timing, totals)
    assert out[attributes.SCHEDULING_DELAY] == pytest.approx(0.060)
    assert timing.hub_wait_s == pytest.approx(0.033)
    assert out[attributes.DELAYED] is False
    timing, totals = offer(0.040)  # 10 + 1 + 40 + 2 = 53 ms
    out = tracing.request_spans.request_attributes("GET /v1/offers/bike", timing, totals)
    assert out[attributes.DELAYED] is True
