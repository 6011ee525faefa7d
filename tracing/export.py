"""Span export off the gevent hub: a bounded queue drained by a real OS thread.

Under monkey patching, the SDK's BatchSpanProcessor runs its worker "thread"
as a greenlet on the hub: its encoding and network time would then show up as
scheduling delay of the very requests we measure. Here the hub only appends
to a bounded deque (dropping, and counting, what does not fit); a real OS
thread, made from `gevent.monkey.get_original`, encodes and exports.
Export never blocks or breaks a request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gevent.monkey import get_original
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

log = logging.getLogger(__name__)

# Raw OS-thread primitives. Not threading.Thread: under monkey patching the
# threading module's bookkeeping (get_ident, _active) is gevent's, and a real
# thread started through it trips over that at exit.
_start_new_thread, _allocate_lock = get_original("_thread", ["start_new_thread", "allocate_lock"])

MAX_QUEUE_SPANS = 4096
MAX_BATCH_SPANS = 512
EXPORT_INTERVAL_S = 0.5


class ThreadedSpanProcessor(SpanProcessor):
    """Batch processor whose worker is a real OS thread, never a greenlet."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_spans: int = MAX_QUEUE_SPANS,
        max_batch_spans: int = MAX_BATCH_SPANS,
        export_interval_s: float = EXPORT_INTERVAL_S,
    ) -> None:
        self.exporter = exporter
        self.max_queue_spans = max_queue_spans
        self.max_batch_spans = max_batch_spans
        self.export_interval_s = export_interval_s
        self.dropped_spans = 0
        self.exported_spans = 0
        self._queue: deque[ReadableSpan] = deque()
        # Held while nobody asked for an export; released to wake the thread.
        self._wake = _allocate_lock()
        self._wake.acquire()
        self._export_lock = _allocate_lock()
        self._done = _allocate_lock()
        self._done.acquire()
        self._stopping = False
        self._pid = os.getpid()
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
        deadline_s = timeout_millis / 1000
        import time

        end = time.monotonic() + deadline_s
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
        if os.getpid() == self._pid and self._done.acquire(timeout=5):
            self._done.release()
        self.exporter.shutdown()


class JsonLinesFileExporter(SpanExporter):
    """Writes each batch as one line of OTLP JSON (an ExportTraceServiceRequest).

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


_KINDS = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
_STATUS = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in (attributes or {}).items()]


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """OTLP/JSON (ids as hex, times as decimal strings of nanoseconds)."""
    by_resource: dict[int, tuple[Any, list[ReadableSpan]]] = {}
    for span in spans:
        key = id(span.resource)
        by_resource.setdefault(key, (span.resource, []))[1].append(span)
    resource_spans = []
    for resource, group in by_resource.values():
        out = []
        for span in group:
            ctx = span.context
            item: dict[str, Any] = {
                "traceId": f"{ctx.trace_id:032x}",
                "spanId": f"{ctx.span_id:016x}",
                "name": span.name,
                "kind": _KINDS.get(span.kind, 0),
                "startTimeUnixNano": str(span.start_time),
                "endTimeUnixNano": str(span.end_time),
                "attributes": _attributes(span.attributes),
                "status": {"code": _STATUS.get(span.status.status_code, 0)},
            }
            if span.parent is not None:
                item["parentSpanId"] = f"{span.parent.span_id:016x}"
            out.append(item)
        resource_spans.append(
            {
                "resource": {"attributes": _attributes(resource.attributes if resource else {})},
                "scopeSpans": [{"scope": {"name": "pricingservice"}, "spans": out}],
            }
        )
    return {"resourceSpans": resource_spans}
