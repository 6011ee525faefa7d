"""The compiled hot path against its Python reference: the switch log and the delay
explained from it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit.tracing.timing.replay import (
    LABELS,
    US,
    compiled,
    needs_compiled,
)
from tracing.timing import call_state
from tracing.timing.runqueue import RunQueueClock
from tracing.timing.switchlog import SwitchLog


@needs_compiled
@pytest.mark.parametrize("size", [2, 7, 64, 300])
def test_the_switch_log_attributes_as_the_reference(size: int) -> None:
    """Appends and attributions interleaved; sometimes so many appends in between that
    the counters must start again from what the log still holds."""
    rng = random.Random(size)
    python_log, c_log = SwitchLog(size), compiled.SwitchLog(size)
    t = 0
    for _ in range(400):
        for _ in range(rng.choice([1, 3, 20, 70, 2 * size])):
            t += rng.randrange(1, 50) * US
            entry = (t, rng.choice(LABELS))
            python_log.append(entry)
            c_log.append(entry)
        assert python_log.last() == c_log.last()
        assert len(python_log) == len(c_log)
        start = t - rng.randrange(0, 6000) * US
        end = start + rng.randrange(0, 6000) * US
        expected: dict[str, int] = {}
        got: dict[str, int] = {}
        python_log.attribute(start, end, expected)
        c_log.attribute(start, end, got)
        assert got == expected
    assert c_log.entries() == python_log.entries()


@needs_compiled
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_delay_is_explained_as_the_reference_does(seed: int, tmp_path: Path) -> None:
    """Culprits and run-queue wait of delay pieces: the compiled explanation (its own read
    of the clock, its binary search over the samples) against ``call_state.explain_delay``,
    each with its own clock on the same recorded schedstat readings."""
    rng = random.Random(seed)
    log = compiled.SwitchLog(64)
    t = 0
    for _ in range(300):
        t += rng.randrange(1, 900) * US
        log.append((t, rng.choice(LABELS)))
    schedstat = tmp_path / "schedstat"
    schedstat.write_text("1000 0 5\n")
    clocks = {
        use: RunQueueClock(sample_interval_ns=700 * US, path=str(schedstat))
        for use in (True, False)
    }
    waited = 0
    explained = 0
    try:
        for step in range(200):
            # Samples in between (as the switch tracer takes them), and the wait growing.
            at = rng.randrange(0, t)
            waited += rng.randrange(0, 400) * US
            schedstat.write_text(f"1000 {waited} 5\n")
            if step % 3 == 0:
                for clock in clocks.values():
                    clock.sample(t - 300_000 * US + step * 1_000 * US)
            start = at - rng.choice([0, 500, 1_500, 40_000]) * US
            end = start + rng.choice([200, 999, 1_000, 3_000, 90_000]) * US
            results = {}
            for use, clock in clocks.items():
                call_state.configure(log, 0.001, clock)
                culprits: dict[str, int] = {}
                explain = compiled.explain_delay if use else call_state.explain_delay
                results[use] = (explain(start, end, culprits), culprits)
            assert results[True] == results[False]
            explained += bool(results[True][0])
        assert list(clocks[True]._samples) == list(clocks[False]._samples)
        assert clocks[True].due_ns == clocks[False].due_ns
        assert explained > 20  # the sequence does exercise the run-queue wait
    finally:
        call_state.configure(None, call_state.CULPRIT_THRESHOLD_S)
        for clock in clocks.values():
            clock.close()
