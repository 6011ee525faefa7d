"""The compiled call observer leaks nothing: many observed calls of unsampled requests
(the path that runs in C, with its histograms) leave the process's allocated blocks and
its resident memory where a warm-up left them. Nor do the compiled span encoders
(``_export_native.c``, ``_otlp_native.c``), on every path they have: their own, the
reference's helpers they call, the reference whole, an attribute that fails to encode.

The number of calls is ``pytest --leak-calls`` (CI's version job runs a million); the
bound is per call, so a leak of one object a call fails at any count."""

from __future__ import annotations

import gc
import os
import resource
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from tests.unit.support.timing import timing_path
from tracing.client import RequestTotals, TracingCallObserver, _CompiledCall, request_totals
from tracing.timing.histogram import new_histogram

UNSAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
CALLS_PER_REQUEST = 8
UPSTREAMS = ("vehicles", "routing", "promotions")
# What a leak of one Python object a call would exceed many times over: a block per 100
# calls, 16 bytes of resident memory a call (an object is at least 16 bytes).
MAX_BLOCKS_PER_CALL = 0.01
MAX_RSS_BYTES_PER_CALL = 16


class CompiledMetrics:
    """A CallMetrics whose histograms are the compiled ones (observed from C)."""

    def __init__(self) -> None:
        self.histograms: dict[str, tuple[object, object, object]] = {}

    def call_histograms(self, upstream: str) -> tuple[object, object, object]:
        if upstream not in self.histograms:
            self.histograms[upstream] = tuple(  # type: ignore[assignment]
                new_histogram([0.001, 0.01, 0.1]) for _ in range(3)
            )
        return self.histograms[upstream]

    def observe_call(self, upstream: str, timing: object) -> None:
        network, delay, cpu_wait = self.call_histograms(upstream)
        network.observe(timing.network_s)  # type: ignore[attr-defined]
        delay.observe(timing.scheduling_delay_s)  # type: ignore[attr-defined]
        cpu_wait.observe(timing.cpu_wait_s)  # type: ignore[attr-defined]


@pytest.fixture
def compiled() -> Iterator[None]:
    with timing_path(True):
        yield


def requests(observer: TracingCallObserver, calls: int) -> None:
    """*calls* observed calls, CALLS_PER_REQUEST to a request: each request's totals are
    dropped after it, as a worker drops them once its response is sent. One call a request
    answers 503 and one raises, so the error paths run too."""
    for _ in range(max(1, calls // CALLS_PER_REQUEST)):
        token = request_totals.set(RequestTotals(UNSAMPLED))
        try:
            for i in range(CALLS_PER_REQUEST):
                try:
                    with observer.call(UPSTREAMS[i % 3], "GET", "h", 80, "/p?q=1") as call:
                        call.status = 503 if i == 1 else 200
                        if i == 2:
                            raise ConnectionResetError("reset")
                except ConnectionResetError:
                    pass
        finally:
            request_totals.reset(token)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_a_great_many_observed_calls_leave_memory_flat(
    compiled: None, pytestconfig: pytest.Config
) -> None:
    calls = pytestconfig.getoption("--leak-calls")
    provider = TracerProvider()
    observer = TracingCallObserver(
        provider.get_tracer("leak"), measure=True, metrics=CompiledMetrics()
    )
    assert type(observer.call("vehicles", "GET", "h", 80, "/")) is _CompiledCall

    requests(observer, max(calls // 10, 10_000))  # warm-up: caches and free lists filled
    gc.collect()
    blocks_before, rss_before = sys.getallocatedblocks(), resident_bytes()
    requests(observer, calls)
    gc.collect()
    blocks_grown = sys.getallocatedblocks() - blocks_before
    rss_grown = resident_bytes() - rss_before

    assert blocks_grown <= MAX_BLOCKS_PER_CALL * calls, f"{blocks_grown} blocks more"
    assert rss_grown <= MAX_RSS_BYTES_PER_CALL * calls, f"{rss_grown} bytes more resident"


def encode_spans(
    encoding: str, span_fields: list[tuple[tuple[object, ...], dict[str, object]]], n: int
) -> None:
    from tracing import export, otlp_protobuf

    encode = export.span_fields_text if encoding == "json" else otlp_protobuf.span_fields_proto
    for i in range(n):
        args, kwargs = span_fields[i % len(span_fields)]
        encode(*args, **kwargs)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
@pytest.mark.parametrize("encoding", ["json", "protobuf"])
def test_a_great_many_encoded_spans_leave_memory_flat(
    encoding: str, compiled: None, pytestconfig: pytest.Config, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import SpanKind

    from bench.span_cost import sampled_request_queue

    records = [item for item in sampled_request_queue(4) if hasattr(item, "span_fields")]
    spans: list[tuple[tuple[object, ...], dict[str, object]]] = []
    for record in records:
        for span in record.span_fields():
            args = (record.trace_id, span.span_id, "k=v", span.parent_span_id, True, span.name)
            spans.append(
                (
                    (*args, span.kind, span.start_ns, span.end_ns, span.attributes, span.events),
                    {"status_code": 2, "status_message": "boom", "dropped": (1, 2, 3)},
                )
            )
    odd = {"é": "ünï", "list": [1, "a", 2.5, True], "none": None, "big": 2**70, "nan": 1e400}
    event = Event("e", odd, timestamp=5)
    spans.append(((2**100, 7, "", None, False, "ö", SpanKind.CLIENT, 1, 2, odd, [event], 0), {}))
    # A field of a type only the reference writes: the whole span is its.
    spans.append(
        ((9, 7, "", 3, False, "n", SpanKind.SERVER, 1, 2, odd, (), 0), {"dropped": [0, 1, 0]})
    )
    assert len(spans) >= 5
    calls = max(pytestconfig.getoption("--leak-calls") // 10, 20_000)
    # What the encoder is handed, whose references it must give back (a reference kept
    # to an object that exists anyway allocates nothing: the blocks would not show it).
    # Not the singletons and small ints, which the rest of the process holds and lets go.
    handed = [
        obj
        for args, kwargs in spans
        for obj in (*args, *kwargs.values(), *args[9].keys(), *args[9].values(), *args[10])
        if type(obj) not in (bool, int, type(None))
    ]
    with caplog.at_level("CRITICAL"):  # the one attribute left out logs each time
        encode_spans(encoding, spans, calls // 10)  # warm-up
        gc.collect()
        references = [sys.getrefcount(obj) for obj in handed]
        blocks_before, rss_before = sys.getallocatedblocks(), resident_bytes()
        encode_spans(encoding, spans, calls)
        gc.collect()
    assert [sys.getrefcount(obj) for obj in handed] == references
    blocks_grown = sys.getallocatedblocks() - blocks_before
    rss_grown = resident_bytes() - rss_before
    assert blocks_grown <= MAX_BLOCKS_PER_CALL * calls, f"{blocks_grown} blocks more"
    assert rss_grown <= MAX_RSS_BYTES_PER_CALL * calls, f"{rss_grown} bytes more resident"
