"""Span export off the gevent hub: a bounded queue drained by a real OS thread.

Under monkey patching, the SDK's BatchSpanProcessor runs its worker "thread"
as a greenlet on the hub: its encoding and network time would then show up as
scheduling delay of the very requests we measure. Here the hub only appends
to a bounded deque (dropping, and counting, what does not fit); a real OS
thread, made from `gevent.monkey.get_original`, encodes and exports.
Export never blocks or breaks a request.

The queue holds the SDK's ended spans (a request traced live) and the records of
requests whose spans were not built as they ran (``SpanRecord``: a sampled or slow
request, ``tracing.span_records``). A record's spans are encoded directly, with the
encoders SDK spans go through: OTLP/JSON text for the span file (``span_fields_text``),
OTLP protobuf for the OTLP exporters (``tracing.otlp_protobuf``); SDK spans are built
from it only for the console. The hub encodes records while it has nothing else to do
(an idle watcher, one record at a time), and past ``MOST_AHEAD`` waiting one for each
new one (a worker at its capacity has no idle time); the thread encodes those left when
it exports. Encoded on the thread, the same work cost about the same CPU, but the
thread held the GIL while the hub's requests waited for it: with every request sampled
their tail was longer (``pricingctl bench tracing-overhead``, BENCHMARKS.md).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from typing import Protocol as Interface

from gevent import get_hub
from gevent.monkey import get_original
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from toolkit.wait import wait_until
from tracing import otlp_protobuf
from tracing.otlp_protobuf import encode_failed, export_request
from tracing.settings import BatchSettings, Exporter, Protocol, TracingSettings
from tracing.timing import native

log = logging.getLogger(__name__)

T = TypeVar("T")

# Raw OS-thread primitives. Not threading.Thread: under monkey patching the
# threading module's bookkeeping (get_ident, _active) is gevent's, and a real
# thread started through it trips over that at exit.
_start_new_thread, _allocate_lock, _get_native_id = get_original(
    "_thread", ["start_new_thread", "allocate_lock", "get_native_id"]
)
#: The exporter thread's OS name (``top -H``, ``ps -L``; the benchmark's per-thread CPU:
#: ``pricingctl bench tracing-overhead``). Linux keeps 15 characters.
EXPORT_THREAD = "span-export"

#: Records waiting for the hub past which it builds one for each new one, idle or not (a
#: worker at its capacity has no idle time): the thread then finds its batches built
#: (``ThreadedSpanProcessor``). Few: a busy worker's records carry wait spans, and a
#: batch holds fewer of them.
MOST_AHEAD = 4


class SpanRecord(Interface):
    """A request's spans as measured numbers, not yet built (``tracing.span_records``):
    what the hub queues instead of SDK spans; built on the exporter thread."""

    #: How many spans it makes: what the queue's and a batch's limits count.
    span_count: int

    @property
    def resource(self) -> Any: ...

    @property
    def instrumentation_scope(self) -> Any: ...

    def encoded_spans(self, encode: Callable[..., T]) -> list[T]:
        """Its spans as *encode* makes them from their fields (``span_fields_text``,
        OTLP/JSON, or ``tracing.otlp_protobuf.span_fields_proto``, its protobuf): those
        ``build_ahead`` made, when it was given the same *encode*."""
        ...

    def build_ahead(self, encode: Callable[..., Any]) -> bool:
        """Encode its spans now, for ``encoded_spans`` (on the hub, while it is idle),
        unless that began: then False. Never raises."""
        ...

    def readable_spans(self) -> list[ReadableSpan]:
        """Its spans as the SDK's, for an exporter that takes no record."""
        ...


class ThreadedSpanProcessor(SpanProcessor):
    """Batch processor whose worker is a real OS thread, never a greenlet. Its limits
    are ``OTEL_BSP_*`` (``tracing.settings.BatchSettings``). Without an exporter
    (``OTEL_TRACES_EXPORTER=none``) it keeps nothing and starts no thread. An exporter
    with a ``span_encoder`` (the span file's, the OTLP ones) has its records encoded on
    the hub while it is idle (``_build_while_idle``), and past ``MOST_AHEAD`` waiting,
    one for each new one."""

    def __init__(self, exporter: SpanExporter | None, batch: BatchSettings | None = None) -> None:
        batch = batch or BatchSettings()
        self.exporter = exporter
        self.max_queue_spans = batch.max_queue_size
        self.max_batch_spans = batch.max_export_batch_size
        self.export_interval_s = batch.schedule_delay_s
        self.export_timeout_s = batch.export_timeout_s
        self.dropped_spans = 0
        self.exported_spans = 0
        self._queue: deque[ReadableSpan | SpanRecord] = deque()
        # Spans in the queue: queued (written by the hub only) minus taken (by the
        # thread only), so that neither write is lost to the other thread's.
        self._queued_spans = 0
        self._taken_spans = 0
        # Held while nobody asked for an export; released to wake the thread.
        self._wake = _allocate_lock()
        self._wake.acquire()
        self._export_lock = _allocate_lock()
        self._done = _allocate_lock()
        self._done.acquire()
        self._stopping = exporter is None
        self._flush_asked = False
        self._pid = os.getpid()
        #: The per-span encoder the exporter's batches use, read as each record is
        #: encoded ahead (``native.use`` switches it); None: none is encoded ahead.
        self._span_encoder: Callable[[], Callable[..., Any]] | None = getattr(
            exporter, "span_encoder", None
        )
        # Queued records the hub has yet to encode; those the thread took first are
        # skipped. Bounded as the queue is: a hub never idle drops the oldest.
        self._ahead: deque[SpanRecord] = deque(maxlen=self.max_queue_spans)
        self._idle: Any = None  # the hub's idle watcher, made with the first record
        if exporter is None:
            self._done.release()
        else:
            _start_new_thread(self._run, ())

    def _signal(self) -> None:
        # Never blocks the hub: releasing an already released lock just fails.
        with contextlib.suppress(RuntimeError):
            self._wake.release()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        # Runs on the hub, in the request's greenlet: keep it to an append.
        if not span.context.trace_flags.sampled or self._stopping:
            return
        self._append(span, 1)

    def on_record(self, record: SpanRecord) -> None:
        """Queue a request's spans to be built (``SpanRecord``), or count them dropped
        when the queue is full. Runs on the hub, as the request ends: appends, and the
        idle watcher started that builds them."""
        if self._stopping or not self._append(record, record.span_count):
            return
        if self._span_encoder is None:
            return
        ahead = self._ahead
        ahead.append(record)
        idle = self._idle
        if idle is None:
            idle = self._idle = get_hub().loop.idle()
        if not idle.active:
            idle.start(self._build_while_idle)
        if len(ahead) > MOST_AHEAD:  # no idle time: one more, at the loop's next turn
            get_hub().loop.run_callback(self._build_next)

    def _build_while_idle(self) -> None:
        """The hub's idle watcher: the next record, then the loop polls again."""
        self._build_next()
        if not self._ahead:
            self._idle.stop()

    def _build_next(self) -> None:
        """Encode the next record the thread has not taken (on the hub). One at a time:
        a request that comes meanwhile waits for one record's encoding at most."""
        ahead = self._ahead
        encoder = self._span_encoder
        assert encoder is not None  # nothing is encoded ahead without one
        while ahead and not ahead.popleft().build_ahead(encoder()):
            pass

    def _append(self, item: ReadableSpan | SpanRecord, spans: int) -> bool:
        before = self._queued_spans - self._taken_spans
        if before + spans > self.max_queue_spans:
            self.dropped_spans += spans
            return False
        self._queue.append(item)
        self._queued_spans += spans
        batch = self.max_batch_spans
        if before == 0 or before < batch <= before + spans:
            self._signal()  # a batch begins (the thread sleeps until one does), or is full
        return True

    def _run(self) -> None:
        with contextlib.suppress(OSError):  # not Linux: the thread keeps its name
            Path(f"/proc/self/task/{_get_native_id()}/comm").write_text(EXPORT_THREAD)
        try:
            while not self._stopping:
                if not self._queue:
                    # Nothing to export: sleep until a span comes, not every interval (each
                    # wake-up costs an idle worker CPU: docs/traces.md, "What tracing costs").
                    self._wake.acquire()
                    continue
                # A signal left from before (the first span of this batch came while the
                # last one was exported) must not cut the batch short; one given while the
                # lock was already released is lost: a flush asked for and a full batch are
                # read here, not waited for.
                self._wake.acquire(blocking=False)
                if not self._flush_asked and not self._batch_full():
                    self._wake.acquire(timeout=self.export_interval_s)  # the batch forms
                flush, self._flush_asked = self._flush_asked, False
                self._drain(everything=flush)
            self._drain(everything=True)
        finally:
            self._done.release()

    def _batch_full(self) -> bool:
        return self._queued_spans - self._taken_spans >= self.max_batch_spans

    def _drain(self, everything: bool) -> None:
        """Export the batch that formed, then any full ones behind it; with *everything*
        (a flush, the shutdown), all that is queued. Spans short of a full batch wait for
        theirs to form, as ``OTEL_BSP_SCHEDULE_DELAY`` says: drained to the last span, a
        busy worker's spans, coming during each export, went out a few at a time, back to
        back, each few paying an export's fixed cost (``pricingctl bench
        tracing-overhead``, the OTLP mode's exporter thread)."""
        with self._export_lock:
            first = True
            while self._queue and (first or everything or self._batch_full()):
                first = False
                exporter = self.exporter
                assert exporter is not None  # nothing is queued without one
                batch, spans = self._take_batch()
                try:
                    if getattr(exporter, "takes_records", False):
                        result = exporter.export(batch)  # type: ignore[arg-type]
                    else:
                        result = exporter.export(readable_spans(batch))
                    if result is SpanExportResult.SUCCESS:
                        self.exported_spans += spans
                    else:
                        self.dropped_spans += spans
                except Exception:  # export must never take the process down
                    self.dropped_spans += spans
                    log.warning("span export failed; dropped %d spans", spans, exc_info=True)

    def _take_batch(self) -> tuple[list[ReadableSpan | SpanRecord], int]:
        """Up to a batch of spans from the queue (at least one item), and how many."""
        batch: list[ReadableSpan | SpanRecord] = []
        spans = 0
        queue = self._queue
        while queue:
            item = queue[0]
            count = 1 if isinstance(item, ReadableSpan) else item.span_count
            if batch and spans + count > self.max_batch_spans:
                break
            batch.append(queue.popleft())
            spans += count
        self._taken_spans += spans
        return batch, spans

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if os.getpid() != self._pid:
            return False
        self._flush_asked = True
        self._signal()
        end = time.monotonic() + min(timeout_millis / 1000, self.export_timeout_s)
        wait_until(lambda: not self._queue, end - time.monotonic(), 0.01)
        # Wait for a batch being exported right now.
        if self._export_lock.acquire(timeout=max(0.0, end - time.monotonic())):
            self._export_lock.release()
        return not self._queue

    def shutdown(self) -> None:
        # Idempotent: the exporter once is enough (the OTLP one warns "already
        # shutdown" on a second call).
        if self._stopping:
            return
        self._stopping = True
        self._signal()
        if os.getpid() == self._pid and self._done.acquire(timeout=self.export_timeout_s):
            self._done.release()
        if self.exporter is not None:
            self.exporter.shutdown()


#: Called on the exporter's thread after each request's spans are built: it hands the GIL
#: to the hub if the hub waits for it (and the core, when both share one). Without it the
#: hub waits for the switch interval (``sys.getswitchinterval()``) each time it wakes
#: during an export; with full sampling those waits delayed its calls past the wait
#: spans' threshold (``tracing.wait_spans``), and the wait spans drawn for them made yet
#: more to export (``pricingctl bench tracing-overhead``, the 100 % mode's p50 and CPU).
#: Where the hub does not wait, it costs a system call.
_let_the_hub_run = os.sched_yield


def readable_spans(items: Sequence[ReadableSpan | SpanRecord]) -> list[ReadableSpan]:
    """*items* as SDK spans: records built (on the exporter thread)."""
    out: list[ReadableSpan] = []
    for item in items:
        if isinstance(item, ReadableSpan):
            out.append(item)
        else:
            out.extend(item.readable_spans())
            _let_the_hub_run()
    return out


def span_processor(settings: TracingSettings) -> ThreadedSpanProcessor:
    """The worker's span processor, with the exporter and limits the environment names."""
    return ThreadedSpanProcessor(make_exporter(settings), settings.batch)


def make_exporter(settings: TracingSettings) -> SpanExporter | None:
    """``OTEL_TRACES_EXPORTER`` and ``OTEL_EXPORTER_OTLP_PROTOCOL`` as the SDK reads
    them; headers, timeout, compression, certificates (and gRPC's ``_INSECURE``): the
    OTLP exporters read their ``OTEL_EXPORTER_OTLP_*`` variables themselves. None:
    spans are not exported."""
    kind = settings.traces_exporter
    if kind is Exporter.NONE:
        return None
    if kind is Exporter.CONSOLE:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # One span per line: the pools' log streams hold one JSON object per line.
        return ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + "\n")
    if kind is Exporter.FILE:
        return JsonLinesFileExporter(settings.span_file)
    # The SDK's OTLP exporters, fed protobuf written straight from the records.
    from tracing.otlp_exporters import HttpRecordExporter, grpc_record_exporter

    if settings.protocol is Protocol.GRPC:
        return grpc_record_exporter(encode_otlp_protobuf, settings.otlp_endpoint)
    return HttpRecordExporter(encode_otlp_protobuf, endpoint=settings.otlp_endpoint)


class JsonLinesFileExporter(SpanExporter):
    """Writes each batch as one line of OTLP JSON (an ExportTraceServiceRequest, the
    bytes the SDK's OTLP encoder gives: ``encode_otlp_line``).

    The fallback when no collector runs: `pricingctl traces --from-spans` reads it.
    Several worker processes append to the same file; each line is written
    with one `write` to a file opened in append mode, so lines do not interleave.
    It takes the processor's records as they are (``SpanRecord``): no SDK span is built.
    """

    takes_records = True

    @staticmethod
    def span_encoder() -> Callable[..., str]:
        """The per-span encoder its lines are made with (``encode_otlp_line``)."""
        return span_fields_text

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan | SpanRecord]) -> SpanExportResult:
        line = encode_otlp_line(spans, "\n")
        # Owner only: spans name routes, timings and hosts of the service.
        data = line.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            written = os.write(fd, data)
            if written < len(data):
                _cut_torn_line(fd, written)
                return SpanExportResult.FAILURE  # the batch is dropped, and counted
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _cut_torn_line(fd: int, written: int) -> None:
    """A write the file system cut short (it filled up) left the start of a line: cut it
    off, or every later line would follow it on the same line and the file would not
    read back (``pricingctl traces`` refuses a line that is not JSON). Only when nothing
    was appended since (by another worker): then the torn bytes are the file's last."""
    end = os.lseek(fd, 0, os.SEEK_CUR)
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_size == end:
            os.ftruncate(fd, end - written)


def encode_otlp_protobuf(spans: Sequence[ReadableSpan | SpanRecord]) -> bytes:
    """The ``ExportTraceServiceRequest`` bytes the SDK's OTLP exporters send for *spans*
    (SDK spans, or records whose spans it encodes in their place), written straight from
    their fields (``tracing.otlp_protobuf``): no SDK span or protobuf message is built."""
    return export_request(group_spans(spans, otlp_protobuf.span_encoder()))


def encode_otlp_json(spans: Sequence[ReadableSpan | SpanRecord]) -> dict[str, Any]:
    """OTLP/JSON of *spans* as a document (``encode_otlp_line`` parsed back)."""
    parsed: dict[str, Any] = json.loads(encode_otlp_line(spans))
    return parsed


def encode_otlp_line(spans: Sequence[ReadableSpan | SpanRecord], end: str = "") -> str:
    """OTLP/JSON of *spans* (SDK spans, or records whose spans it encodes in their
    place), an ExportTraceServiceRequest, in compact JSON: the bytes
    ``json.dumps(..., separators=(",", ":"))`` writes of what the SDK's own OTLP encoder
    (``opentelemetry.exporter.otlp.proto.common``, the one the OTLP exporters send)
    read back with protobuf's canonical JSON mapping gives, except ids as hex and enums
    as numbers (OTLP/JSON): events, links, the instrumentation scope, dropped counts and
    trace state are all there, in the same order. *end*: appended (the file's newline).

    Written straight to text, without building protobuf messages, walking them back
    (``MessageToDict``) and dumping the dicts, which cost the exporter thread several
    times the CPU per span (both measured by ``pricingctl bench span-cost``, batches of
    512; it runs on the exporter's OS thread, never on the hub). The mapping's
    rules kept here: a field at its default (0, "", empty) is left out, except a value of
    an ``AnyValue`` (a oneof); 64-bit integers are decimal strings, ``fixed32`` flags a
    number; doubles JSON cannot hold are "NaN", "Infinity", "-Infinity"; strings are
    escaped to ASCII as ``json.dumps`` does; fields go in field-number order.
    ``tests/unit/tracing/test_export_encoding.py`` compares the bytes with the SDK's
    encoder on spans of every shape."""
    by_resource = group_spans(spans, span_fields_text)
    if not by_resource:
        return "{}" + end
    # One list of parts joined once: each span's text is copied into the line once (a
    # batch's line is ~0.7 MB; nested joins and concatenations copied it ~8 times).
    out = ['{"resourceSpans":[']
    for resource, scopes in by_resource.items():
        attrs = _attributes_text(resource.attributes)
        out.append(
            '{"resource":{' + ('"attributes":' + attrs if attrs else "") + '},"scopeSpans":['
        )
        for scope, encoded in scopes.items():
            out.append('{"scope":' + _scope_text(scope) + ',"spans":[')
            for text in encoded:
                out.append(text)
                out.append(",")
            if encoded:
                out.pop()
            out.append("]")
            if scope is not None and scope.schema_url:
                out.append(',"schemaUrl":' + _string(scope.schema_url))
            out.append("},")
        out[-1] = "}]"
        if resource.schema_url:
            out.append(',"schemaUrl":' + _string(resource.schema_url))
        out.append("},")
    out[-1] = "}]}" + end
    return "".join(out)


def group_spans(
    spans: Sequence[ReadableSpan | SpanRecord], encode: Callable[..., T]
) -> dict[Any, dict[Any, list[T]]]:
    """*spans* (SDK spans, and records of spans) as *encode* makes each from its fields,
    grouped as the SDK's OTLP encoder groups them: by equal resources, then equal
    scopes, in the order they come."""
    # Each distinct object is hashed once: a Resource's hash is a JSON dump of its
    # attributes.
    by_resource: dict[Any, dict[Any, list[T]]] = {}
    groups: dict[tuple[int, int], list[T]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        group = groups.get((id(resource), id(scope)))
        if group is None:
            scopes = by_resource.setdefault(resource, {})
            group = groups[id(resource), id(scope)] = scopes.setdefault(scope, [])
        if isinstance(span, ReadableSpan):
            group.append(sdk_span_encoded(span, encode))
        else:
            group.extend(span.encoded_spans(encode))
            _let_the_hub_run()
    return by_resource


# OTLP's span flags: bit 8 says whether the parent's "is remote" is known, bit 9 says it is.
_FLAGS_HAS_IS_REMOTE = 0x100
_FLAGS_IS_REMOTE = 0x200
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_KINDS = {
    SpanKind.INTERNAL: "1",
    SpanKind.SERVER: "2",
    SpanKind.CLIENT: "3",
    SpanKind.PRODUCER: "4",
    SpanKind.CONSUMER: "5",
}
# A JSON string literal, escaped to ASCII: json.dumps's own (C) escaping.
_string = json.encoder.encode_basestring_ascii
# Attribute key -> its JSON prefix ('{"key":"http.route","value":'); keys are few.
_key_prefixes: dict[str, str] = {}
_MAX_KEY_PREFIXES = 4096
# (key, str or int value) -> (the value's type, its KeyValue text): most such pairs
# repeat from span to span (methods, hosts, ports, status codes, routes).
_pair_texts: dict[tuple[str, Any], tuple[type, str]] = {}
_MAX_PAIR_TEXTS = 8192


def _flags(parent: Any) -> str:
    if parent is not None and parent.is_remote:
        return str(_FLAGS_HAS_IS_REMOTE | _FLAGS_IS_REMOTE)
    return str(_FLAGS_HAS_IS_REMOTE)


def sdk_span_encoded(span: ReadableSpan, encode: Callable[..., T]) -> T:
    """An SDK span as *encode* makes it from its fields (``span_fields_text``, or
    ``tracing.otlp_protobuf.span_fields_proto``)."""
    context = span.get_span_context()
    assert context is not None  # an SDK span always has one
    parent = span.parent
    status = span.status
    return encode(
        context.trace_id,
        context.span_id,
        trace_state_text(context.trace_state),
        parent.span_id if parent is not None else None,
        parent is not None and parent.is_remote,
        span.name,
        span.kind,
        span.start_time,
        span.end_time,
        span.attributes,
        span.events,
        status.status_code.value if status is not None else None,
        status.description if status is not None else None,
        dropped=(span.dropped_attributes, span.dropped_events, span.dropped_links),
        links=span.links,
    )


def trace_state_text(trace_state: Any) -> str:
    """A span's trace state as the SDK's encoders write it ("" for none)."""
    if trace_state is None:
        return ""
    return ",".join([f"{key}={value}" for key, value in trace_state.items()])


def span_fields_text(
    trace_id: int,
    span_id: int,
    trace_state: str,
    parent_span_id: int | None,
    parent_remote: bool,
    name: str,
    kind: SpanKind,
    start_ns: int | None,
    end_ns: int | None,
    attributes: Any,
    events: Sequence[Any],
    status_code: int | None,
    status_message: str | None = None,
    *,
    dropped: tuple[int, int, int] = (0, 0, 0),
    links: Sequence[Any] = (),
) -> str:
    """One span of ``encode_otlp_line``'s document, from its fields: what an SDK span
    gives (``sdk_span_encoded``), and what ``tracing.span_records`` builds from a request's
    measurements on the exporter thread without one. *trace_state*: its header text;
    *parent_span_id*: None for a root; *status_code*: None for no status; *dropped*:
    attributes, events and links dropped."""
    out = [f'{{"traceId":"{trace_id:032x}","spanId":"{span_id:016x}"']
    if trace_state:
        out.append(',"traceState":' + _string(trace_state))
    if parent_span_id is not None:
        out.append(f',"parentSpanId":"{parent_span_id:016x}"')
    if name:
        out.append(',"name":' + _string(name))
    out.append(',"kind":' + _KINDS[kind])
    if start_ns:
        out.append(f',"startTimeUnixNano":"{int(start_ns)}"')
    if end_ns:
        out.append(f',"endTimeUnixNano":"{int(end_ns)}"')
    attrs = _attributes_text(attributes)
    if attrs:
        out.append(',"attributes":' + attrs)
    dropped_attributes, dropped_events, dropped_links = dropped
    if dropped_attributes:
        out.append(f',"droppedAttributesCount":{dropped_attributes}')
    if events:
        out.append(',"events":[' + ",".join([_event_text(event) for event in events]) + "]")
    if dropped_events:
        out.append(f',"droppedEventsCount":{dropped_events}')
    if links:
        out.append(',"links":[' + ",".join([_link_text(link) for link in links]) + "]")
    if dropped_links:
        out.append(f',"droppedLinksCount":{dropped_links}')
    if status_code is not None:
        fields = []
        if status_message:
            fields.append('"message":' + _string(status_message))
        if status_code:
            fields.append(f'"code":{status_code}')
        out.append(',"status":{' + ",".join(fields) + "}")
    flags = _FLAGS_HAS_IS_REMOTE | _FLAGS_IS_REMOTE if parent_remote else _FLAGS_HAS_IS_REMOTE
    out.append(f',"flags":{flags}}}')
    return "".join(out)


def _event_text(event: Any) -> str:
    fields = []
    if event.timestamp:
        fields.append(f'"timeUnixNano":"{int(event.timestamp)}"')
    if event.name:
        fields.append('"name":' + _string(event.name))
    attrs = _attributes_text(event.attributes)
    if attrs:
        fields.append('"attributes":' + attrs)
    if event.dropped_attributes:
        fields.append(f'"droppedAttributesCount":{event.dropped_attributes}')
    return "{" + ",".join(fields) + "}"


def _link_text(link: Any) -> str:
    # As the SDK's encoder: no trace state on links.
    out = f'{{"traceId":"{link.context.trace_id:032x}","spanId":"{link.context.span_id:016x}"'
    attrs = _attributes_text(link.attributes)
    if attrs:
        out += ',"attributes":' + attrs
    if link.dropped_attributes:
        out += f',"droppedAttributesCount":{link.dropped_attributes}'
    return out + ',"flags":' + _flags(link.context) + "}"


def _scope_text(scope: Any) -> str:
    if scope is None:
        return "{}"
    fields = []
    if scope.name:
        fields.append('"name":' + _string(scope.name))
    if scope.version:
        fields.append('"version":' + _string(scope.version))
    attrs = _attributes_text(scope.attributes)
    if attrs:
        fields.append('"attributes":' + attrs)
    return "{" + ",".join(fields) + "}"


def _attributes_text(attributes: Any) -> str:
    """A JSON array of KeyValue, or "" when there is none."""
    if not attributes:
        return ""
    out = []
    prefixes = _key_prefixes
    pairs = _pair_texts
    for key, value in attributes.items():
        # Inlined for the common values (this runs for every attribute of every span): a
        # float is written, a str or int key-value pair seen before is looked up.
        kind = type(value)
        try:
            if kind is float and -math.inf < value < math.inf:
                prefix = prefixes.get(key) or _key_prefix(key)
                out.append(f'{prefix}{{"doubleValue":{float.__repr__(value)}}}}}')
                continue
            if kind is str or kind is int:
                text = pairs.get((key, value))
                if text is None or kind is not text[0]:
                    text = _pair_text(key, value, kind)
                out.append(text[1])
                continue
            prefix = prefixes.get(key) or _key_prefix(key)
            out.append(f"{prefix}{_value_text(value)}}}")
        except Exception as error:  # as the SDK's encoder: the attribute is left out
            encode_failed(key, error)
    return "[" + ",".join(out) + "]" if out else ""


def _pair_text(key: str, value: str | int, kind: type) -> tuple[type, str]:
    """A str or int attribute's KeyValue text, remembered while there is room (a value
    of its type: True == 1 as a key, but not as a value)."""
    prefix = _key_prefixes.get(key) or _key_prefix(key)
    text = (kind, f"{prefix}{_value_text(value)}}}")
    if len(_pair_texts) < _MAX_PAIR_TEXTS and type(key) is str:
        _pair_texts[key, value] = text
    return text


def _key_prefix(key: str) -> str:
    prefix = '{"key":' + _string(key) + ',"value":' if key else '{"value":'
    if len(_key_prefixes) < _MAX_KEY_PREFIXES and type(key) is str:
        _key_prefixes[key] = prefix
    return prefix


def _key_value_text(key: str, value: Any) -> str:
    return (_key_prefixes.get(key) or _key_prefix(key)) + _value_text(value) + "}"


def _value_text(value: Any) -> str:
    # The types attribute values have (the SDK keeps str, bool, int, float and tuples of
    # them), by exact type first; then the SDK encoder's checks, in its order (bool
    # before int, str and bytes before Sequence), for anything else.
    kind = type(value)
    if kind is str:
        if not value.isascii():
            value.encode()  # protobuf refuses a string that is not UTF-8 (lone surrogates)
        return '{"stringValue":' + _string(value) + "}"
    if kind is float:
        return '{"doubleValue":' + _double(value) + "}"
    if kind is int and _INT64_MIN <= value <= _INT64_MAX:
        return f'{{"intValue":"{value}"}}'
    if (kind is tuple or kind is list) and value:
        return '{"arrayValue":{"values":[' + ",".join([_value_text(v) for v in value]) + "]}}"
    if value is None:
        return "{}"
    if isinstance(value, bool):
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, str):
        value.encode()
        return '{"stringValue":' + _string(value) + "}"
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{value} does not fit in int64")
        return f'{{"intValue":"{int(value)}"}}'
    if isinstance(value, float):
        return '{"doubleValue":' + _double(float(value)) + "}"
    if isinstance(value, bytes):
        return '{"bytesValue":"' + base64.b64encode(value).decode() + '"}'
    if isinstance(value, Sequence):
        values = ",".join([_value_text(v) for v in value])
        return '{"arrayValue":{' + ('"values":[' + values + "]" if values else "") + "}}"
    if isinstance(value, Mapping):
        pairs = ",".join([_key_value_text(str(k), v) for k, v in value.items()])
        return '{"kvlistValue":{' + ('"values":[' + pairs + "]" if pairs else "") + "}}"
    raise Exception(f"Invalid type {type(value)} of value {value}")


def _double(value: float) -> str:
    # json.dumps writes a float with float.__repr__; JSON has no NaN nor infinities.
    if value != value:
        return '"NaN"'
    if value in (math.inf, -math.inf):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return float.__repr__(value)


# The one place the compiled encoder comes in: its own extension (_export_native.c),
# which writes the common shapes itself and hands every other to the helpers above.
COMPILED_ENCODER = "tracing._export_native"


def _compiled(extension: Any) -> dict[str, Any]:
    extension.configure(
        reference=span_fields_text,
        value_text=_value_text,
        string=_string,
        key_prefix=_key_prefix,
        link_text=_link_text,
        kinds=_KINDS,
        failed=encode_failed,
    )
    return {"span_fields_text": extension.span_fields_text}


native.accelerate(sys.modules[__name__], _compiled, extension=COMPILED_ENCODER)
