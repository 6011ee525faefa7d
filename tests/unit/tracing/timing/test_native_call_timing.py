"""The compiled hot path against its Python reference: a call's measurement begun and
finished.
"""

from __future__ import annotations

import pytest
from greenlet import getcurrent

from tests.unit.tracing.timing.replay import (
    call_events,
    needs_compiled,
    replay_calls,
)
from tracing.timing import call_state
from tracing.timing.call_state import CallState
from tracing.timing.labels import TAG_ATTR


@needs_compiled
@pytest.mark.parametrize("seed", range(10))
def test_calls_are_begun_and_finished_as_the_reference_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = call_events(seed, steps=160)
    reference = replay_calls(False, events, monkeypatch)
    depths = [step[1] for step in reference if step[0] == "begin"]
    assert max(depths) == 8, "the sequence never nested to MAX_NESTING"
    finished = [step for step in reference if step[0] == "finish"]
    assert any(step[3] for step in finished), "no call had culprits"
    compiled_steps = replay_calls(True, events, monkeypatch)
    assert compiled_steps == reference


@needs_compiled
def test_a_compiled_measurement_is_a_reference_measurement() -> None:
    """The compiled begin makes the reference's types: a CallMeasurement whose CallState
    the Python hooks (and the reference's finish) can carry on with."""
    from tracing.timing import call_timing

    measurement = call_timing.begin_call(123)
    try:
        assert type(measurement) is call_timing.CallMeasurement
        state = measurement._state
        assert type(state) is CallState and state.realtime_offset_ns == 123
        assert getattr(getcurrent(), TAG_ATTR).call is state
        state.add_network(state.start_ns, state.start_ns + 5_000)
    finally:
        timing = measurement.finish()
    assert type(timing) is call_state.CallTiming and timing.network_s == 5e-6
    assert getattr(getcurrent(), TAG_ATTR).call is None
