"""Classification of a call's time, fed by hand with fake timestamps (ns)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from greenlet import getcurrent

from tests.samples import RIDE_ROUTE
from tracing.timing import call_state, call_timing
from tracing.timing.call_state import CallState
from tracing.timing.call_timing import begin_call, measure_call
from tracing.timing.labels import tag_of
from tracing.timing.switchlog import SwitchLog

HOG = RIDE_ROUTE
MS = 1_000_000


@pytest.fixture
def switch_log() -> Iterator[SwitchLog]:
    log = SwitchLog(64)
    call_state.configure(log, culprit_threshold_s=0.001)
    yield log
    call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)


def state_at(start_ns: int = 0) -> CallState:
    state = CallState()
    state.start_ns = start_ns
    return state


def test_read_wait_splits_at_the_arrival() -> None:
    state = state_at()
    state.on_socket_wait(started_ns=10 * MS, resumed_ns=80 * MS, ready_ns=60 * MS)
    timing = state.to_timing(end_ns=100 * MS)
    assert timing.network_s == pytest.approx(0.050)
    assert timing.scheduling_delay_s == pytest.approx(0.020)
    assert timing.socket_waits == 1
    assert timing.duration_s == pytest.approx(0.100)
    assert timing.running_s == pytest.approx(0.030)


def test_wait_without_a_timestamp_is_all_network() -> None:
    state = state_at()
    state.on_socket_wait(0, 30 * MS, None)
    assert state.network_ns == 30 * MS
    assert state.delay_ns == 0


def test_data_ready_before_the_wait_began_is_all_delay() -> None:
    state = state_at()
    state.on_socket_wait(10 * MS, 30 * MS, 5 * MS)
    assert (state.network_ns, state.delay_ns) == (0, 20 * MS)


def test_culprits_named_for_delays_above_the_threshold(switch_log: SwitchLog) -> None:
    for entry in [(0, "<hub>"), (61 * MS, HOG), (79 * MS, "<hub>"), (80 * MS, "GET /x")]:
        switch_log.append(entry)
    state = state_at()
    state.on_socket_wait(10 * MS, 80 * MS, 60 * MS)
    state.on_socket_wait(90 * MS, 90 * MS + 500_000, 90 * MS)  # 0.5 ms: not walked
    timing = state.to_timing(100 * MS)
    assert timing.culprits == {"<hub>": pytest.approx(0.002), HOG: pytest.approx(0.018)}
    assert timing.top_culprits(1) == [(HOG, pytest.approx(0.018))]
    assert timing.scheduling_delay_s == pytest.approx(0.0205)


def test_zero_timeout_yield_is_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_state, "ready_after_ns", lambda frame: 0)
    state = state_at()
    state.on_switch_out(getcurrent(), 5 * MS)
    state.on_switch_in(45 * MS)
    assert (state.delay_ns, state.blocked_ns) == (40 * MS, 0)


def test_timer_is_blocked_until_it_expires_then_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_state, "ready_after_ns", lambda frame: 10 * MS)
    state = state_at()
    state.on_switch_out(getcurrent(), 0)
    state.on_switch_in(25 * MS)
    assert (state.blocked_ns, state.delay_ns) == (10 * MS, 15 * MS)


def test_wait_with_no_known_end_is_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_state, "ready_after_ns", lambda frame: None)
    state = state_at()
    state.on_switch_out(getcurrent(), 0)
    state.on_switch_in(25 * MS)
    assert (state.blocked_ns, state.delay_ns) == (25 * MS, 0)


def test_thread_pool_work_that_finished_turns_the_rest_into_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(call_state, "ready_after_ns", lambda frame: None)
    state = state_at()
    state.pending_done = [0]
    state.on_switch_out(getcurrent(), 0)
    state.pending_done[0] = 3 * MS  # the worker thread returned
    state.on_switch_in(25 * MS)
    assert (state.blocked_ns, state.delay_ns) == (3 * MS, 22 * MS)


def test_first_read_wait_after_a_send_counts_network_from_the_send() -> None:
    state = state_at()
    state.on_send(10 * MS, 10 * MS)
    assert state.wait_start_ns(12 * MS, is_read=True) == 10 * MS
    assert state.wait_start_ns(30 * MS, is_read=True) == 30 * MS  # only the first


def test_after_a_switch_out_the_read_wait_counts_from_its_own_start() -> None:
    state = state_at()
    state.on_send(10 * MS, 10 * MS)
    state.out_since_send = True
    assert state.wait_start_ns(12 * MS, is_read=True) == 12 * MS


def test_reply_already_queued_at_the_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sent at 10, yielded from 20 to 70 (runnable: delay), the reply arrived at 50 and
    was read at once at 70: network 10->50, delay only 50->70."""
    monkeypatch.setattr(call_state, "ready_after_ns", lambda frame: 0)
    state = state_at()
    state.on_send(10 * MS, 10 * MS)
    state.on_switch_out(getcurrent(), 20 * MS)
    state.on_switch_in(70 * MS)
    assert state.delay_ns == 50 * MS
    state.on_first_read(50 * MS, 70 * MS)
    assert (state.network_ns, state.delay_ns) == (40 * MS, 20 * MS)
    assert not state.awaiting_first_read and not state.since_send


def test_data_older_than_the_send_is_not_the_reply() -> None:
    state = state_at()
    state.on_send(10 * MS, 10 * MS)
    state.on_first_read(5 * MS, 20 * MS)  # e.g. a TLS session ticket
    assert (state.network_ns, state.delay_ns) == (0, 0)


def test_measure_call_is_greenlet_local_and_counted() -> None:
    assert call_state.measuring[0] == 0
    with measure_call() as measurement:
        assert tag_of(getcurrent()).call is not None
        assert call_state.measuring[0] == 1
        assert measurement.timing is None
    assert tag_of(getcurrent()).call is None
    assert call_state.measuring[0] == 0
    assert measurement.timing is not None
    assert measurement.timing.duration_s >= 0


def test_finish_is_idempotent() -> None:
    measurement = begin_call()
    first = measurement.finish()
    assert measurement.finish() is first
    assert call_state.measuring[0] == 0


def test_nested_measurement_adds_into_the_outer_one() -> None:
    with measure_call() as outer:
        with measure_call() as inner:
            tag = tag_of(getcurrent())
            assert tag.call is not None
            tag.call.on_socket_wait(0, 30 * MS, 10 * MS)
        assert inner.timing is not None and inner.timing.network_s == pytest.approx(0.010)
    assert outer.timing is not None
    assert outer.timing.network_s == pytest.approx(0.010)
    assert outer.timing.scheduling_delay_s == pytest.approx(0.020)


def test_measurements_never_finished_do_not_nest_forever() -> None:
    leaked = [begin_call() for _ in range(3 * call_timing.MAX_NESTING)]
    state = tag_of(getcurrent()).call
    assert state is not None and state.depth <= call_timing.MAX_NESTING
    for measurement in reversed(leaked):
        measurement.finish()
    assert tag_of(getcurrent()).call is None
    assert call_state.measuring[0] == 0


def test_finishing_out_of_order_does_not_revive_the_outer_call() -> None:
    outer = begin_call()
    inner = begin_call()
    outer.finish()
    assert call_state.measuring[0] == 1
    inner.finish()
    assert tag_of(getcurrent()).call is None
    assert call_state.measuring[0] == 0


def test_begin_call_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(greenlet: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(call_timing, "tag_of", broken)
    with measure_call() as measurement:
        pass
    assert measurement.timing is not None
    assert call_state.measuring[0] == 0


def test_realtime_offset_keeps_the_least_disturbed_sample() -> None:
    """A sample preempted between its reads is off by half the gap: take the tight one."""
    monotonic = iter([0, 8 * MS, 10 * MS, 10 * MS + 200])  # first gap 8 ms, second 0.2 us
    realtime = iter([1_000 * MS, 1_010 * MS])
    offset, now = call_state.realtime_offset_ns(lambda: next(monotonic), lambda: next(realtime))
    assert offset == 1_010 * MS - (10 * MS + 100)
    assert now == 10 * MS + 200


def test_the_critical_call_is_the_last_to_end_the_first_of_a_tie() -> None:
    calls = [("vehicles", 5), ("routing", 9), ("promotions", 9), ("pricing", 3)]
    assert call_state.critical_call(calls, lambda c: c[1]) == ("routing", 9)
    assert call_state.critical_call([], lambda c: c[1]) is None
    # One definition: the request timing, the usage read-back and the benchmark call it.
    import bench.spans
    import tracing.readback.usage
    import tracing.timing.server_timing

    for module in (tracing.timing.server_timing, tracing.readback.usage, bench.spans):
        assert module.critical_call is call_state.critical_call, module.__name__


def test_the_top_culprits_are_the_largest_the_first_of_a_tie() -> None:
    culprits = {"<hub>": 0.001, "POST /q": 0.004, "GET /a": 0.004, "GET /b": 0.002}
    top = [("POST /q", 0.004), ("GET /a", 0.004)]
    assert call_state.top_culprits(culprits, 2) == top
    assert len(call_state.top_culprits({str(i): i for i in range(9)})) == 5
    # One definition: a call's (client span), a request's inbound ones (server span) and
    # `pricingctl traces`' per group all call it, and both spans write them alike.
    from types import MappingProxyType

    import tracing.client
    import tracing.readback.report
    import tracing.request_spans
    from tracing import attributes
    from tracing.timing.server_timing import RequestTiming

    for module in (tracing.client, tracing.request_spans, tracing.readback.report):
        assert module.top_culprits is call_state.top_culprits, module.__name__
    call = call_state.CallTiming(
        duration_s=0.02,
        network_s=0.005,
        scheduling_delay_s=0.011,
        blocked_s=0.0,
        culprits=MappingProxyType(culprits),
    )
    assert call.top_culprits(2) == top
    request = RequestTiming(
        arrival_unix_ns=1,
        start_unix_ns=2,
        end_unix_ns=3,
        inbound_delay_s=0.011,
        inbound_cpu_wait_s=0.0,
        inbound_culprits=MappingProxyType(culprits),
        duration_s=0.02,
        running_s=0.02,
        waiting_s=0.0,
    )
    client_span = tracing.client.timing_attributes(call)
    server_span = tracing.request_spans.request_attributes("GET /r", request, None)
    written = client_span[attributes.SCHEDULING_CULPRITS]
    assert written == server_span[attributes.INBOUND_CULPRITS]
    assert tracing.readback.report.parse_culprits(written) == call_state.top_culprits(culprits)
