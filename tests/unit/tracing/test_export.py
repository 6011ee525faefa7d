"""Span export off the hub: the threaded processor's queue, and the OTLP JSON-lines file."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from toolkit.wait import wait_until
from tracing.export import (
    EXPORT_THREAD,
    JsonLinesFileExporter,
    ThreadedSpanProcessor,
    encode_otlp_json,
)
from tracing.settings import BatchSettings

# Long enough that the worker thread only exports when told to (flush, full batch, shutdown).
NEVER_S = 60.0


class RecordingExporter(SpanExporter):
    """Remembers each batch and the OS thread that exported it."""

    def __init__(self, result: SpanExportResult = SpanExportResult.SUCCESS) -> None:
        self.result = result
        self.batches: list[list[str]] = []
        self.thread_idents: list[int] = []
        self.native_ids: list[int] = []
        self.raise_exc: Exception | None = None
        self.gate: threading.Event | None = None  # export waits on it when set
        self.entered = threading.Event()
        self.shutdown_calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.thread_idents.append(threading.get_ident())
        self.native_ids.append(threading.get_native_id())
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.raise_exc is not None:
            raise self.raise_exc
        self.batches.append([s.name for s in spans])
        return self.result

    def shutdown(self) -> None:
        self.shutdown_calls += 1

    @property
    def names(self) -> list[str]:
        return [name for batch in self.batches for name in batch]


def finished_spans(count: int, prefix: str = "span") -> list[ReadableSpan]:
    """Real, sampled SDK spans, already ended."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for i in range(count):
        with tracer.start_as_current_span(f"{prefix}-{i}"):
            pass
    return list(memory.get_finished_spans())


@pytest.fixture
def processors() -> Any:
    """Makes processors and shuts each one down at the end, so no thread outlives a test."""
    made: list[ThreadedSpanProcessor] = []

    def make(exporter: SpanExporter, **kwargs: Any) -> ThreadedSpanProcessor:
        kwargs.setdefault("schedule_delay_s", NEVER_S)
        processor = ThreadedSpanProcessor(exporter, BatchSettings(**kwargs))
        made.append(processor)
        return processor

    yield make
    for processor in made:
        if not processor._stopping:
            processor.shutdown()


# --- ThreadedSpanProcessor --------------------------------------------------------


def test_spans_are_exported_from_another_os_thread(processors: Any) -> None:
    exporter = RecordingExporter()
    processor = processors(exporter)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("test").start_as_current_span("GET /v1/offers/bike"):
        pass
    assert processor.force_flush(5000)
    assert exporter.names == ["GET /v1/offers/bike"]
    assert exporter.thread_idents, "export() never ran"
    assert threading.get_ident() not in exporter.thread_idents
    assert processor.exported_spans == 1
    assert processor.dropped_spans == 0
    # Named for top -H and the benchmark's per-thread CPU (on Linux).
    (tid,) = set(exporter.native_ids)
    comm = Path(f"/proc/self/task/{tid}/comm")
    assert not comm.parent.exists() or comm.read_text().strip() == EXPORT_THREAD


class CountingLock:
    """The processor's wake-up lock, counting how often its thread waits on it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.waits = 0

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        self.waits += 1
        return bool(self.lock.acquire(*args, **kwargs))

    def release(self) -> None:
        self.lock.release()


def test_an_idle_exporter_thread_sleeps_until_a_span_comes(processors: Any) -> None:
    """Nothing queued: the thread does not wake every schedule delay (each wake-up of an
    idle worker costs CPU); the first span of a batch wakes it, and the batch still goes
    out after the delay."""
    exporter = RecordingExporter()
    processor = processors(exporter, schedule_delay_s=0.01)
    wake = processor._wake = CountingLock(processor._wake)
    processor._signal()  # past the wait it was in before the swap
    time.sleep(0.3)  # 30 schedule delays
    assert wake.waits <= 2, wake.waits
    (span,) = finished_spans(1)
    processor.on_end(span)
    assert wait_until(lambda: exporter.names == ["span-0"], 5, 0.005)
    time.sleep(0.3)
    assert wake.waits <= 5, wake.waits


def test_spans_that_come_during_an_export_wait_for_their_batch_to_form(
    processors: Any,
) -> None:
    """A busy worker's spans keep coming while a batch is exported: they go out when their
    own batch is full or its schedule delay has passed, not a few at a time right behind
    it (each export has a fixed cost: an HTTP request for OTLP)."""
    exporter = RecordingExporter()
    exporter.gate = threading.Event()
    processor = processors(exporter, max_export_batch_size=2)
    first, late, full = finished_spans(2), finished_spans(1, "late"), finished_spans(2, "full")
    for span in first:  # a full batch: exported at once, the exporter held
        processor.on_end(span)
    assert exporter.entered.wait(5)
    processor.on_end(late[0])  # the first span of the next batch, during the export
    exporter.gate.set()
    time.sleep(0.2)  # the thread is back, waiting for the late span's batch
    assert exporter.batches == [["span-0", "span-1"]]
    for span in full:  # the late span's batch fills: out at once, and what is behind it
        processor.on_end(span)
    assert wait_until(lambda: len(exporter.batches) == 2, 5, 0.005)
    time.sleep(0.2)
    assert exporter.batches == [["span-0", "span-1"], ["late-0", "full-0"]]
    assert processor.force_flush(5000)  # a flush sends the rest, short of a batch
    assert exporter.batches[2:] == [["full-1"]]


def test_spans_beyond_the_queue_are_dropped_and_counted_without_blocking(
    processors: Any,
) -> None:
    exporter = RecordingExporter()
    exporter.gate = threading.Event()  # the exporter hangs, as a dead collector would
    processor = processors(exporter, max_queue_size=3, max_export_batch_size=1)
    spans = finished_spans(8)
    processor.on_end(spans[0])  # a full batch: wakes the thread, which gets stuck exporting
    assert exporter.entered.wait(5)
    offered = threading.Event()

    def offer_the_rest() -> None:
        for span in spans[1:]:
            processor.on_end(span)
        offered.set()

    threading.Thread(target=offer_the_rest, daemon=True).start()
    # The exporter stays stuck until the gate opens below: on_end can only return if it
    # never waits for the exporter (the 10 s guard only keeps a regression from hanging).
    assert offered.wait(10), "on_end blocked behind a stuck exporter"
    assert not exporter.gate.is_set()
    assert processor.dropped_spans == 4  # 7 offered, 3 fit in the queue
    exporter.gate.set()
    assert processor.force_flush(5000)
    assert exporter.names == [s.name for s in spans[:4]]
    assert processor.exported_spans == 4
    assert processor.dropped_spans == 4


class FakeRecord:
    """A request's spans not yet built (``tracing.export.SpanRecord``)."""

    def __init__(self, prefix: str, spans: int) -> None:
        self.prefix = prefix
        self.span_count = spans
        self.resource = Resource.create({})
        self.instrumentation_scope = None

    def encoded_spans(self, encode: Any) -> list[Any]:
        raise AssertionError("only the span file and the OTLP exporters encode records")

    def readable_spans(self) -> list[ReadableSpan]:
        return finished_spans(self.span_count, self.prefix)


def test_records_count_their_spans_in_the_queue_batches_and_drops(processors: Any) -> None:
    exporter = RecordingExporter()
    processor = processors(exporter, max_queue_size=7, max_export_batch_size=4)
    processor._signal = lambda: None  # the thread sleeps while the queue fills
    processor.on_record(FakeRecord("a", 3))
    processor.on_record(FakeRecord("b", 3))
    processor.on_record(FakeRecord("c", 3))  # 9 spans would not fit in 7
    processor.on_end(finished_spans(1, "live")[0])
    assert processor.dropped_spans == 3
    del processor._signal
    assert processor.force_flush(5000)
    # A batch takes whole records up to the batch size, built into SDK spans there.
    assert exporter.batches == [["a-0", "a-1", "a-2"], ["b-0", "b-1", "b-2", "live-0"]]
    assert (processor.exported_spans, processor.dropped_spans) == (7, 3)
    processor.on_record(FakeRecord("d", 2))  # the queue's room came back
    assert processor.force_flush(5000)
    assert processor.exported_spans == 9


def test_a_record_that_fails_to_build_counts_its_spans_dropped(
    processors: Any, caplog: pytest.LogCaptureFixture
) -> None:
    processor = processors(RecordingExporter())
    record = FakeRecord("broken", 4)
    record.readable_spans = lambda: 1 / 0  # type: ignore[assignment,method-assign,misc]
    processor.on_record(record)
    assert processor.force_flush(5000)
    assert (processor.exported_spans, processor.dropped_spans) == (0, 4)
    assert "dropped 4 spans" in caplog.text


def test_a_raising_exporter_never_raises_and_counts_the_spans_dropped(
    processors: Any, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = RecordingExporter()
    exporter.raise_exc = ConnectionError("collector down")
    processor = processors(exporter)
    for span in finished_spans(3):
        processor.on_end(span)
    assert processor.force_flush(5000)
    assert processor.dropped_spans == 3
    assert processor.exported_spans == 0
    assert "span export failed; dropped 3 spans" in caplog.text
    # The worker thread survived: the next batch goes out once the collector is back.
    exporter.raise_exc = None
    for span in finished_spans(2, prefix="later"):
        processor.on_end(span)
    assert processor.force_flush(5000)
    assert exporter.names == ["later-0", "later-1"]
    assert processor.exported_spans == 2


def test_a_failed_export_result_counts_the_spans_dropped(processors: Any) -> None:
    processor = processors(RecordingExporter(SpanExportResult.FAILURE))
    for span in finished_spans(2):
        processor.on_end(span)
    assert processor.force_flush(5000)
    assert (processor.exported_spans, processor.dropped_spans) == (0, 2)


def test_force_flush_delivers_everything_queued_in_batches(processors: Any) -> None:
    exporter = RecordingExporter()
    processor = processors(exporter, max_export_batch_size=4)
    spans = finished_spans(10)
    for span in spans:
        processor.on_end(span)
    assert processor.force_flush(5000)
    assert exporter.names == [s.name for s in spans]
    assert all(len(batch) <= 4 for batch in exporter.batches)
    assert processor.exported_spans == 10


def test_unsampled_spans_are_ignored(processors: Any) -> None:
    exporter = RecordingExporter()
    processor = processors(exporter)
    unsampled = ReadableSpan(
        name="not sampled",
        context=SpanContext(
            trace_id=0x1234, span_id=0x5678, is_remote=False, trace_flags=TraceFlags(0)
        ),
    )
    processor.on_end(unsampled)
    assert processor.force_flush(5000)
    assert exporter.batches == []
    assert (processor.exported_spans, processor.dropped_spans) == (0, 0)


def test_shutdown_delivers_the_queue_stops_the_thread_and_shuts_the_exporter_down(
    processors: Any,
) -> None:
    exporter = RecordingExporter()
    processor = processors(exporter)
    spans = finished_spans(3)
    for span in spans[:2]:
        processor.on_end(span)
    started = time.monotonic()
    processor.shutdown()
    assert time.monotonic() - started < 2, "shutdown waited for the export interval"
    assert exporter.names == [s.name for s in spans[:2]]
    assert exporter.shutdown_calls == 1
    processor.shutdown()  # a second provider sharing the processor: nothing more
    assert exporter.shutdown_calls == 1
    # After shutdown nothing is queued any more.
    processor.on_end(spans[2])
    assert len(processor._queue) == 0
    assert exporter.names == [s.name for s in spans[:2]]
    if sys.platform.startswith("linux"):
        task = Path(f"/proc/self/task/{exporter.native_ids[0]}")
        assert wait_until(lambda: not task.exists(), 2, 0.01), (
            "the export thread is still running after shutdown"
        )


# --- JsonLinesFileExporter / encode_otlp_json ------------------------------------

RESOURCE = Resource.create({"service.name": "pricingservice", "pricing.pool": "io"})


def sdk_spans() -> list[ReadableSpan]:
    """A server span with a client child, and one span of every other kind."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("GET /v1/offers/bike", kind=SpanKind.SERVER) as server:
        server.set_status(Status(StatusCode.ERROR))
        with tracer.start_as_current_span(
            "GET /vehicles/v1/nearby",
            kind=SpanKind.CLIENT,
            attributes={
                "server.port": 8200,
                "gevent.network.duration": 0.1125,
                "pricing.cached": False,
                "server.address": "127.0.0.1",
                "gevent.scheduling.culprits": ["POST /v1/offers/rideshare=0.272800", "<hub>=0.01"],
                "pricing.retries": [1, 2],
            },
        ):
            pass
    for kind in (SpanKind.INTERNAL, SpanKind.PRODUCER, SpanKind.CONSUMER):
        with tracer.start_as_current_span(f"kind-{kind.name}", kind=kind):
            pass
    return list(memory.get_finished_spans())


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        span["name"]: span
        for rs in document["resourceSpans"]
        for scope in rs["scopeSpans"]
        for span in scope["spans"]
    }


def test_ids_are_lower_case_hex_and_children_name_their_parent() -> None:
    spans = sdk_spans()
    encoded = by_name(encode_otlp_json(spans))
    for span in spans:
        item = encoded[span.name]
        assert item["traceId"] == format(span.context.trace_id, "032x")
        assert item["spanId"] == format(span.context.span_id, "016x")
        assert len(item["traceId"]) == 32 and len(item["spanId"]) == 16
        assert item["traceId"] == item["traceId"].lower()
    server, client = encoded["GET /v1/offers/bike"], encoded["GET /vehicles/v1/nearby"]
    assert client["parentSpanId"] == server["spanId"]
    assert client["traceId"] == server["traceId"]
    assert "parentSpanId" not in server


def test_small_ids_keep_their_leading_zeros() -> None:
    span = ReadableSpan(
        name="tiny ids",
        context=SpanContext(trace_id=1, span_id=2, is_remote=False, trace_flags=TraceFlags(1)),
        parent=SpanContext(trace_id=1, span_id=3, is_remote=True),
        start_time=10,
        end_time=20,
    )
    (item,) = by_name(encode_otlp_json([span])).values()
    assert item["traceId"] == "0" * 31 + "1"
    assert item["spanId"] == "0" * 15 + "2"
    assert item["parentSpanId"] == "0" * 15 + "3"


def test_kinds_status_and_times_follow_otlp_json() -> None:
    spans = sdk_spans()
    encoded = by_name(encode_otlp_json(spans))
    assert encoded["GET /v1/offers/bike"]["kind"] == 2
    assert encoded["GET /vehicles/v1/nearby"]["kind"] == 3
    assert encoded["kind-INTERNAL"]["kind"] == 1
    assert encoded["kind-PRODUCER"]["kind"] == 4
    assert encoded["kind-CONSUMER"]["kind"] == 5
    assert encoded["GET /v1/offers/bike"]["status"] == {"code": 2}
    # OTLP/JSON leaves out fields at their default (status code 0, UNSET).
    assert encoded["GET /vehicles/v1/nearby"]["status"].get("code", 0) == 0
    for span in spans:
        item = encoded[span.name]
        # 64-bit nanoseconds travel as decimal strings in OTLP/JSON.
        assert item["startTimeUnixNano"] == str(span.start_time)
        assert item["endTimeUnixNano"] == str(span.end_time)


def test_attribute_types_follow_otlp_json() -> None:
    encoded = by_name(encode_otlp_json(sdk_spans()))
    attrs = {a["key"]: a["value"] for a in encoded["GET /vehicles/v1/nearby"]["attributes"]}
    assert attrs["server.port"] == {"intValue": "8200"}
    assert attrs["gevent.network.duration"] == {"doubleValue": 0.1125}
    assert attrs["pricing.cached"] == {"boolValue": False}  # not intValue "0"
    assert attrs["server.address"] == {"stringValue": "127.0.0.1"}
    assert attrs["gevent.scheduling.culprits"] == {
        "arrayValue": {
            "values": [
                {"stringValue": "POST /v1/offers/rideshare=0.272800"},
                {"stringValue": "<hub>=0.01"},
            ]
        }
    }
    assert attrs["pricing.retries"] == {
        "arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}
    }


def test_events_links_and_the_instrumentation_scope_are_kept() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("pricingservice", "1.2.3")
    with tracer.start_as_current_span("GET /v1/offers/bike", kind=SpanKind.SERVER) as server:
        server.add_event("handler started", {"gevent.inbound.delay": 0.002}, timestamp=1234)
        linked = server.get_span_context()
    with tracer.start_as_current_span("retry", links=[Link(linked, {"why": "retry"})]):
        pass
    document = encode_otlp_json(memory.get_finished_spans())
    (scope,) = document["resourceSpans"][0]["scopeSpans"]
    assert scope["scope"] == {"name": "pricingservice", "version": "1.2.3"}
    spans = by_name(document)
    (event,) = spans["GET /v1/offers/bike"]["events"]
    assert event["name"] == "handler started" and event["timeUnixNano"] == "1234"
    assert event["attributes"] == [{"key": "gevent.inbound.delay", "value": {"doubleValue": 0.002}}]
    (link,) = spans["retry"]["links"]
    assert link["traceId"] == format(linked.trace_id, "032x")
    assert link["spanId"] == format(linked.span_id, "016x")
    assert link["attributes"] == [{"key": "why", "value": {"stringValue": "retry"}}]


def test_resource_attributes_are_encoded_once_per_resource() -> None:
    document = encode_otlp_json(sdk_spans())
    (resource_spans,) = document["resourceSpans"]
    resource = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": "pricingservice"}
    assert resource["pricing.pool"] == {"stringValue": "io"}


def test_file_exporter_writes_one_json_line_per_batch(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "spans.jsonl"  # parent directories are created
    exporter = JsonLinesFileExporter(path)
    spans = sdk_spans()
    assert exporter.export(spans[:2]) is SpanExportResult.SUCCESS
    assert exporter.export(spans[2:]) is SpanExportResult.SUCCESS
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert sorted(by_name(first)) == sorted(s.name for s in spans[:2])
    assert sorted(by_name(second)) == sorted(s.name for s in spans[2:])
    assert path.read_text().endswith("\n")


def test_file_exporter_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text('{"resourceSpans":[]}\n')
    JsonLinesFileExporter(path).export(sdk_spans())
    lines = path.read_text().splitlines()
    assert lines[0] == '{"resourceSpans":[]}'
    assert len(lines) == 2


def test_several_exporters_appending_to_one_file_write_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    # Big batches (tens of kB per line) from several "workers" at once.
    batch = finished_spans(200, prefix="x" * 100)
    writers, batches_each = 4, 10
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def worker() -> None:
        try:
            exporter = JsonLinesFileExporter(path)
            start.wait(5)
            for _ in range(batches_each):
                exporter.export(batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    lines = path.read_text().splitlines()
    assert len(lines) == writers * batches_each
    for line in lines:
        assert len(by_name(json.loads(line))) == 200


def test_a_write_the_full_disk_cut_short_leaves_no_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full file system takes part of a line: the part is cut off, the batch counts as
    failed (dropped), and the file still reads back line by line once there is room."""
    import os

    from tracing import export

    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesFileExporter(path)
    assert exporter.export(sdk_spans()) is SpanExportResult.SUCCESS
    real_write = os.write
    monkeypatch.setattr(export.os, "write", lambda fd, data: real_write(fd, data[: len(data) // 2]))
    assert exporter.export(sdk_spans()) is SpanExportResult.FAILURE
    monkeypatch.setattr(export.os, "write", real_write)
    assert exporter.export(sdk_spans()) is SpanExportResult.SUCCESS
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        json.loads(line)
