"""The compiled hot path against its Python reference: a request's measurement begun and
finished.
"""

from __future__ import annotations

import pytest

from tests.unit.tracing.timing.replay import (
    compiled,
    needs_compiled,
    replay_requests,
    request_events,
)


@needs_compiled
@pytest.mark.parametrize("seed", range(8))
def test_requests_are_begun_and_finished_as_the_reference_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = request_events(seed, steps=60)
    reference = replay_requests(False, events, monkeypatch)
    finished = [step for step in reference if isinstance(step, tuple) and step[0] == "finish"]
    assert any(step[1][9] is not None and step[1][11] > 0 for step in finished), (
        "no critical call had a pre-send wait"
    )
    assert any(step[1][13] > 0 for step in finished), "no critical call overlapped a run"
    begun = [step for step in reference if isinstance(step, tuple) and step[0] == "begin"]
    assert any(step[6] for step in begun), "no inbound delay had culprits"
    bad = compiled.bad_states()
    compiled_steps = replay_requests(True, events, monkeypatch)
    assert compiled.bad_states() == bad, "the compiled path dropped a state"
    assert compiled_steps == reference
