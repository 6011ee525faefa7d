"""Spans built from a request's record off the hub (``tracing.span_records``) hold what
the SDK's live spans held for the same request: the same OTLP lines leave the worker, but
for the measured numbers, the ids and the times. A record's OTLP/JSON, written straight
from its fields for the span file, is what the SDK's own encoder makes of the SDK spans
built from the same record for the other exporters."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import pytest
from flask import Flask
from gevent.monkey import get_original
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanContext, TraceFlags

import tracing.export
import tracing.server
from tests.unit.support.spans import sdk_encoding, sdk_protobuf
from toolkit.wait import wait_until
from tracing.export import (
    JsonLinesFileExporter,
    ThreadedSpanProcessor,
    encode_otlp_json,
    encode_otlp_protobuf,
    readable_spans,
    span_fields_text,
)
from tracing.flask_tracing import FlaskTracing
from tracing.otlp_protobuf import span_fields_proto
from tracing.redact import QueryRedactor
from tracing.server_span import sampled_traceparent
from tracing.settings import BatchSettings, Mode, TracingSettings
from tracing.span_records import RequestRecord, SpanBuilder

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE}-{PARENT}-01"
HEADERS = {
    "traceparent": SAMPLED,
    "tracestate": "congo=t61rcWkgMzE",
    "baggage": "tenant=t-1",
    "User-Agent": "probe/1",
}
# Measured (their values differ between two runs of the same request), or ids and times.
MEASURED = ("gevent.", "pricing.critical.", "pricing.handler.", "pricing.inbound.")
MEASURED_KEYS = {"pricing.delayed", "pricing.envoy.before_pool", "exception.stacktrace"}


@pytest.fixture(autouse=True)
def _reset_worker() -> Iterator[None]:
    tracing.server.shutdown_worker()
    yield
    tracing.server.shutdown_worker()


def serve(
    span_file: Path, *, build: bool, queued: list[Any] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Run the same three requests through a traced worker, its sampled spans built off
    the hub (*build*) or live; return the spans written and the headers sent upstream.
    *queued*: given what the export queue held before its flush."""
    settings = TracingSettings(
        mode=Mode.FULL,
        otlp_endpoint=None,
        span_file=span_file,
        batch=BatchSettings(schedule_delay_s=60.0),  # exported at the flush below
    )
    worker = tracing.server.setup_worker(
        "io", settings, tracing.server.Sampling(ratio=1.0, default_slow_s=60)
    )
    assert worker is not None and worker.build_sampled  # our sampler keeps sampled parents
    worker.build_sampled = build
    app = Flask(__name__)
    observer = FlaskTracing(tracing.server.current()).instrument(app)
    assert observer is not None
    sent: list[dict[str, str]] = []

    @app.get("/v1/offers/bike")
    def bike() -> str:
        with observer.call("vehicles", "GET", "127.0.0.1", 8200, "/v1/nearby?lat=1&u=2") as obs:
            obs.status = 200
            sent.append(dict(obs.headers))
        with observer.call("fares", "POST", "127.0.0.1", 8300, "/v1/fare") as obs:
            obs.status = 503
        try:
            with observer.call("eta", "GET", "127.0.0.1", 8400, "/v1/eta"):
                raise ConnectionResetError("reset by peer")
        except ConnectionResetError:
            pass
        return "ok"

    @app.get("/v1/boom")
    def boom() -> str:
        raise RuntimeError("no fares today")

    if queued is not None:
        # What the hub hands the queue, as it hands it: the exporter's thread may take a
        # batch from the queue before the flush below (it did once on a busy machine).
        on_record = worker.processor.on_record

        def keep(record: Any) -> None:
            queued.append(record)
            on_record(record)

        worker.processor.on_record = keep  # type: ignore[method-assign]
    client = app.test_client()
    assert client.get("/v1/offers/bike?region=sf&user_id=u-1", headers=HEADERS).status_code == 200
    assert client.get("/v1/boom", headers=HEADERS).status_code == 500
    assert worker.processor.force_flush(5000)
    tracing.server.shutdown_worker()
    spans = []
    for line in span_file.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    spans.append(
                        span
                        | {"resource": resource_spans["resource"], "scope": scope_spans["scope"]}
                    )
    return spans, sent


def _value(value: dict[str, Any]) -> Any:
    return next(iter(value.values()))


def comparable(span: dict[str, Any]) -> dict[str, Any]:
    """A span without what differs between two runs: ids, times, measured values."""

    def attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
        out = {}
        for item in items:
            key = item["key"]
            measured = key.startswith(MEASURED) or key in MEASURED_KEYS
            out[key] = "<measured>" if measured else _value(item["value"])
        return out

    resource = attrs(span["resource"]["attributes"])
    resource.pop("service.instance.id")  # the worker's pid and nothing else
    return {
        "name": span["name"],
        "kind": span["kind"],
        "flags": span.get("flags"),
        "traceState": span.get("traceState"),
        "attributes": attrs(span.get("attributes", [])),
        "events": [(e["name"], attrs(e.get("attributes", []))) for e in span.get("events", [])],
        "status": span.get("status"),
        "scope": span["scope"],
        "resource": resource,
        "remote_parent": span.get("parentSpanId") == PARENT,
    }


def test_built_spans_hold_what_the_live_spans_held(tmp_path: Path) -> None:
    live, live_sent = serve(tmp_path / "live.jsonl", build=False)
    built, built_sent = serve(tmp_path / "built.jsonl", build=True)

    def by_name(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted((comparable(s) for s in spans), key=lambda s: (s["kind"], s["name"]))

    assert len(live) == len(built) == 5  # two server spans, three client spans
    assert by_name(built) == by_name(live)
    # The same headers went upstream, but for the client span's id.
    assert [sorted(h) for h in built_sent] == [sorted(h) for h in live_sent]
    assert built_sent[0]["tracestate"] == live_sent[0]["tracestate"] == "congo=t61rcWkgMzE"


def test_the_hub_queues_records_and_no_sdk_span(tmp_path: Path) -> None:
    queued: list[Any] = []
    serve(tmp_path / "built.jsonl", build=True, queued=queued)
    assert [type(item) for item in queued] == [RequestRecord, RequestRecord]
    assert sorted(item.span_count for item in queued) == [1, 4]


def test_a_records_otlp_is_the_sdks_for_the_same_request(tmp_path: Path) -> None:
    """Field by field: the span file's text of a record (no SDK span) against the SDK's
    own OTLP encoder of the SDK spans the other exporters get from the same record: ids,
    parents, names, kinds, attributes (redacted), events (the exception's too), status,
    flags, trace state, resource and scope."""
    queued: list[Any] = []
    serve(tmp_path / "built.jsonl", build=True, queued=queued)
    direct = encode_otlp_json(queued)
    assert direct == sdk_encoding(readable_spans(queued))
    # And the OTLP exporters' protobuf (``tracing.otlp_protobuf``), byte for byte.
    assert encode_otlp_protobuf(queued) == sdk_protobuf(readable_spans(queued))
    spans = [s for r in direct["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"]]
    assert len(spans) == 5
    assert {s.get("traceState") for s in spans} == {"congo=t61rcWkgMzE"}
    (eta,) = (s for s in spans if s["name"] == "GET /v1/eta")
    assert [e["name"] for e in eta["events"]] == ["exception"]
    assert eta["status"] == {"message": "ConnectionResetError: reset by peer", "code": 2}


def test_an_exporter_taking_no_record_gets_sdk_spans_built_on_the_thread(tmp_path: Path) -> None:
    queued: list[Any] = []
    serve(tmp_path / "built.jsonl", build=True, queued=queued)
    memory = InMemorySpanExporter()
    processor = ThreadedSpanProcessor(memory, BatchSettings(schedule_delay_s=60.0))
    try:
        for record in queued:
            processor.on_record(record)
        assert processor.force_flush(5000)
        exported = list(memory.get_finished_spans())
        assert processor.exported_spans == len(exported) == 5
        assert sdk_encoding(exported) == encode_otlp_json(queued)
    finally:
        processor.shutdown()


def test_the_exporter_thread_hands_the_hub_the_gil_after_each_requests_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two requests' spans the exporter's thread lets a waiting hub run, for
    the span file and for the other exporters alike (``tracing.export``)."""
    queued: list[Any] = []
    serve(tmp_path / "built.jsonl", build=True, queued=queued)
    handed: list[int] = []
    monkeypatch.setattr(tracing.export, "_let_the_hub_run", lambda: handed.append(1))
    assert len(queued) == 2
    encode_otlp_json(queued)
    assert len(handed) == 2
    readable_spans(queued)
    assert len(handed) == 4


def span_builder(processor: ThreadedSpanProcessor, **options: Any) -> SpanBuilder:
    return SpanBuilder(
        Resource.create({"service.name": "s"}),
        "scope",
        processor,
        QueryRedactor(),
        RandomIdGenerator(),
        **options,
    )


def test_span_limits_bind_on_built_spans_as_on_the_sdks() -> None:
    memory = InMemorySpanExporter()
    processor = ThreadedSpanProcessor(memory, BatchSettings(schedule_delay_s=60.0))
    builder = span_builder(
        processor, limits=SpanLimits(max_span_attributes=3, max_span_attribute_length=4)
    )
    parent = SpanContext(int(TRACE, 16), int(PARENT, 16), True, TraceFlags(1))
    try:
        attributes = {"a": 1, "b": 2.5, "c": True, "d": "x", "e": "long value"}
        builder.request(
            name="GET /r", parent=parent, attributes=attributes, events=[], error=True,
            start_ns=1, end_ns=2,
        )  # fmt: skip
        (record,) = processor._queue
        (span,) = encode_otlp_json([record])["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert span["droppedAttributesCount"] == 2
        assert [a["key"] for a in span["attributes"]] == ["c", "d", "e"]  # the first go
        assert span["attributes"][2]["value"] == {"stringValue": "long"}
        assert span["status"] == {"code": 2}
        assert encode_otlp_json([record]) == sdk_encoding(readable_spans([record]))
        assert encode_otlp_protobuf([record]) == sdk_protobuf(readable_spans([record]))
    finally:
        processor.shutdown()


def test_built_spans_are_one_trace_under_envoys_span(tmp_path: Path) -> None:
    spans, sent = serve(tmp_path / "built.jsonl", build=True)
    servers = {s["name"]: s for s in spans if s["kind"] == 2}
    assert sorted(servers) == ["GET /v1/boom", "GET /v1/offers/bike"]
    bike = servers["GET /v1/offers/bike"]
    for span in spans:
        assert span["traceId"] == TRACE
    assert bike["parentSpanId"] == PARENT
    clients = [s for s in spans if s["kind"] == 3]
    assert {c["parentSpanId"] for c in clients} == {bike["spanId"]}
    assert len({c["spanId"] for c in clients} | {bike["spanId"]}) == 4
    # The client span's id is the one that went upstream as the call started.
    (vehicles,) = (c for c in clients if c["name"] == "GET /v1/nearby")
    assert sent[0]["traceparent"] == f"00-{TRACE}-{vehicles['spanId']}-01"
    assert sent[0]["baggage"] == "tenant=t-1"
    # Each span lies inside its server span's time.
    for client in clients:
        assert int(bike["startTimeUnixNano"]) <= int(client["startTimeUnixNano"])
        assert int(client["endTimeUnixNano"]) <= int(bike["endTimeUnixNano"])


def test_the_logs_see_the_built_server_spans_ids(tmp_path: Path) -> None:
    from opentelemetry import trace

    settings = TracingSettings(mode=Mode.FULL, otlp_endpoint=None, span_file=tmp_path / "s")
    assert tracing.server.setup_worker("io", settings) is not None
    app = Flask(__name__)
    FlaskTracing(tracing.server.current()).instrument(app)
    seen = []

    @app.get("/v1/x")
    def x() -> str:
        seen.append(trace.get_current_span().get_span_context())
        return "ok"

    assert app.test_client().get("/v1/x", headers={"traceparent": SAMPLED}).status_code == 200
    (context,) = seen
    assert f"{context.trace_id:032x}" == TRACE and context.trace_flags.sampled
    assert f"{context.span_id:016x}" != PARENT  # the server span's own id
    assert trace.get_current_span().get_span_context().is_valid is False  # detached


@pytest.mark.parametrize(
    ("sampler", "keeps"),
    [
        (ParentBased(TraceIdRatioBased(0.01)), True),
        (ParentBased(ALWAYS_OFF), True),
        (ALWAYS_ON, True),
        (TraceIdRatioBased(0.0), False),  # not parent-based: it decides every request
        (ALWAYS_OFF, False),
    ],
)
def test_only_a_sampler_that_keeps_sampled_parents_lets_them_be_built(
    sampler: Any, keeps: bool
) -> None:
    assert tracing.server.keeps_sampled_parents(sampler) is keeps


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        (SAMPLED, (TRACE, int(PARENT, 16), 1)),
        (f"00-{TRACE}-{PARENT}-03", (TRACE, int(PARENT, 16), 3)),
        (f"00-{TRACE}-{PARENT}-00", None),  # not sampled
        (f"00-{TRACE.upper()}-{PARENT}-01", None),  # upper-case hex
        (f"00-{'0' * 32}-{PARENT}-01", None),  # zero trace id
        (f"00-{TRACE}-{'0' * 16}-01", None),  # zero span id
        (f"01-{TRACE}-{PARENT}-01", None),  # another version: the propagator's
        (f"00-{TRACE}-{PARENT}-0x", None),
        (None, None),
        (SAMPLED + "-", None),
    ],
)
def test_a_sampled_traceparent_is_read_as_the_propagator_reads_it(
    value: str | None, parsed: tuple[str, int, int] | None
) -> None:
    assert sampled_traceparent(value) == parsed


def test_a_slow_roots_record_builds_its_wait_spans_as_counted() -> None:
    """A slow-kept request's record (its server span the root of the incoming trace id)
    with a delayed call and an inbound wait: the hub counts the spans the thread builds,
    each wait span under its call's or the server span, on both of the thread's paths."""
    from tests.unit.support.spans import START, delayed_call, request_timing
    from tracing.client import UpstreamCall
    from tracing.wait_spans import inbound_wait_spans

    processor = ThreadedSpanProcessor(InMemorySpanExporter(), BatchSettings(schedule_delay_s=60))
    builder = span_builder(processor, wait_spans_s=0.01)
    delayed, quick = (UpstreamCall("u", "GET", "h", 1, f"/{n}", START) for n in ("a", "b"))
    for call, timing in ((delayed, delayed_call()), (quick, delayed_call(delay_ms=1))):
        call.timing, call.end_unix_ns = timing, START + 155 * 1_000_000
    try:
        builder.request(
            name="GET /r", parent=None, trace_id=int(TRACE, 16), attributes={}, events=[],
            error=False, start_ns=START, end_ns=START + 300 * 1_000_000,
            records=(delayed, quick), waits=inbound_wait_spans(request_timing(259), 0.01),
        )  # fmt: skip
        (record,) = processor._queue
        spans = readable_spans([record])
        assert record.span_count == len(spans) == 1 + 2 + 2 + 1
        # The same text on both paths, but the wait spans' ids: drawn as each is built.
        assert _no_wait_ids(encode_otlp_json([record])) == _no_wait_ids(sdk_encoding(spans))
        by_id = {s.context.span_id: s for s in spans}
        (server,) = (s for s in spans if s.name == "GET /r")
        assert server.parent is None and {s.context.trace_id for s in spans} == {int(TRACE, 16)}
        drawn = sorted(
            (by_id[s.parent.span_id].name, s.name)
            for s in spans
            if s.kind.name == "INTERNAL" and s.parent is not None
        )
        assert drawn == [
            ("GET /a", "network"),
            ("GET /a", "waiting for the event loop"),
            ("GET /r", "waiting for the event loop"),
        ]
    finally:
        processor.shutdown()


def _no_wait_ids(document: dict[str, Any]) -> dict[str, Any]:
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                if span["name"] in ("network", "waiting for the event loop"):
                    span["spanId"] = "drawn"
    return document


# The OS thread's own ident (not a greenlet's, were the test process monkey-patched).
_os_thread_ident, _start_os_thread = get_original("_thread", ["get_ident", "start_new_thread"])


def queue_requests(builder: SpanBuilder, count: int, **options: Any) -> None:
    for n in range(count):
        builder.request(
            name=f"GET /{n}", parent=None, attributes={"n": n}, events=[], error=False,
            start_ns=1, end_ns=2, **options,
        )  # fmt: skip


def test_the_hub_encodes_queued_records_while_idle_and_the_thread_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the hub has nothing else to do it encodes the queued records for the
    exporter (``ThreadedSpanProcessor._build_while_idle``); the thread writes what it made,
    and encodes none of them again."""
    encoded_on: list[int] = []

    def counting(*fields: Any, **options: Any) -> str:
        encoded_on.append(_os_thread_ident())
        return span_fields_text(*fields, **options)

    monkeypatch.setattr(tracing.export, "span_fields_text", counting)
    span_file = tmp_path / "spans.jsonl"
    processor = ThreadedSpanProcessor(
        JsonLinesFileExporter(span_file), BatchSettings(schedule_delay_s=60.0)
    )
    try:
        queue_requests(span_builder(processor), 3)
        assert encoded_on == []  # queued only, as each request ended
        gevent.sleep(0.05)  # the hub idles
        assert encoded_on == [_os_thread_ident()] * 3
        assert processor.force_flush(5000)
        assert len(encoded_on) == 3
        (line,) = span_file.read_text().splitlines()
        (scope,) = json.loads(line)["resourceSpans"][0]["scopeSpans"]
        assert [span["name"] for span in scope["spans"]] == ["GET /0", "GET /1", "GET /2"]
    finally:
        processor.shutdown()


def test_a_record_is_encoded_once_by_whichever_begins_first() -> None:
    """The hub (``build_ahead``) and the exporter thread (``encoded_spans``) share one
    claim on a record: the thread gets what the hub made with the same encoder, the hub
    makes nothing once the thread began, and another encoder makes the spans anew."""
    processor = ThreadedSpanProcessor(InMemorySpanExporter(), BatchSettings(schedule_delay_s=60))
    try:
        queue_requests(span_builder(processor), 2)
        ahead, late = processor._queue
        assert isinstance(ahead, RequestRecord) and isinstance(late, RequestRecord)
        assert ahead.build_ahead(span_fields_text)
        made = ahead.encoded_spans(span_fields_text)
        assert ahead.encoded_spans(span_fields_text) is made
        assert not ahead.build_ahead(span_fields_text)
        assert [type(span) for span in ahead.encoded_spans(span_fields_proto)] == [bytes]
        taken = late.encoded_spans(span_fields_text)
        assert not late.build_ahead(span_fields_text)
        assert late.encoded_spans(span_fields_text) is taken
    finally:
        processor.shutdown()


def test_the_thread_waits_for_a_record_the_hub_is_encoding() -> None:
    processor = ThreadedSpanProcessor(InMemorySpanExporter(), BatchSettings(schedule_delay_s=60))
    try:
        queue_requests(span_builder(processor), 1)
        (record,) = processor._queue
        assert isinstance(record, RequestRecord)
        record._claim.pop()  # the hub began encoding it
        got: list[Any] = []
        _start_os_thread(lambda: got.append(record.encoded_spans(span_fields_text)), ())
        time.sleep(0.05)
        assert got == []  # waiting, not encoding it again
        record._built = (span_fields_text, ["made by the hub"])
        assert wait_until(lambda: got, 5.0, 0.01)
        assert got == [["made by the hub"]]
    finally:
        processor.shutdown()


def test_a_record_the_hub_fails_to_encode_is_left_for_the_thread_to_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A failure while the hub encodes ahead never reaches its loop: the thread meets
    it again when it exports, and counts the record's spans dropped, as it always did."""

    def broken() -> Any:
        raise RuntimeError("derive broke")

    processor = ThreadedSpanProcessor(
        JsonLinesFileExporter(tmp_path / "spans.jsonl"), BatchSettings(schedule_delay_s=60.0)
    )
    try:
        queue_requests(span_builder(processor), 1, derive=(broken, ()))
        (record,) = processor._queue
        gevent.sleep(0.05)  # the hub idles, and fails
        assert record._built == (None, None)
        assert "derive broke" not in capfd.readouterr().err  # gevent reports what reaches it
        assert processor.force_flush(5000)
        assert (processor.exported_spans, processor.dropped_spans) == (0, 1)
        assert "derive broke" in caplog.text
    finally:
        processor.shutdown()


def test_records_the_hub_had_no_time_for_are_not_kept_for_it(tmp_path: Path) -> None:
    """A hub never idle (a worker at its capacity): the thread encodes the records, and
    the hub keeps no more of them than the queue holds."""
    processor = ThreadedSpanProcessor(
        JsonLinesFileExporter(tmp_path / "spans.jsonl"),
        BatchSettings(schedule_delay_s=60.0, max_queue_size=4, max_export_batch_size=4),
    )
    try:
        builder = span_builder(processor)
        for _ in range(5):
            queue_requests(builder, 4)
            assert processor.force_flush(5000)
        assert (processor.exported_spans, processor.dropped_spans) == (20, 0)
        assert len(processor._ahead) == 4
        assert not any(record.build_ahead(span_fields_text) for record in processor._ahead)
    finally:
        processor.shutdown()


class _NeverIdle:
    """A hub's idle watcher that never runs: a worker at its capacity."""

    active = True


def test_a_hub_never_idle_builds_one_record_for_each_past_the_most_waiting(
    tmp_path: Path,
) -> None:
    processor = ThreadedSpanProcessor(
        JsonLinesFileExporter(tmp_path / "spans.jsonl"), BatchSettings(schedule_delay_s=60.0)
    )
    processor._idle = _NeverIdle()
    try:
        queue_requests(span_builder(processor), tracing.export.MOST_AHEAD + 3)
        records = list(processor._queue)
        gevent.sleep(0)  # one turn of the loop
        built = [record._built is not None for record in records]  # type: ignore[union-attr]
        assert built == [True] * 3 + [False] * tracing.export.MOST_AHEAD  # the oldest
    finally:
        processor.shutdown()
