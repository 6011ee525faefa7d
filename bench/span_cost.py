"""`pricingctl bench span-cost`: what a sampled request's spans cost in CPU: one server
span and three client spans, as the io pool makes them for an offer, through the
worker's real tracing set-up.

    pricingctl bench span-cost [--requests 400] [--repeat 7] [--profile]

The set-up is ``tracing.server.setup_worker`` (the provider, its ``QueryRedactor`` and
``ThreadedSpanProcessor``, the span-file exporter writing to a temporary file). A request
goes through what the pool's hooks run (``tracing.flask_tracing``): the server span
(``tracing.server_span``, or its context alone when built at the end), three upstream
calls through ``TracingCallObserver`` with their timing attributes and reply event, the
request's attributes and events (``tracing.request_spans.account``), the server span's end.
The timing core is not measured here: its measurements are replaced by fixed, realistic
ones, so a call's attributes are the ones a real call gets (culprits included).

Printed, in CPU microseconds (``time.thread_time``, best of *repeat* interleaved runs,
so other processes' load drops out):

- on the hub, per request: sampled minus unsampled (the same request with Envoy's
  unsampled ``traceparent``: no span, the same metrics): what the spans add in the
  request's greenlet, twice: spans built from the request's record off the hub
  (``tracing.span_records``, what a request Envoy sampled gets: the hub only queues the
  record) and live SDK spans (a request that came without Envoy's decision);
- on the exporter thread: ``JsonLinesFileExporter.export`` of batches of 512 spans
  (the processor's batch size), per span and per request (4 spans), for each kind (a
  record's spans are built there; in a worker, mostly by the hub while it is idle
  beforehand: the same work, ``tracing.export``);
- the sum, per request and per span;
- what drawing a delayed request's wait adds (``tracing.wait_spans``: two child spans per
  call and one for the inbound delay, counted on the hub, built on the exporter thread).

``--profile`` prints cProfile's top functions for each of the two parts instead.
Written to ``span_cost.json`` in ``--out``.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import pstats
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from toolkit.contract import ENVOY_START_HEADER as START_HEADER

ROUTE = "GET /v1/offers/bike"
SPANS_PER_REQUEST = 4
#: The child spans drawing a delayed offer's wait: two per call, one for its inbound delay.
WAIT_SPANS_PER_REQUEST = 7
BATCH = 512
SAMPLED = "00-3f46897b98285b503783b345657b90a1-e571980c4ab6026b-01"
UNSAMPLED = "00-3f46897b98285b503783b345657b90a1-e571980c4ab6026b-00"
# The io pool's three upstream calls for an offer (their query values get redacted).
CALLS = (
    ("vehicles", "/vehicles/v1/nearby?lat=37.77&lng=-122.42&mode=bike&limit=5"),
    ("routing", "/routing/v1/eta?origin=37.77,-122.42&destination=37.79,-122.40&mode=bike"),
    ("promotions", "/promotions/v1/active?user_id=u-123&mode=bike"),
)


@dataclass
class _Request:
    """What ``start_server_span`` reads of a Flask request."""

    environ: dict[str, Any]
    method: str = "GET"
    path: str = "/v1/offers/bike"


def _environ(traceparent: str) -> dict[str, Any]:
    return {
        "HTTP_TRACEPARENT": traceparent,
        "QUERY_STRING": "region=sf&user_id=u-123&lat=37.77&lng=-122.42",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "58065",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_USER_AGENT": "bench",
        "wsgi.url_scheme": "http",
    }


def _call_timing() -> Any:
    from tracing.timing.call_state import CallTiming

    now = time.time_ns()
    return CallTiming(
        duration_s=0.1012,
        network_s=0.1009,
        scheduling_delay_s=0.000296,
        blocked_s=0.0,
        culprits=MappingProxyType({"GET /v1/offers/scooter": 0.000201, "<hub>": 0.00008}),
        socket_waits=2,
        cpu_wait_s=0.0,
        reply_arrived_unix_ns=now,
    )


def _request_timing(critical: Any) -> Any:
    from tracing.timing.server_timing import RequestTiming

    now = time.time_ns()
    return RequestTiming(
        arrival_unix_ns=now - 1_300_000,
        start_unix_ns=now - 102_000_000,
        end_unix_ns=now,
        inbound_delay_s=0.0012,
        inbound_cpu_wait_s=0.0,
        inbound_culprits=MappingProxyType({"GET /v1/offers/bike": 0.000588, "<hub>": 0.000488}),
        duration_s=0.1023,
        running_s=0.00063,
        waiting_s=0.10167,
        critical=critical,
        critical_upstream="promotions",
        presend_delay_s=0.00004,
        wake_delay_s=0.00009,
        overlap_s=0.0,
        calls=3,
    )


class _FixedMeasurement:
    """Stands in for ``CallMeasurement``: a realistic timing, no timing core."""

    def __init__(self, offset_ns: int | None = None) -> None:
        self.timing = _call_timing()

    def finish(self) -> Any:
        return self.timing


@dataclass(frozen=True)
class _Rig:
    worker: Any  # tracing.worker.WorkerTracing
    observer: Any  # tracing.client.TracingCallObserver
    tracer: Any  # taken once, as tracing.flask_tracing does (get_tracer makes a new one)


@contextlib.contextmanager
def _worker(span_file: Path) -> Iterator[_Rig]:
    """The worker's tracing set-up, with an exporter thread that never wakes by itself:
    the benchmark exports the queued spans on its own thread, to time them."""
    from tracing import client, server
    from tracing.settings import BatchSettings, Exporter, Mode, TracingSettings

    settings = TracingSettings(
        mode=Mode.SPANS,
        otlp_endpoint=None,
        span_file=span_file,
        exporter=Exporter.FILE,
        batch=BatchSettings(
            schedule_delay_s=3600.0, max_queue_size=10**9, max_export_batch_size=10**9
        ),
    )
    worker = server.setup_worker("io", settings, envoy_start_header=START_HEADER)
    if worker is None:
        raise SystemExit("span-cost: tracing set-up failed")
    tracer = worker.tracer
    observer = client.TracingCallObserver(
        tracer,
        measure=True,
        metrics=worker.metrics,
        calls=(_FixedMeasurement, _FixedMeasurement.finish),
    )
    # The thread sleeps on its wake-up lock until a span comes; the spans' signals go
    # nowhere while the benchmark runs, and the lock is given back for the shutdown.
    processor = worker.processor
    real_wake = processor._wake
    processor._wake = _NoWake(real_wake)
    try:
        yield _Rig(worker, observer, tracer)
    finally:
        processor._wake = real_wake
        processor._queue.clear()
        server.shutdown_worker()


class _NoWake:
    """Stands in for the exporter thread's wake-up lock: a signal that wakes nobody. The
    thread may not have reached its first wait when the lock is swapped: it waits on the
    real lock all the same."""

    def __init__(self, real: Any) -> None:
        self.acquire = real.acquire

    def release(self) -> None:
        pass


def _one_request(rig: _Rig, traceparent: str, *, build: bool = False) -> None:
    """What ``tracing.flask_tracing``'s hooks and the io pool's view do for an offer.
    *build*: a sampled request's spans built at its end (``tracing.span_records``: what a
    request Envoy sampled gets), else live SDK spans (a request without Envoy's decision)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan

    from tracing import request_spans
    from tracing.client import RequestTotals, SampledTrace, request_totals
    from tracing.server_span import (
        end_server_span,
        sampled_traceparent,
        start_server_span,
        unsampled_traceparent,
    )

    request = _Request(_environ(traceparent))
    started = token = None
    parsed = sampled_traceparent(traceparent) if build else None
    if unsampled_traceparent(traceparent):
        request_totals.set(RequestTotals(traceparent))
    elif parsed is not None:
        sampled = SampledTrace(*parsed, rig.worker.spans.new_span_id)
        request_totals.set(RequestTotals(None, 0, sampled))
        token = context.attach(
            trace.set_span_in_context(NonRecordingSpan(request_spans.server_context(sampled)))
        )
    else:
        request_totals.set(RequestTotals())
        started = start_server_span(rig.tracer, ROUTE, request)
    for upstream, path in CALLS:
        with rig.observer.call(upstream, "GET", "127.0.0.1", 36397, path) as observed:
            observed.status = 200
    totals = request_totals.get()
    assert totals is not None
    timing = _request_timing(totals.records[-1].timing)
    start = timing.arrival_unix_ns - 400_000
    done = request_spans.FinishedRequest(
        ROUTE, timing, totals, 200, {START_HEADER: f"{start // 10**9}.{start % 10**9:09d}"}
    )
    request_spans.account(rig.worker, done, request, None)
    request_totals.set(None)
    if started is not None:
        end_server_span(started[0], started[1], 200, None)
    if token is not None:
        context.detach(token)


def _drawn_request(rig: _Rig) -> None:
    """A sampled offer built off the hub whose every call's and inbound wait is drawn
    (the threshold at 0: drawing costs the same whatever the delay's length)."""
    spans = rig.worker.spans
    kept, spans.wait_spans_s = spans.wait_spans_s, 0.0
    try:
        _one_request(rig, SAMPLED, build=True)
    finally:
        spans.wait_spans_s = kept


def sampled_request_spans(requests: int) -> list[Any]:
    """The finished spans of *requests* sampled offers (4 spans each, live and built
    alternately), for tests that compare encoders on what a worker really exports."""
    from tracing.export import readable_spans

    return readable_spans(sampled_request_queue(requests))


def sampled_request_queue(requests: int) -> list[Any]:
    """What *requests* sampled offers leave on the export queue, live and built
    alternately: SDK spans, and records whose spans the exporter thread builds."""
    with tempfile.TemporaryDirectory() as tmp, _worker(Path(tmp) / "spans.jsonl") as rig:
        for n in range(requests):
            _one_request(rig, SAMPLED, build=n % 2 == 1)
        return _take_spans(rig.worker)


def _per_request_us(run: Callable[[], None], requests: int) -> float:
    clock = time.thread_time
    start = clock()
    for _ in range(requests):
        run()
    return (clock() - start) / requests * 1e6


def _take_spans(worker: Any) -> list[Any]:
    """The queue's items (SDK spans and records), as the exporter thread takes them."""
    processor = worker.processor
    items = list(processor._queue)
    processor._queue.clear()
    processor._ahead.clear()  # built here, not by a hub that never runs
    processor._taken_spans = processor._queued_spans
    return items


def _spans_in(item: Any) -> int:
    return int(getattr(item, "span_count", 1))


def _export_us_per_span(worker: Any, items: list[Any]) -> float:
    """The exporter's CPU per span for *items*, in batches of about BATCH spans."""
    exporter = worker.processor.exporter
    batches: list[list[Any]] = [[]]
    spans = filled = 0
    for item in items:
        if filled >= BATCH:
            batches.append([])
            filled = 0
        batches[-1].append(item)
        filled += _spans_in(item)
        spans += _spans_in(item)
    clock = time.thread_time
    start = clock()
    for batch in batches:
        exporter.export(batch)
    return (clock() - start) / spans * 1e6


def measure(requests: int, repeat: int) -> dict[str, float]:
    """CPU microseconds: the hub's part per request (unsampled; sampled with live spans;
    sampled with spans built off the hub; the same with its wait drawn), the exporter's
    per span of each kind. Best of *repeat* interleaved runs."""
    kinds = ("unsampled", "live", "built", "drawn", "export_live", "export_built", "export_drawn")
    with tempfile.TemporaryDirectory() as tmp, _worker(Path(tmp) / "spans.jsonl") as rig:
        best = dict.fromkeys(kinds, float("inf"))
        for _ in range(repeat):
            best["unsampled"] = min(
                best["unsampled"],
                _per_request_us(lambda: _one_request(rig, UNSAMPLED), requests),
            )
            for kind, run in (
                ("live", lambda: _one_request(rig, SAMPLED)),
                ("built", lambda: _one_request(rig, SAMPLED, build=True)),
                ("drawn", lambda: _drawn_request(rig)),
            ):
                best[kind] = min(best[kind], _per_request_us(run, requests))
                spans = _take_spans(rig.worker)
                count = sum(_spans_in(item) for item in spans)
                drawn = WAIT_SPANS_PER_REQUEST if kind == "drawn" else 0
                assert count == requests * (SPANS_PER_REQUEST + drawn), count
                export = _export_us_per_span(rig.worker, spans)
                best[f"export_{kind}"] = min(best[f"export_{kind}"], export)
            os.truncate(Path(tmp) / "spans.jsonl", 0)
    return best


def render(best: dict[str, float]) -> str:
    lines = [
        f"hub, per request: unsampled {best['unsampled']:.1f} us; sampled, live SDK spans "
        f"{best['live']:.1f} us; sampled, spans built off the hub {best['built']:.1f} us",
        f"exporter thread, per span: live SDK spans {best['export_live']:.1f} us, built "
        f"{best['export_built']:.1f} us (batches of {BATCH} spans; built ones built there)",
    ]
    for kind in ("live", "built"):
        hub = best[kind] - best["unsampled"]
        export_request = best[f"export_{kind}"] * SPANS_PER_REQUEST
        total = hub + export_request
        lines.append(
            f"a sampled request's spans, {kind}: the hub {hub:.1f} us, all {total:.1f} us per "
            f"request, {total / SPANS_PER_REQUEST:.1f} us per span"
        )
    drawn_hub = best["drawn"] - best["built"]
    per_request = SPANS_PER_REQUEST + WAIT_SPANS_PER_REQUEST
    drawn_export = best["export_drawn"] * per_request - best["export_built"] * SPANS_PER_REQUEST
    lines.append(
        f"a delayed request's wait drawn ({WAIT_SPANS_PER_REQUEST} child spans, built): the hub "
        f"+{drawn_hub:.1f} us, all +{drawn_hub + drawn_export:.1f} us per request"
    )
    return "\n".join(lines)


def write_span_cost(doc: dict[str, Any], out: Path) -> str:
    """span_cost.json; returns the summary to print."""
    from bench.report import write_json

    write_json(out / "span_cost.json", doc)
    settings = doc["settings"]
    return (
        f"CPU time per sampled request (1 server + 3 client spans), best of "
        f"{settings['repeat']} runs of {settings['requests']} requests\n"
        f"{render(doc['best_us'])}\nwrote {out / 'span_cost.json'}"
    )


def profile(requests: int) -> None:
    """cProfile's top functions: the hub's part (sampled requests), then the export."""
    with tempfile.TemporaryDirectory() as tmp, _worker(Path(tmp) / "spans.jsonl") as rig:
        hub = cProfile.Profile()
        hub.enable()
        for _ in range(requests):
            _one_request(rig, SAMPLED, build=True)  # what Envoy's sampled requests get
        hub.disable()
        spans = _take_spans(rig.worker)
        export = cProfile.Profile()
        export.enable()
        _export_us_per_span(rig.worker, spans)
        export.disable()
    for name, prof in (("hub (sampled requests)", hub), ("exporter thread", export)):
        print(f"--- {name}, {requests} requests")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
