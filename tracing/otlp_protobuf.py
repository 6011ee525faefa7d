"""OTLP protobuf written straight from span fields: the bytes of an
``ExportTraceServiceRequest`` without SDK span objects or protobuf messages, for the
OTLP exporters (``tracing.otlp_exporters``; ``tracing.export.encode_otlp_protobuf``
groups a batch and calls this).

A sampled request reaches the exporter's OS thread as a record of what was measured
(``tracing.span_records``). That thread runs in the worker's process, under the GIL: its
CPU is the worker's. Building SDK spans from the record and then the SDK's protobuf
messages from them cost it several times what this does (``pricingctl bench
instructions --sampled`` measures the worker's whole cost). Here a span's fields become
its wire bytes (varints, length-delimited fields); SDK spans a batch may also hold (user
spans) go through the same encoder; a resource's and a scope's bytes are encoded once
and kept.

The bytes are those the SDK's encoder (``opentelemetry.exporter.otlp.proto.common``)
serializes for the same spans: fields in field-number order, a field at its default left
out, except inside a oneof (an ``AnyValue``) and a message the SDK sets even when empty
(a key's value, a span's status, the resource, the scope).
``tests/unit/tracing/test_export_encoding.py`` compares them byte for byte on spans of
every shape, ``test_otlp_protobuf.py`` decoded, on what a worker queues.
"""

from __future__ import annotations

import logging
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanKind

from tracing.timing import native

log = logging.getLogger(__name__)

_BYTE = [bytes((i,)) for i in range(256)]
_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_DOUBLE = struct.Struct("<d").pack
_UINT64 = 2**64 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# OTLP's span flags: bit 8 says whether the parent's "is remote" is known, bit 9 says it is.
_FLAGS_LOCAL = b"\x85\x01" + _FIXED32(0x100)  # Span.flags: field 16, fixed32
_FLAGS_REMOTE = b"\x85\x01" + _FIXED32(0x300)
_LINK_FLAGS_LOCAL = b"\x35" + _FIXED32(0x100)  # Span.Link.flags: field 6, fixed32
_LINK_FLAGS_REMOTE = b"\x35" + _FIXED32(0x300)
# Span.kind (field 6): the SDK's enum value plus one.
_KINDS = {kind: b"\x30" + _BYTE[kind.value + 1] for kind in SpanKind}
# (key, str/int/bool value) -> (the value's type, its KeyValue, length-prefixed): most
# pairs repeat from span to span (methods, hosts, ports, status codes, routes).
_pairs: dict[tuple[str, Any], tuple[type, bytes]] = {}
_MAX_PAIRS = 8192
# Attribute key -> its KeyValue.key field.
_keys: dict[str, bytes] = {}
_MAX_KEYS = 4096
# id of a resource or scope -> (it, kept alive so that the id stays its, its field bytes).
_groups: dict[int, tuple[Any, bytes]] = {}
_MAX_GROUPS = 256


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: *tag*, the length, *body*."""
    size = len(body)
    return tag + (_BYTE[size] if size < 0x80 else _varint(size)) + body


def export_request(groups: Mapping[Any, Mapping[Any, list[bytes]]]) -> bytes:
    """The ``ExportTraceServiceRequest`` of spans encoded by ``span_fields_proto``,
    grouped by resource, then scope (``tracing.export.group_spans``). Each span's bytes
    are copied once, into the request: a message's parts are measured, not joined."""
    out: list[bytes] = []
    for resource, scopes in groups.items():
        resource_spans = [_resource_field(resource)]
        for scope, encoded in scopes.items():
            scope_spans = [_scope_field(scope), *encoded]
            if scope is not None and scope.schema_url:
                scope_spans.append(_field(b"\x1a", scope.schema_url.encode()))
            _put_message(resource_spans, b"\x12", scope_spans)
        if resource.schema_url:
            resource_spans.append(_field(b"\x1a", resource.schema_url.encode()))
        _put_message(out, b"\x0a", resource_spans)
    return b"".join(out)


def _put_message(out: list[bytes], tag: bytes, parts: list[bytes]) -> None:
    """Append a length-delimited field numbered by *tag* whose body is *parts*."""
    out.append(tag + _varint(sum(map(len, parts))))
    out.extend(parts)


def _resource_field(resource: Any) -> bytes:
    """ResourceSpans.resource: its attributes (encoded once per resource)."""
    kept = _groups.get(id(resource))
    if kept is not None and kept[0] is resource:
        return kept[1]
    body: list[bytes] = []
    _put_attributes(body, b"\x0a", resource.attributes)
    return _keep(resource, _field(b"\x0a", b"".join(body)))


def _scope_field(scope: Any) -> bytes:
    """ScopeSpans.scope: name, version, attributes (encoded once per scope)."""
    kept = _groups.get(id(scope))
    if kept is not None and kept[0] is scope:
        return kept[1]
    body: list[bytes] = []
    if scope is not None:
        if scope.name:
            body.append(_field(b"\x0a", scope.name.encode()))
        if scope.version:
            body.append(_field(b"\x12", scope.version.encode()))
        _put_attributes(body, b"\x1a", scope.attributes)
    return _keep(scope, _field(b"\x0a", b"".join(body)))


def _keep(item: Any, encoded: bytes) -> bytes:
    if len(_groups) < _MAX_GROUPS:
        _groups[id(item)] = (item, encoded)
    return encoded


def span_encoder() -> Callable[..., bytes]:
    """The per-span encoder an ``ExportTraceServiceRequest`` is made with: the compiled
    one or its reference, read now (``native.use`` switches it). What the OTLP exporters'
    batches use (``tracing.export.encode_otlp_protobuf``), and what the hub builds their
    records ahead with."""
    return span_fields_proto


def span_fields_proto(
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
) -> bytes:
    """One span as a ``ScopeSpans.spans`` field, from its fields (the arguments of
    ``tracing.export.span_fields_text``, its OTLP/JSON twin). Runs on the exporter's
    thread, for each span of a batch."""
    out = [b"\x0a\x10", trace_id.to_bytes(16, "big"), b"\x12\x08", span_id.to_bytes(8, "big")]
    if trace_state:
        out.append(_field(b"\x1a", trace_state.encode()))
    if parent_span_id is not None:
        out.append(b"\x22\x08" + parent_span_id.to_bytes(8, "big"))
    if name:
        out.append(_field(b"\x2a", name.encode()))
    out.append(_KINDS[kind])
    if start_ns:
        out.append(b"\x39" + _FIXED64(start_ns))
    if end_ns:
        out.append(b"\x41" + _FIXED64(end_ns))
    _put_attributes(out, b"\x4a", attributes)
    dropped_attributes, dropped_events, dropped_links = dropped
    if dropped_attributes:
        out.append(b"\x50" + _varint(dropped_attributes))
    for event in events:
        out.append(_field(b"\x5a", _event_bytes(event)))
    if dropped_events:
        out.append(b"\x60" + _varint(dropped_events))
    for link in links:
        out.append(_field(b"\x6a", _link_bytes(link)))
    if dropped_links:
        out.append(b"\x70" + _varint(dropped_links))
    if status_code is not None:
        status = _field(b"\x12", status_message.encode()) if status_message else b""
        if status_code:
            status += b"\x18" + _varint(status_code)
        out.append(_field(b"\x7a", status))
    out.append(_FLAGS_REMOTE if parent_remote else _FLAGS_LOCAL)
    return _field(b"\x12", b"".join(out))


def _event_bytes(event: Any) -> bytes:
    out = []
    if event.timestamp:
        out.append(b"\x09" + _FIXED64(event.timestamp))
    if event.name:
        out.append(_field(b"\x12", event.name.encode()))
    _put_attributes(out, b"\x1a", event.attributes)
    if event.dropped_attributes:
        out.append(b"\x20" + _varint(event.dropped_attributes))
    return b"".join(out)


def _link_bytes(link: Any) -> bytes:
    # As the SDK's encoder: no trace state on links.
    context = link.context
    out = [b"\x0a\x10", context.trace_id.to_bytes(16, "big")]
    out.append(b"\x12\x08" + context.span_id.to_bytes(8, "big"))
    _put_attributes(out, b"\x22", link.attributes)
    if link.dropped_attributes:
        out.append(b"\x28" + _varint(link.dropped_attributes))
    out.append(_LINK_FLAGS_REMOTE if context.is_remote else _LINK_FLAGS_LOCAL)
    return b"".join(out)


def _put_attributes(out: list[bytes], tag: bytes, attributes: Any) -> None:
    """Append each of *attributes* as a KeyValue field numbered by *tag*."""
    if not attributes:
        return
    pairs = _pairs
    for key, value in attributes.items():
        # Inlined for the common values (this runs for every attribute of every span): a
        # float is written, a str, int or bool pair seen before is looked up.
        kind = type(value)
        try:
            if kind is float:
                key_field = _keys.get(key) or _key_field(key)
                size = len(key_field) + 11  # the value's tag and length, AnyValue's 9
                out.append(tag + _BYTE[size] if size < 0x80 else tag + _varint(size))
                out.append(key_field + b"\x12\x09\x21" + _DOUBLE(value))
                continue
            if kind is str or kind is int or kind is bool:
                encoded = pairs.get((key, value))
                if encoded is None or kind is not encoded[0]:
                    encoded = _pair(key, value, kind)
                out.append(tag + encoded[1])
                continue
            out.append(_field(tag, _key_value(key, value)))
        except Exception as error:  # as the SDK's encoder: the attribute is left out
            encode_failed(key, error)


def _pair(key: str, value: Any, kind: type) -> tuple[type, bytes]:
    """A str, int or bool attribute's KeyValue, length-prefixed; remembered while there
    is room (with its type: True == 1 as a key, but not as a value)."""
    encoded = (kind, _field(b"", _key_value(key, value)))
    if len(_pairs) < _MAX_PAIRS and type(key) is str:
        _pairs[key, value] = encoded
    return encoded


def _key_field(key: str) -> bytes:
    encoded = _field(b"\x0a", key.encode()) if key else b""
    if len(_keys) < _MAX_KEYS and type(key) is str:
        _keys[key] = encoded
    return encoded


def _key_value(key: str, value: Any) -> bytes:
    return (_keys.get(key) or _key_field(key)) + _field(b"\x12", _any_value(value))


def _any_value(value: Any) -> bytes:
    """An AnyValue's body. The types attribute values have (str, bool, int, float and
    tuples of them) by exact type first; then the SDK encoder's checks, in its order
    (bool before int, str and bytes before Sequence), for anything else."""
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", value.encode())
    if kind is int:
        return b"\x18" + _int64(value)
    if kind is float:
        return b"\x21" + _DOUBLE(value)
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is tuple and value:
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any_value(v)) for v in value]))
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + _int64(int(value))
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(float(value))
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any_value(v)) for v in value]))
    if isinstance(value, Mapping):
        pairs = [_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items()]
        return _field(b"\x32", b"".join(pairs))
    raise Exception(f"Invalid type {type(value)} of value {value}")


def encode_failed(key: Any, error: BaseException) -> None:
    """An attribute left out: the SDK's encoders' log line (both encoders here, and their
    compiled versions, report through it)."""
    log.error("Failed to encode key %s: %s", key, error, exc_info=error)


def _int64(value: int) -> bytes:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit in int64")
    return _varint(value & _UINT64)


# The one place the compiled encoder comes in: its own extension (_otlp_native.c), which
# writes the common shapes itself and hands every other to the helpers above.
COMPILED_ENCODER = "tracing._otlp_native"


def _compiled(extension: Any) -> dict[str, Any]:
    extension.configure(
        reference=span_fields_proto,
        any_value=_any_value,
        key_value=_key_value,
        link_bytes=_link_bytes,
        kinds=_KINDS,
        failed=encode_failed,
    )
    return {"span_fields_proto": extension.span_fields_proto}


native.accelerate(sys.modules[__name__], _compiled, extension=COMPILED_ENCODER)
