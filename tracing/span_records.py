"""A request's spans built when it ends, from what was measured: no live OpenTelemetry
span while it runs.

The SDK's live spans cost the hub most of a sampled request's tracing (measured by
``pricingctl bench span-cost``): the sampler, ``BoundedAttributes`` validating every value
as it is set and again for each event, the span's lock, the processors' ``on_start``. A
request whose spans are built here pays for one ``ReadableSpan`` each, made once with its
final attributes and handed to the exporting processor, which treats it as any ended
span.

Two kinds of request are built here:

- **sampled by Envoy**, with a well-formed ``traceparent`` (``tracing.server``'s fast
  path): the server span's id is chosen as the request starts, so that its log lines and
  its upstream calls carry it (``tracing.client.SampledTrace``);
- **slow and not sampled**: exported afterwards, under the incoming trace id (ids chosen
  here: nothing was sent under them).

What the spans hold is what the SDK path gives for the same request, checked field by field
in ``tests/unit/tracing/test_span_records.py``: names, kinds, ids and parents, attributes
(redacted by the same ``QueryRedactor``), events, status, resource and scope. Two things
differ by design: the server span starts when the handler's measurement does (the SDK's
started a little later, in Flask's ``before_request``), and span limits are applied only
where ``OTEL_*_LIMIT`` variables ask for more than the SDK's defaults can bind.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
)
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from tracing.client import (
    UpstreamCall,
    add_call_events,
    client_span_attributes,
    finished_call_attributes,
)
from tracing.redact import QueryRedactor
from tracing.wait_spans import WaitSpan, built_wait_spans, call_wait_spans

# The SDK's own key for it (deprecated in the conventions, still set by record_exception).
_EXCEPTION_ESCAPED: Final = "exception.escaped"
_OK: Final = Status(StatusCode.UNSET)
_ERROR: Final = Status(StatusCode.ERROR)
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)


def exception_event(exc: BaseException, timestamp: int) -> Event:
    """The event the SDK's ``record_exception`` adds for *exc*."""
    module = type(exc).__module__
    qualname = type(exc).__qualname__
    return Event(
        "exception",
        {
            EXCEPTION_TYPE: f"{module}.{qualname}" if module and module != "builtins" else qualname,
            EXCEPTION_MESSAGE: str(exc),
            EXCEPTION_STACKTRACE: "".join(traceback.format_exception(exc)),
            _EXCEPTION_ESCAPED: "False",
        },
        timestamp,
    )


class _EventSink:
    """What ``tracing.client.add_call_events`` and the server's events write to: the
    events of a span being built (``add_event``'s signature, as on an SDK span)."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        self.events.append(Event(name, attributes, timestamp))


class SpanBuilder:
    """Builds a request's server span and its client spans, and hands them to *sink*
    (the exporting processor), as the SDK would on ``end()``."""

    def __init__(
        self,
        resource: Resource,
        scope: str,
        sink: SpanProcessor,
        redactor: QueryRedactor,
        id_generator: IdGenerator,
        limits: SpanLimits | None = None,
        wait_spans_s: float | None = None,
    ) -> None:
        """*wait_spans_s*: the scheduling delay from which a call's wait gets child
        spans (``tracing.wait_spans``; None: never)."""
        self.resource = resource
        self.scope = InstrumentationScope(scope)
        self.sink = sink
        self.redactor = redactor
        self.id_generator = id_generator
        self.wait_spans_s = wait_spans_s
        limits = limits or SpanLimits()
        # Plain dicts unless a limit could bind: ours carry ~30 attributes and short values.
        self._limits = (
            limits
            if limits.max_span_attribute_length is not None
            or limits.max_attribute_length is not None
            or (limits.max_span_attributes or 128) < 64
            else None
        )

    def new_span_id(self) -> int:
        return self.id_generator.generate_span_id()

    def request(
        self,
        *,
        name: str,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        events: Sequence[Event],
        error: bool,
        start_ns: int,
        end_ns: int,
        records: Iterable[UpstreamCall] = (),
        span_id: int | None = None,
        trace_state: TraceState | None = None,
        trace_id: int | None = None,
        waits: Sequence[WaitSpan] = (),
    ) -> None:
        """Build and hand over one request's server span (*name*, *attributes*, *events*;
        status ERROR when *error*) under *parent* (None or invalid: a new trace, or the
        root of trace *trace_id*), one client span for each of *records*, and the wait
        spans of those calls and *waits* (``tracing.wait_spans``). *span_id*: the server
        span's id when it was chosen as the request started."""
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            flags = TraceFlags(_SAMPLED | (parent.trace_flags & TraceFlags.RANDOM_TRACE_ID))
            trace_state = trace_state if trace_state is not None else parent.trace_state
        else:
            parent = None
            trace_id = trace_id or self.id_generator.generate_trace_id()
            random_id = self.id_generator.is_trace_id_random()
            flags = TraceFlags(_SAMPLED | TraceFlags.RANDOM_TRACE_ID) if random_id else _SAMPLED
        server = SpanContext(
            trace_id,
            span_id or self.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=trace_state,
        )
        sink = self.sink
        threshold = self.wait_spans_s
        for record in records:
            client = self._client(record, server)
            sink.on_end(client)
            if threshold is not None:
                self._end_waits(
                    client.get_span_context(),
                    call_wait_spans(
                        record.timing, record.start_unix_ns, record.end_unix_ns, threshold
                    ),
                )
        self._end_waits(server, waits)
        attributes.update(self.redactor.changes(attributes))
        sink.on_end(
            ReadableSpan(
                name=name,
                context=server,
                parent=parent,
                resource=self.resource,
                attributes=self._bounded(attributes),
                events=events,
                kind=SpanKind.SERVER,
                status=_ERROR if error else _OK,
                start_time=start_ns,
                end_time=end_ns,
                instrumentation_scope=self.scope,
            )
        )

    def _end_waits(self, parent: SpanContext | None, waits: Sequence[WaitSpan]) -> None:
        if waits and parent is not None:
            for span in built_wait_spans(
                waits, parent, self.id_generator.generate_span_id, self.resource, self.scope
            ):
                self.sink.on_end(span)

    def _client(self, record: UpstreamCall, server: SpanContext) -> ReadableSpan:
        attributes = client_span_attributes(record)
        attributes.update(self.redactor.changes(attributes))
        attributes.update(finished_call_attributes(record))
        events = _EventSink()
        add_call_events(events, record)  # type: ignore[arg-type]
        status = _OK
        if record.error_type is not None:
            status = _ERROR
        exc = record.exception
        if exc is not None:
            events.events.append(exception_event(exc, record.end_unix_ns))
            status = Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        context = SpanContext(
            server.trace_id,
            record.span_id or self.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=server.trace_flags,
            trace_state=server.trace_state,
        )
        return ReadableSpan(
            name=f"{record.method} {record.path.split('?', 1)[0]}",
            context=context,
            parent=server,
            resource=self.resource,
            attributes=self._bounded(attributes),
            events=events.events,
            kind=SpanKind.CLIENT,
            status=status,
            start_time=record.start_unix_ns,
            end_time=record.end_unix_ns,
            instrumentation_scope=self.scope,
        )

    def _bounded(self, attributes: dict[str, Any]) -> Mapping[str, Any]:
        limits = self._limits
        if limits is None:
            return attributes
        return BoundedAttributes(
            limits.max_span_attributes,
            attributes,
            immutable=True,
            max_value_len=limits.max_span_attribute_length,
        )
