"""Span export off the gevent hub: a bounded queue drained by a real OS thread.

Under monkey patching, the SDK's BatchSpanProcessor runs its worker "thread"
as a greenlet on the hub: its encoding and network time would then show up as
scheduling delay of the very requests we measure. Here the hub only appends
to a bounded deque (dropping, and counting, what does not fit); a real OS
thread, made from `gevent.monkey.get_original`, encodes and exports.
Export never blocks or breaks a request.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gevent.monkey import get_original
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from toolkit.wait import wait_until
from tracing.settings import BatchSettings, Exporter, Protocol, TracingSettings

log = logging.getLogger(__name__)

# Raw OS-thread primitives. Not threading.Thread: under monkey patching the
# threading module's bookkeeping (get_ident, _active) is gevent's, and a real
# thread started through it trips over that at exit.
_start_new_thread, _allocate_lock = get_original("_thread", ["start_new_thread", "allocate_lock"])


class ThreadedSpanProcessor(SpanProcessor):
    """Batch processor whose worker is a real OS thread, never a greenlet. Its limits
    are ``OTEL_BSP_*`` (``tracing.settings.BatchSettings``). Without an exporter
    (``OTEL_TRACES_EXPORTER=none``) it keeps nothing and starts no thread."""

    def __init__(self, exporter: SpanExporter | None, batch: BatchSettings | None = None) -> None:
        batch = batch or BatchSettings()
        self.exporter = exporter
        self.max_queue_spans = batch.max_queue_size
        self.max_batch_spans = batch.max_export_batch_size
        self.export_interval_s = batch.schedule_delay_s
        self.export_timeout_s = batch.export_timeout_s
        self.dropped_spans = 0
        self.exported_spans = 0
        self._queue: deque[ReadableSpan] = deque()
        # Held while nobody asked for an export; released to wake the thread.
        self._wake = _allocate_lock()
        self._wake.acquire()
        self._export_lock = _allocate_lock()
        self._done = _allocate_lock()
        self._done.acquire()
        self._stopping = exporter is None
        self._flush_asked = False
        self._pid = os.getpid()
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
        if len(self._queue) >= self.max_queue_spans:
            self.dropped_spans += 1
            return
        self._queue.append(span)
        queued = len(self._queue)
        if queued == 1 or queued == self.max_batch_spans:
            self._signal()  # a batch begins (the thread sleeps until one does), or is full

    def _run(self) -> None:
        try:
            while not self._stopping:
                if not self._queue:
                    # Nothing to export: sleep until a span comes, not every interval (each
                    # wake-up costs an idle worker CPU: BENCHMARKS.md, "Tracing's wake-ups").
                    self._wake.acquire()
                    continue
                # A signal given while the lock was already released is lost: a flush
                # asked for and a full batch are read here, not waited for.
                if not self._flush_asked and len(self._queue) < self.max_batch_spans:
                    self._wake.acquire(timeout=self.export_interval_s)  # the batch forms
                self._flush_asked = False
                self._drain()
            self._drain()
        finally:
            self._done.release()

    def _drain(self) -> None:
        with self._export_lock:
            while self._queue:
                assert self.exporter is not None  # nothing is queued without one
                batch: list[ReadableSpan] = []
                while self._queue and len(batch) < self.max_batch_spans:
                    batch.append(self._queue.popleft())
                try:
                    result = self.exporter.export(batch)
                    if result is SpanExportResult.SUCCESS:
                        self.exported_spans += len(batch)
                    else:
                        self.dropped_spans += len(batch)
                except Exception:  # export must never take the process down
                    self.dropped_spans += len(batch)
                    log.warning("span export failed; dropped %d spans", len(batch), exc_info=True)

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
    if settings.protocol is Protocol.GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(endpoint=settings.otlp_endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=settings.otlp_endpoint)


class JsonLinesFileExporter(SpanExporter):
    """Writes each batch as one line of OTLP JSON (an ExportTraceServiceRequest, the
    bytes the SDK's OTLP encoder gives: ``encode_otlp_line``).

    The fallback when no collector runs: `pricingctl traces --from-spans` reads it.
    Several worker processes append to the same file; each line is written
    with one `write` to a file opened in append mode, so lines do not interleave.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = encode_otlp_line(spans) + "\n"
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


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """OTLP/JSON of *spans* as a document (``encode_otlp_line`` parsed back)."""
    parsed: dict[str, Any] = json.loads(encode_otlp_line(spans))
    return parsed


def encode_otlp_line(spans: Sequence[ReadableSpan]) -> str:
    """OTLP/JSON of *spans*, an ExportTraceServiceRequest, in compact JSON: the bytes
    ``json.dumps(..., separators=(",", ":"))`` writes of what the SDK's own OTLP encoder
    (``opentelemetry.exporter.otlp.proto.common``, the one the OTLP exporters send)
    read back with protobuf's canonical JSON mapping gives, except ids as hex and enums
    as numbers (OTLP/JSON): events, links, the instrumentation scope, dropped counts and
    trace state are all there, in the same order.

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
    # Grouped as the SDK does, by equal resources, then equal scopes; but each distinct
    # object is hashed once: a Resource's hash is a JSON dump of its attributes.
    by_resource: dict[Any, dict[Any, list[str]]] = {}
    groups: dict[tuple[int, int], list[str]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        group = groups.get((id(resource), id(scope)))
        if group is None:
            scopes = by_resource.setdefault(resource, {})
            group = groups[id(resource), id(scope)] = scopes.setdefault(scope, [])
        group.append(_span_text(span))
    if not by_resource:
        return "{}"
    resource_spans = []
    for resource, scopes in by_resource.items():
        scope_spans = []
        for scope, encoded in scopes.items():
            item = '{"scope":' + _scope_text(scope) + ',"spans":[' + ",".join(encoded) + "]"
            if scope is not None and scope.schema_url:
                item += ',"schemaUrl":' + _string(scope.schema_url)
            scope_spans.append(item + "}")
        attrs = _attributes_text(resource.attributes)
        entry = '{"resource":{' + ('"attributes":' + attrs if attrs else "") + "}"
        entry += ',"scopeSpans":[' + ",".join(scope_spans) + "]"
        if resource.schema_url:
            entry += ',"schemaUrl":' + _string(resource.schema_url)
        resource_spans.append(entry + "}")
    return '{"resourceSpans":[' + ",".join(resource_spans) + "]}"


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


def _flags(parent: Any) -> str:
    if parent is not None and parent.is_remote:
        return str(_FLAGS_HAS_IS_REMOTE | _FLAGS_IS_REMOTE)
    return str(_FLAGS_HAS_IS_REMOTE)


def _span_text(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None  # an SDK span always has one
    out = [f'{{"traceId":"{context.trace_id:032x}","spanId":"{context.span_id:016x}"']
    if context.trace_state is not None:
        trace_state = ",".join([f"{key}={value}" for key, value in context.trace_state.items()])
        if trace_state:
            out.append(',"traceState":' + _string(trace_state))
    parent = span.parent
    if parent is not None:
        out.append(f',"parentSpanId":"{parent.span_id:016x}"')
    if span.name:
        out.append(',"name":' + _string(span.name))
    out.append(',"kind":' + _KINDS[span.kind])
    if span.start_time:
        out.append(f',"startTimeUnixNano":"{int(span.start_time)}"')
    if span.end_time:
        out.append(f',"endTimeUnixNano":"{int(span.end_time)}"')
    attrs = _attributes_text(span.attributes)
    if attrs:
        out.append(',"attributes":' + attrs)
    if span.dropped_attributes:
        out.append(f',"droppedAttributesCount":{span.dropped_attributes}')
    events = span.events
    if events:
        out.append(',"events":[' + ",".join([_event_text(event) for event in events]) + "]")
    if span.dropped_events:
        out.append(f',"droppedEventsCount":{span.dropped_events}')
    links = span.links
    if links:
        out.append(',"links":[' + ",".join([_link_text(link) for link in links]) + "]")
    if span.dropped_links:
        out.append(f',"droppedLinksCount":{span.dropped_links}')
    status = span.status
    if status is not None:
        fields = []
        if status.description:
            fields.append('"message":' + _string(status.description))
        if status.status_code.value:
            fields.append(f'"code":{status.status_code.value}')
        out.append(',"status":{' + ",".join(fields) + "}")
    out.append(',"flags":' + _flags(parent) + "}")
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
    for key, value in attributes.items():
        # Inlined for the common values (this runs for every attribute of every span).
        kind = type(value)
        try:
            if kind is str and value.isascii():
                text = '{"stringValue":' + _string(value) + "}"
            elif kind is float and -math.inf < value < math.inf:
                text = '{"doubleValue":' + float.__repr__(value) + "}"
            else:
                text = _value_text(value)
        except Exception as error:  # as the SDK's encoder: the attribute is left out
            log.exception("Failed to encode key %s: %s", key, error)
            continue
        out.append((_key_prefixes.get(key) or _key_prefix(key)) + text + "}")
    return "[" + ",".join(out) + "]" if out else ""


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
    if kind is tuple and value:
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
