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
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gevent.monkey import get_original
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

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
        if len(self._queue) == self.max_batch_spans:
            self._signal()

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._wake.acquire(timeout=self.export_interval_s)
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
        self._signal()
        end = time.monotonic() + min(timeout_millis / 1000, self.export_timeout_s)
        while self._queue and time.monotonic() < end:
            time.sleep(0.01)
        # Wait for a batch being exported right now.
        if self._export_lock.acquire(timeout=max(0.0, end - time.monotonic())):
            self._export_lock.release()
        return not self._queue

    def shutdown(self) -> None:
        # Idempotent: the worker's two tracer providers (sampled and slow requests)
        # share this processor and each shuts it down; the exporter once is enough
        # (the OTLP one warns "already shutdown" on a second call).
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
    """Writes each batch as one line of OTLP JSON (an ExportTraceServiceRequest, made by
    the SDK's OTLP encoder: ``encode_otlp_json``).

    The fallback when no collector runs: `pricingctl traces --file` reads it.
    Several worker processes append to the same file; each line is written
    with one `write` to a file opened in append mode, so lines do not interleave.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = json.dumps(encode_otlp_json(spans), separators=(",", ":")) + "\n"
        # Owner only: spans name routes, timings and hosts of the service.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """OTLP/JSON of *spans*, an ExportTraceServiceRequest: the SDK's own OTLP encoder
    (the one the OTLP exporters send), so events, links, the instrumentation scope,
    dropped counts and trace state are all there, written as OTLP's JSON mapping
    (protobuf's canonical JSON, except ids as hex and enums as numbers)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span, "traceId", "spanId", "parentSpanId")
                for link in span.get("links", ()):
                    _hex_ids(link, "traceId", "spanId")
    return document


def _hex_ids(item: dict[str, Any], *keys: str) -> None:
    # Canonical protobuf JSON writes bytes as base64; OTLP/JSON wants ids as hex.
    for key in keys:
        if key in item:
            item[key] = base64.b64decode(item[key]).hex()
