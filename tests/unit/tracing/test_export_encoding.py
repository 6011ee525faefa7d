"""The span file's OTLP/JSON encoder and the OTLP exporters' protobuf encoder against the
SDK's: the same bytes for spans of every shape (``tracing.export.encode_otlp_line`` and
``tracing.export.encode_otlp_protobuf`` write them directly; what they replaced
built the SDK's protobuf messages, and for the span file read them back with protobuf's
JSON mapping and dumped that). Every test runs on the compiled span encoder
(``_export_native.c``) and on the Python reference it follows."""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import math
import random
import shutil
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from tests.unit.support.spans import sdk_encoding, sdk_protobuf
from tests.unit.support.timing import timing_path
from tracing import export, otlp_protobuf
from tracing.export import encode_otlp_json, encode_otlp_line, encode_otlp_protobuf
from tracing.timing import native

RESOURCE = Resource.create({"service.name": "pricingservice", "pricing.pool": "io"})
OTHER_RESOURCE = Resource({"service.name": "other"}, schema_url="https://example.com/schema")


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    with timing_path(request.param == "compiled"):
        # The encoders that run are the ones asked for (the compiled ones are builtins).
        assert inspect.isbuiltin(export.span_fields_text) == (request.param == "compiled")
        assert inspect.isbuiltin(otlp_protobuf.span_fields_proto) == (request.param == "compiled")
        yield request.param


def test_the_compiled_encoder_is_what_runs_where_it_could_be_built() -> None:
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") is None or not headers.exists():
        pytest.skip("no compiler or no Python headers: the reference runs, by design")
    assert importlib.import_module(export.COMPILED_ENCODER), "it did not import"
    assert importlib.import_module(otlp_protobuf.COMPILED_ENCODER), "it did not import"
    if native.compiled_runs():
        assert inspect.isbuiltin(export.span_fields_text), "tracing.export did not take it"
        assert inspect.isbuiltin(otlp_protobuf.span_fields_proto), "nor tracing.otlp_protobuf"


def test_ids_the_compiled_formats_do_not_fit_go_to_the_reference() -> None:
    """The compiled encoder writes ids of 128 and 64 bits; any other id (a bigger or a
    negative one: no SDK span has one) is the reference's, whole."""
    for trace_id, span_id in ((2**128 + 5, 7), (-1, 7), (5, 2**64), (5, -3)):
        args = (trace_id, span_id, "", None, False, "n", SpanKind.INTERNAL, 1, 2, {}, (), None)
        texts, errors = set(), set()
        for compiled in (True, False):
            with timing_path(compiled):
                texts.add(export.span_fields_text(*args))
                with pytest.raises((OverflowError, ValueError)) as raised:  # to_bytes's
                    otlp_protobuf.span_fields_proto(*args)
                errors.add(str(raised.value))
        assert len(texts) == 1, texts
        assert len(errors) == 1, errors


def assert_same_bytes(spans: list[ReadableSpan]) -> None:
    """The line ``JsonLinesFileExporter`` writes is the one it wrote with the SDK, and
    the OTLP exporters send the bytes the SDK's encoder serializes."""
    expected = json.dumps(sdk_encoding(spans), separators=(",", ":"))
    assert encode_otlp_line(spans) == expected
    assert encode_otlp_json(spans) == json.loads(expected)
    assert encode_otlp_protobuf(spans) == sdk_protobuf(spans)


def recorded_worker_spans() -> list[ReadableSpan]:
    """Sampled offers through the worker's real set-up (server span, three client spans
    with timing attributes and events, the redactor), as ``bench.span_cost`` makes them."""
    from bench import span_cost

    return span_cost.sampled_request_spans(3)


def test_the_worker_spans_encode_to_the_same_bytes() -> None:
    spans = recorded_worker_spans()
    assert len(spans) == 12
    assert_same_bytes(spans)


def sdk_made_spans() -> list[ReadableSpan]:
    """Spans the SDK made: every kind, error status with a description, events, links,
    a remote parent with trace state, limits that drop attributes, events and links."""
    memory = InMemorySpanExporter()
    limits = SpanLimits(max_span_attributes=3, max_events=1, max_links=1)
    provider = TracerProvider(resource=RESOURCE, span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("pricingservice", "1.2.3", schema_url="https://x/1")
    plain = TracerProvider(resource=OTHER_RESOURCE)
    plain.add_span_processor(SimpleSpanProcessor(memory))
    other = plain.get_tracer("other-scope")
    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "abc"), ("other", "x-1")]),
    )
    from opentelemetry import trace

    parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    with tracer.start_as_current_span(
        "GET /v1/offers/bike",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"a": 1, "b": True, "c": 0.5, "d": "x", "e": (1, 2)},  # two dropped
    ) as server:
        server.set_status(Status(StatusCode.ERROR, "upstream refused"))
        server.add_event("first", {"x": 1.0}, timestamp=1234)
        server.add_event("second")  # dropped
        linked = server.get_span_context()
        with tracer.start_as_current_span("GET /vehicles", kind=SpanKind.CLIENT) as client:
            client.set_status(Status(StatusCode.OK))
            client.set_attribute("empty", "")
            client.set_attribute("culprits", ["GET /a=0.1", "<hub>=0.2"])
    links = [Link(linked, {"why": "retry"}), Link(remote)]  # one dropped
    with tracer.start_as_current_span("retry", links=links):
        pass
    for kind in (SpanKind.INTERNAL, SpanKind.PRODUCER, SpanKind.CONSUMER):
        with other.start_as_current_span(f"kind-{kind.name}", kind=kind):
            pass
    with tracer.start_as_current_span("after the other scope"):
        pass
    return list(memory.get_finished_spans())


def test_sdk_made_spans_of_every_shape_encode_to_the_same_bytes() -> None:
    spans = sdk_made_spans()
    document = encode_otlp_json(spans)
    assert len(document["resourceSpans"]) == 2  # grouped by resource, then scope
    assert_same_bytes(spans)


def raw_span(name: str = "raw", **kwargs: Any) -> ReadableSpan:
    context = SpanContext(trace_id=1, span_id=2, is_remote=False, trace_flags=TraceFlags(1))
    defaults: dict[str, Any] = {"context": context, "resource": RESOURCE}
    return ReadableSpan(name=name, **{**defaults, **kwargs})


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        -0.0,
        0.0,
        0,
        -(2**63),
        2**63 - 1,
        False,
        "",
        "ünïcode ✓ \U0001f6b2",
        'quote " backslash \\ newline \n tab \t control \x01 slash /',
        b"\x00\xffbytes",
        (),
        ("a", "b"),
        ["a", 1, 2.5, True],
        ((1, 2), ["x", ("y",)]),
        (1.5, float("nan")),
        {"k": 1, "nested": {"x": [True]}},
        {},
        None,
    ],
    ids=repr,
)
def test_attribute_values_encode_as_the_sdk_does(value: Any) -> None:
    span = raw_span(attributes={"key": value, "after": 1}, start_time=10, end_time=20)
    assert_same_bytes([span])
    odd_key = raw_span('name "ünïcode" \n', attributes={'k "é"\n': value})
    assert_same_bytes([odd_key])


def measured_seconds() -> list[float]:
    """Doubles as the timing core makes them, whole nanoseconds in seconds (the compiled
    encoder writes those without the shortest-repr search: they must come out as repr
    writes them), at every magnitude and sign, and the doubles around them."""
    rnd = random.Random(42)
    values = [1e-9, 1e-5, 1.5e-5, 9.9999e-5, 1e-4, 0.00012, 0.5, 1.0, 10.0, 999999.999999999]
    for digits in (1, 3, 5, 7, 9, 11, 13, 15):
        for _ in range(60):
            nanos = rnd.randrange(1, 10**digits)
            values += [nanos / 1e9, -nanos / 1e9, nanos * 1000 / 1e9]
    values += [math.nextafter(v, math.inf) for v in values[:200]]
    values += [1e6, 2e6 / 3, 1e-10 / 3, 5e-324, 1.7976931348623157e308, 0.1 + 0.2]
    return values


def test_measured_seconds_encode_as_the_sdk_does() -> None:
    values = measured_seconds()
    span = raw_span(attributes={f"k{i}": value for i, value in enumerate(values)})
    assert_same_bytes([span])
    (attrs,) = [s["attributes"] for s in _spans(encode_otlp_json([span]))]
    assert [a["value"]["doubleValue"] for a in attrs] == values


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, "lone \udc80 surrogate", object()])
def test_a_value_the_sdk_cannot_encode_is_left_out_with_a_log_line(
    value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    span = raw_span(attributes={"bad": value, "good": "kept"})
    with caplog.at_level(logging.ERROR):
        assert_same_bytes([span])
    (attrs,) = [s["attributes"] for s in _spans(encode_otlp_json([span]))]
    assert attrs == [{"key": "good", "value": {"stringValue": "kept"}}]
    assert "Failed to encode key bad" in caplog.text


def _spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for rs in document["resourceSpans"]
        for scope in rs["scopeSpans"]
        for span in scope["spans"]
    ]


def test_fields_at_their_defaults_are_left_out_as_the_sdk_does() -> None:
    spans = [
        raw_span(""),  # no name, no times, no scope
        raw_span("no status", status=None),  # type: ignore[arg-type]
        raw_span(
            "zero ids",
            context=SpanContext(trace_id=0, span_id=0, is_remote=False),
            parent=SpanContext(trace_id=0, span_id=0, is_remote=True),
            instrumentation_scope=InstrumentationScope("", None, None, {"scope.attr": 1}),
            events=[Event("", {}, timestamp=0), Event("e", None, timestamp=5)],
        ),
        raw_span("no resource attributes", resource=Resource({}, schema_url="")),
    ]
    assert_same_bytes(spans)


def test_no_spans_encode_as_an_empty_request() -> None:
    assert_same_bytes([])
    assert encode_otlp_line([]) == "{}"


def test_each_exporter_has_records_built_ahead_with_the_encoder_its_batches_use(
    tmp_path: Path,
) -> None:
    """What the hub builds while idle is what the batch takes as it is (the same
    encoder), whichever implementation runs."""
    from tracing.otlp_exporters import HttpRecordExporter, grpc_record_exporter

    span_file = export.JsonLinesFileExporter(tmp_path / "spans.jsonl")
    assert span_file.span_encoder() is export.span_fields_text
    http = HttpRecordExporter(encode_otlp_protobuf, endpoint="http://127.0.0.1:9/v1/traces")
    grpc = grpc_record_exporter(encode_otlp_protobuf, "http://127.0.0.1:9")
    try:
        assert http.span_encoder() is otlp_protobuf.span_fields_proto
        assert grpc.span_encoder() is otlp_protobuf.span_fields_proto
    finally:
        http.shutdown()
        grpc.shutdown()
