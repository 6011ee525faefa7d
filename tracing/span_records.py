"""A request's spans built from what was measured, off the hub: no live OpenTelemetry
span while it runs, no SDK span object in its greenlet when it ends.

The SDK's live spans cost the hub most of a sampled request's tracing (measured by
``pricingctl bench span-cost``): the sampler, ``BoundedAttributes`` validating every value
as it is set and again for each event, the span's lock, the processors' ``on_start``.
A request whose spans are built here leaves one ``RequestRecord`` on the export queue
when it ends (``SpanBuilder.request``, on the hub): its ids, name, the few attributes
only the hub can read (the Flask request's), its measurements (``RequestTiming``, each
call's ``UpstreamCall``) and a function deriving the rest from them. The spans are
built later, by the hub while it is idle or by the exporter's OS thread
(``tracing.export``): their attributes, events, status and redaction
(``RequestRecord.span_fields``), then, through the encoders SDK spans go through
(``RequestRecord.encoded_spans``), OTLP/JSON text for the span file or OTLP protobuf for
the OTLP exporters (``tracing.otlp_protobuf``); SDK spans only for an exporter that
takes no record (``RequestRecord.readable_spans``: the console).

Two kinds of request are built here:

- **sampled by Envoy**, with a well-formed ``traceparent`` (``tracing.server``'s fast
  path): the server span's id is chosen as the request starts, so that its log lines and
  its upstream calls carry it (``tracing.client.SampledTrace``);
- **slow and not sampled**: exported afterwards, its server span the root of the
  incoming trace id (ids chosen here: nothing was sent under them; Envoy's span id in
  ``pricing.trace.edge_span_id``).

A delayed call's and request's wait is drawn as child spans (``tracing.wait_spans``):
the hub counts them (``RequestRecord.span_count``, what the queue's limits count), the
exporter thread builds them beside the spans they belong to.

What the spans hold is what the SDK path gives for the same request, checked field by field
in ``tests/unit/tracing/test_span_records.py``: names, kinds, ids and parents, attributes
(redacted by the same ``QueryRedactor``), events, status, resource and scope. Two things
differ by design: the server span starts when the handler's measurement does (the SDK's
started a little later, in Flask's ``before_request``), and span limits are applied only
where ``OTEL_*_LIMIT`` variables ask for more than the SDK's defaults can bind.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
)
from opentelemetry.semconv.attributes.url_attributes import URL_FULL
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from tracing.client import (
    UpstreamCall,
    add_call_events,
    client_span_attributes,
    finished_call_attributes,
)
from tracing.export import T, ThreadedSpanProcessor, trace_state_text
from tracing.redact import QueryRedactor
from tracing.wait_spans import CALL_WAIT_SPANS, WaitSpan, call_drawn, call_wait_spans

# The SDK's own key for it (deprecated in the conventions, still set by record_exception).
_EXCEPTION_ESCAPED: Final = "exception.escaped"
_OK: Final = Status(StatusCode.UNSET)
_ERROR: Final = Status(StatusCode.ERROR)
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)


class SpanEvent(NamedTuple):
    """An event of a span built here: the fields the encoders read of an SDK ``Event``
    (made one only for an exporter that takes SDK spans, ``readable_spans``), without
    its constructor's layers, on the exporter thread's path for every sampled span."""

    name: str
    attributes: Mapping[str, Any] | None
    timestamp: int
    dropped_attributes: int = 0


def exception_event(exc: BaseException, timestamp: int) -> SpanEvent:
    """The event the SDK's ``record_exception`` adds for *exc*."""
    module = type(exc).__module__
    qualname = type(exc).__qualname__
    return SpanEvent(
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
        self.events: list[SpanEvent] = []

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        assert timestamp is not None  # every measured event has its time
        self.events.append(SpanEvent(name, attributes, timestamp))


class SpanFields(NamedTuple):
    """One span built on the exporter thread, before it becomes OTLP text or an SDK
    span. *parent_span_id*: None for a root."""

    name: str
    kind: SpanKind
    span_id: int
    parent_span_id: int | None
    parent_remote: bool
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    events: Sequence[SpanEvent]
    status: Status


#: Derives, on the exporter thread, a server span's measured attributes and events from
#: the arguments the hub queued with it (``tracing.request_spans``).
Derive = Callable[..., tuple[dict[str, Any], list[SpanEvent]]]


class RequestRecord:
    """A request's spans as the hub leaves them on the export queue: ids, the server
    span's name and hub-read attributes, its measurements; built on the exporter thread
    (``span_fields``). A ``tracing.export.SpanRecord``."""

    __slots__ = (
        "_built",
        "_claim",
        "attributes",
        "builder",
        "calls",
        "derive",
        "derive_args",
        "end_ns",
        "error",
        "events",
        "flags",
        "name",
        "parent_remote",
        "parent_span_id",
        "span_count",
        "span_id",
        "start_ns",
        "trace_id",
        "trace_state",
        "wait_spans_s",
        "waits",
    )

    def __init__(
        self,
        builder: SpanBuilder,
        name: str,
        ids: tuple[int, int, int | None, bool, int],
        trace_state: TraceState | str | None,
        attributes: dict[str, Any],
        events: list[SpanEvent],
        error: bool,
        times: tuple[int, int],
        calls: Sequence[UpstreamCall],
        derive: tuple[Derive, tuple[Any, ...]] | None,
        waits: Sequence[WaitSpan] = (),
    ) -> None:
        self.builder = builder
        # Popped by whoever encodes its spans first, the hub (``build_ahead``) or the
        # exporter thread (``encoded_spans``): list.pop is atomic under the GIL.
        self._claim = [True]
        #: The encoder and what it made; (None, None) when that failed.
        self._built: tuple[Any, Any] | None = None
        self.name = name
        #: trace id, server span id, parent span id (None: a root), parent is remote, flags
        self.trace_id, self.span_id, self.parent_span_id, self.parent_remote, self.flags = ids
        #: A header's text (parsed on the thread) or a parsed one.
        self.trace_state = trace_state
        self.attributes = attributes
        #: Events only the hub could make (an exception's, its traceback formatted there).
        self.events = events
        self.error = error
        self.start_ns, self.end_ns = times
        self.calls = calls
        self.derive: Derive | None = None
        self.derive_args: tuple[Any, ...] = ()
        if derive is not None:
            self.derive, self.derive_args = derive
        #: The server span's own wait spans (``tracing.wait_spans``), under it.
        self.waits = waits
        #: The builder's threshold as the request ended: its spans are counted by it here,
        #: on the hub, and built by it on the thread.
        self.wait_spans_s = threshold = builder.wait_spans_s
        # Counted on the hub: the server span, its client spans, their wait spans, its own.
        drawn = 0
        if threshold is not None:
            for call in calls:
                if call_drawn(call.timing, call.start_unix_ns, call.end_unix_ns, threshold):
                    drawn += CALL_WAIT_SPANS
        self.span_count = 1 + len(calls) + drawn + len(waits)

    @property
    def resource(self) -> Resource:
        return self.builder.resource

    @property
    def instrumentation_scope(self) -> InstrumentationScope:
        return self.builder.scope

    def parsed_trace_state(self) -> TraceState | None:
        state = self.trace_state
        return TraceState.from_header([state]) if isinstance(state, str) else state

    def span_fields(self) -> list[SpanFields]:
        """Its spans, client spans first (each followed by its wait spans), as the SDK
        ended them (exporter thread)."""
        builder = self.builder
        threshold = self.wait_spans_s
        out = []
        for call in self.calls:
            client = builder.client_fields(call, self.span_id)
            out.append(client)
            if threshold is not None:
                waits = call_wait_spans(
                    call.timing, call.start_unix_ns, call.end_unix_ns, threshold
                )
                out.extend(builder.wait_fields(waits, client.span_id))
        out.extend(builder.wait_fields(self.waits, self.span_id))
        attributes = self.attributes
        events = self.events
        if self.derive is not None:
            measured, measured_events = self.derive(*self.derive_args)
            attributes.update(measured)
            events = measured_events + events
        attributes.update(builder.redactor.changes(attributes))
        parent = self.parent_span_id
        out.append(
            SpanFields(
                self.name,
                SpanKind.SERVER,
                self.span_id,
                parent,
                self.parent_remote,
                self.start_ns,
                self.end_ns,
                builder.bounded(attributes),
                events,
                _ERROR if self.error else _OK,
            )
        )
        return out

    def build_ahead(self, encode: Callable[..., Any]) -> bool:
        """Encode its spans now, kept for ``encoded_spans`` (the hub, while idle), unless
        that began: then False. Never raises: a failure is left for the thread to meet
        again, and to count."""
        if not self._claimed():
            return False
        with contextlib.suppress(Exception):
            self._build(encode)
        return True

    def encoded_spans(self, encode: Callable[..., T]) -> list[T]:
        """Its spans as *encode* makes them from their fields: OTLP/JSON for the span
        file (``tracing.export.span_fields_text``), protobuf for the OTLP exporters
        (``tracing.otlp_protobuf.span_fields_proto``). Those ``build_ahead`` made with
        the same *encode*, waiting for the hub if it is making them."""
        if self._claimed():
            return self._build(encode)
        while self._built is None:  # the hub is encoding it: let it finish
            os.sched_yield()
        built_with, spans = self._built
        return spans if built_with is encode else self._spans(encode)

    def _claimed(self) -> bool:
        try:
            self._claim.pop()
        except IndexError:
            return False
        return True

    def _build(self, encode: Callable[..., T]) -> list[T]:
        try:
            spans = self._spans(encode)
        except BaseException:
            self._built = (None, None)
            raise
        self._built = (encode, spans)
        return spans

    def _spans(self, encode: Callable[..., T]) -> list[T]:
        trace_id = self.trace_id
        trace_state = trace_state_text(self.parsed_trace_state())
        return [
            encode(
                trace_id,
                span.span_id,
                trace_state,
                span.parent_span_id,
                span.parent_remote,
                span.name,
                span.kind,
                span.start_ns,
                span.end_ns,
                span.attributes,
                span.events,
                span.status.status_code.value,
                span.status.description,
                dropped=(_dropped(span.attributes), 0, 0),
            )
            for span in self.span_fields()
        ]

    def readable_spans(self) -> list[ReadableSpan]:
        """Its spans as the SDK's (for an exporter that takes no record: the console)."""
        builder = self.builder
        flags = TraceFlags(self.flags)
        state = self.parsed_trace_state()
        trace_id = self.trace_id
        # The parent of each span: the server span's, a client span's (its wait spans'),
        # and the server span's own (Envoy's, or none).
        contexts = {self.span_id: SpanContext(trace_id, self.span_id, False, flags, state)}
        if self.parent_span_id is not None:
            contexts[self.parent_span_id] = SpanContext(
                trace_id, self.parent_span_id, self.parent_remote, flags, state
            )
        out = []
        for span in self.span_fields():  # a client span before its wait spans
            context = contexts[span.span_id] = SpanContext(
                trace_id, span.span_id, False, flags, state
            )
            parent = span.parent_span_id
            out.append(
                ReadableSpan(
                    name=span.name,
                    context=context,
                    parent=contexts.get(parent) if parent is not None else None,
                    resource=builder.resource,
                    attributes=span.attributes,
                    events=[Event(e.name, e.attributes, e.timestamp) for e in span.events],
                    kind=span.kind,
                    status=span.status,
                    start_time=span.start_ns,
                    end_time=span.end_ns,
                    instrumentation_scope=builder.scope,
                )
            )
        return out


def _dropped(attributes: Mapping[str, Any]) -> int:
    return attributes.dropped if isinstance(attributes, BoundedAttributes) else 0


class SpanBuilder:
    """Queues a request's spans as a ``RequestRecord`` on *sink* (the exporting
    processor), which builds its server span and client spans on its thread."""

    def __init__(
        self,
        resource: Resource,
        scope: str,
        sink: ThreadedSpanProcessor,
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
        events: list[SpanEvent],
        error: bool,
        start_ns: int,
        end_ns: int,
        records: Sequence[UpstreamCall] = (),
        span_id: int | None = None,
        trace_state: TraceState | str | None = None,
        trace_id: int | None = None,
        derive: tuple[Derive, tuple[Any, ...]] | None = None,
        waits: Sequence[WaitSpan] = (),
    ) -> None:
        """Queue one request's server span (*name*, *attributes*, *events*; status ERROR
        when *error*) under *parent* (None or invalid: a new trace, or the root of trace
        *trace_id*), one client span for each of *records*, the wait spans of those calls
        and the server span's *waits* (``tracing.wait_spans``); *derive*: a function and
        its arguments giving the rest of the server span's attributes and its first
        events, called on the exporter thread. *span_id*: the server span's id when it was
        chosen as the request started. On the hub: only ids are drawn and wait spans
        counted here."""
        ids: tuple[int, int, int | None, bool]
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            flags = _SAMPLED | (parent.trace_flags & TraceFlags.RANDOM_TRACE_ID)
            trace_state = trace_state if trace_state is not None else parent.trace_state
            ids = (trace_id, span_id or self.new_span_id(), parent.span_id, parent.is_remote)
        else:
            random_id = self.id_generator.is_trace_id_random()
            flags = _SAMPLED | TraceFlags.RANDOM_TRACE_ID if random_id else _SAMPLED
            trace_id = trace_id or self.id_generator.generate_trace_id()
            ids = (trace_id, span_id or self.new_span_id(), None, False)
        self.sink.on_record(
            RequestRecord(
                self,
                name,
                (*ids, flags),
                trace_state,
                attributes,
                events,
                error,
                (start_ns, end_ns),
                records,
                derive,
                waits,
            )
        )

    def client_fields(self, record: UpstreamCall, server_span_id: int) -> SpanFields:
        """The client span of one measured call (exporter thread)."""
        attributes = client_span_attributes(record)
        # Its one attribute of the redactor's URL_ATTRIBUTES (its path has no query).
        attributes[URL_FULL] = self.redactor.url(attributes[URL_FULL])
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
        if not record.span_id:  # a slow request's: drawn here, once
            record.span_id = self.new_span_id()
        return SpanFields(
            f"{record.method} {record.path.split('?', 1)[0]}",
            SpanKind.CLIENT,
            record.span_id,
            server_span_id,
            False,
            record.start_unix_ns,
            record.end_unix_ns,
            self.bounded(attributes),
            events.events,
            status,
        )

    def wait_fields(self, waits: Sequence[WaitSpan], parent_span_id: int) -> list[SpanFields]:
        """*waits* as spans under *parent_span_id* (exporter thread)."""
        return [
            SpanFields(
                wait.name,
                SpanKind.INTERNAL,
                self.new_span_id(),
                parent_span_id,
                False,
                wait.start_unix_ns,
                wait.end_unix_ns,
                self.bounded(wait.attributes),
                (),
                _OK,
            )
            for wait in waits
        ]

    def bounded(self, attributes: dict[str, Any]) -> Mapping[str, Any]:
        limits = self._limits
        if limits is None:
            return attributes
        return BoundedAttributes(
            limits.max_span_attributes,
            attributes,
            immutable=True,
            max_value_len=limits.max_span_attribute_length,
        )
