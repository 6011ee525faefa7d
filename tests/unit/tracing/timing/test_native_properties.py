"""The compiled hot path against its Python reference on sequences hypothesis makes up,
malformed ones included: switches from a greenlet that is not the one running, to
itself, throws, a clock that stands still or steps back, measurements ended twice or
never begun, waits of no length, readiness anywhere around a wait. Whatever the
sequence, both paths give the same numbers (the replays of ``replay.py``)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.tracing.timing.replay import (
    LABELS,
    US,
    needs_compiled,
    replay_calls,
    replay_switches,
    replay_waits,
)

GREENLETS = 6  # replay_switches' fake greenlets
# Function-scoped fixtures (monkeypatch, the stamped socket) are shared by a test's
# examples on purpose: each replay sets up and undoes what it patches.
REPLAYS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Time between events: none, a little, past the culprit threshold, and backwards.
steps_ns = st.sampled_from([0, 1, 40, 300, 1500, 4000, -5]).map(lambda us: us * US)
greenlet = st.integers(0, GREENLETS - 1)
label = st.sampled_from([*LABELS, "", "x" * 300])

switch_event = st.one_of(
    st.tuples(st.sampled_from(["switch", "throw"]), steps_ns, greenlet, greenlet),
    st.tuples(st.just("relabel"), steps_ns, greenlet, label),
    st.tuples(st.just("measure"), steps_ns, greenlet, st.booleans()),
    st.tuples(st.just("done"), steps_ns, greenlet),
)


@needs_compiled
@REPLAYS
@given(events=st.lists(switch_event, max_size=300))
def test_any_switch_sequence_gives_the_reference_numbers(events: list[tuple[Any, ...]]) -> None:
    assert replay_switches(True, events) == replay_switches(False, events)


wait_event = st.fixed_dictionaries(
    {
        "read": st.booleans(),
        "before": st.integers(0, 5_000).map(lambda us: us * US),
        "out": st.integers(0, 10_000).map(lambda us: us * US),
        # readiness, in units of the wait's length from its start: long before to after
        "ready_at": st.floats(-3.0, 3.0, allow_nan=False),
        "reply_pending": st.booleans(),
        "out_since_send": st.booleans(),
        "awaiting_first_read": st.booleans(),
        "switches": st.booleans(),
        "fails": st.booleans(),
        "send": st.booleans(),
        "send_waits": st.booleans(),
        "read_first": st.booleans(),
        "inbound": st.booleans(),
    }
)


@needs_compiled
@REPLAYS
@given(events=st.lists(wait_event, max_size=60))
def test_any_wait_sequence_gives_the_reference_numbers(
    events: list[dict[str, Any]],
    stamped_socket: socket.socket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = replay_waits(False, events, stamped_socket, monkeypatch)
    assert replay_waits(True, events, stamped_socket, monkeypatch) == reference


@st.composite
def call_events(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Begins, numbers fed, finishes: of any measurement begun so far, finished or not,
    in any order, any number of times."""
    events: list[tuple[Any, ...]] = []
    begun = 0
    for _ in range(draw(st.integers(0, 120))):
        dt = draw(st.integers(0, 3_000)) * US
        kind = draw(st.sampled_from(["begin", "feed", "finish"]) if begun else st.just("begin"))
        if kind == "begin":
            offset = draw(st.none() | st.integers(-(10**18), 2 * 10**18))
            events.append(("begin", dt, offset))
            begun += 1
        elif kind == "feed":
            ns = draw(st.integers(1, 5_000)) * US
            events.append(("feed", dt, draw(st.integers(0, begun - 1)), ns, draw(st.floats(0, 1))))
        else:
            events.append(("finish", dt, draw(st.integers(0, begun - 1))))
    return events


@needs_compiled
@REPLAYS
@given(events=call_events())
def test_any_call_sequence_gives_the_reference_numbers(
    events: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = replay_calls(False, events, monkeypatch)
    assert replay_calls(True, events, monkeypatch) == reference
