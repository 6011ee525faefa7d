"""The wait drawn in Jaeger's waterfall (``tracing.wait_spans``): the children tile what
was measured, only past the threshold, only for traced requests, the same on both paths."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench import span_cost
from tests.unit.support.spans import HOG, MS, START, delayed_call, request_timing
from toolkit.contract import WAIT_SPANS_ENV
from tracing import attributes
from tracing.client import TracingCallObserver
from tracing.settings import TracingSettings
from tracing.timing.call_state import CallTiming
from tracing.wait_spans import call_wait_spans, inbound_wait_spans


def test_a_delayed_calls_children_tile_its_network_time_and_its_wait() -> None:
    network, wait = call_wait_spans(delayed_call(), START, START + 155 * MS, 0.01)
    assert (network.name, wait.name) == (attributes.SPAN_NETWORK, attributes.SPAN_LOOP_WAIT)
    # network: the send -> the reply's kernel stamp; the wait from there, as measured.
    assert network.end_unix_ns == wait.start_unix_ns == START + 61 * MS
    assert network.end_unix_ns - network.start_unix_ns == 60 * MS
    assert wait.end_unix_ns - wait.start_unix_ns == 90 * MS
    assert network.start_unix_ns >= START and wait.end_unix_ns <= START + 155 * MS
    # The wait names who held the loop, largest first, and the process's CPU wait.
    assert wait.attributes[attributes.SCHEDULING_CULPRITS] == [
        f"{HOG}=0.085000",
        "<hub>=0.004000",
    ]
    assert wait.attributes[attributes.SCHEDULING_CPU_WAIT] == 0.02
    assert network.attributes == {}


def test_the_children_stay_inside_their_call() -> None:
    # Network time from a connect before the send, a delay partly before it: clipped.
    network, wait = call_wait_spans(
        delayed_call(network_ms=80, delay_ms=120), START, START + 100 * MS, 0.01
    )
    assert network.start_unix_ns == START
    assert wait.end_unix_ns == START + 100 * MS


@pytest.mark.parametrize(
    ("timing", "threshold_s"),
    [
        (delayed_call(delay_ms=9.9), 0.01),  # below the threshold
        (delayed_call(), None),  # drawing is off
        (delayed_call()._replace(reply_arrived_unix_ns=None), 0.01),  # no kernel stamp
        (delayed_call(arrived_ms=200), 0.01),  # a stamp outside the call
        (None, 0.01),  # not measured (PRICING_TRACING=spans)
    ],
)
def test_no_children_where_nothing_says_to_draw_them(
    timing: CallTiming | None, threshold_s: float | None
) -> None:
    assert call_wait_spans(timing, START, START + 155 * MS, threshold_s) == []


def test_a_delayed_request_gets_its_inbound_wait_as_a_child() -> None:
    (wait,) = inbound_wait_spans(request_timing(259), 0.01)
    assert wait.name == attributes.SPAN_LOOP_WAIT
    # The request's bytes in the kernel -> its handler started (the server span's start).
    assert (wait.start_unix_ns, wait.end_unix_ns) == (START, START + 259 * MS)
    assert wait.attributes[attributes.SCHEDULING_CULPRITS] == [f"{HOG}=0.250000"]
    assert inbound_wait_spans(request_timing(5), 0.01) == []
    assert inbound_wait_spans(request_timing(259), None) == []
    assert inbound_wait_spans(request_timing(259)._replace(arrival_unix_ns=None), 0.01) == []


def test_the_threshold_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WAIT_SPANS_ENV, raising=False)
    assert TracingSettings.from_env().wait_spans_s == 0.01
    monkeypatch.setenv(WAIT_SPANS_ENV, "25")
    assert TracingSettings.from_env().wait_spans_s == 0.025
    monkeypatch.setenv(WAIT_SPANS_ENV, "off")
    assert TracingSettings.from_env().wait_spans_s is None
    for bad in ("-1", "soon", "inf"):
        monkeypatch.setenv(WAIT_SPANS_ENV, bad)
        with pytest.raises(ValueError, match=WAIT_SPANS_ENV):
            TracingSettings.from_env()


# --- through a worker's real tracing: the benchmark's request, its calls delayed ------------


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[span_cost._Rig]:
    """``pricingctl bench span-cost``'s worker and request, each call measured as delayed
    and the threshold under the request's inbound delay (1.2 ms) too."""
    monkeypatch.setattr(
        span_cost,
        "_call_timing",
        lambda: delayed_call()._replace(reply_arrived_unix_ns=time.time_ns()),
    )
    with span_cost._worker(tmp_path / "spans.jsonl") as bench_rig:
        bench_rig.worker.spans.wait_spans_s = 0.001
        observer = TracingCallObserver(
            bench_rig.tracer,
            measure=True,
            calls=(span_cost._FixedMeasurement, span_cost._FixedMeasurement.finish),
            wait_spans_s=0.001,
        )
        worker = bench_rig.worker
        monkeypatch.setattr(worker, "settings", replace(worker.settings, wait_spans_s=0.001))
        yield span_cost._Rig(bench_rig.worker, observer, bench_rig.tracer)


def children(spans: list[Any]) -> list[tuple[str, str, str]]:
    """(parent's name, child's name, its culprits) of every wait span, sorted."""
    by_id = {s.context.span_id: s for s in spans}
    return sorted(
        (
            by_id[s.parent.span_id].name,
            s.name,
            ",".join(s.attributes.get(attributes.SCHEDULING_CULPRITS, ())),
        )
        for s in spans
        if s.name in (attributes.SPAN_NETWORK, attributes.SPAN_LOOP_WAIT)
    )


def test_built_and_live_spans_draw_the_same_children(rig: span_cost._Rig) -> None:
    span_cost._one_request(rig, span_cost.SAMPLED, build=True)
    (record,) = span_cost._take_spans(rig.worker)
    built = record.readable_spans()  # on the exporter thread
    # Counted on the hub as built: the queue's limits hold.
    assert record.span_count == len(built)
    span_cost._one_request(rig, span_cost.SAMPLED)
    live = span_cost._take_spans(rig.worker)
    assert children(built) == children(live)
    # Two per call, and the inbound wait under the server span.
    drawn = children(built)
    assert len(drawn) == 2 * len(span_cost.CALLS) + 1, drawn
    assert (span_cost.ROUTE, attributes.SPAN_LOOP_WAIT) in {(p, c) for p, c, _ in drawn}
    for spans in (built, live):
        for span in spans:
            if span.name in (attributes.SPAN_NETWORK, attributes.SPAN_LOOP_WAIT):
                assert span.context.trace_id == span.parent.trace_id


def test_an_unsampled_request_draws_nothing(rig: span_cost._Rig) -> None:
    span_cost._one_request(rig, span_cost.UNSAMPLED)
    assert span_cost._take_spans(rig.worker) == []
