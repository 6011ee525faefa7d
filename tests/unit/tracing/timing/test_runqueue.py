"""The run-queue clock's lookup of the sample before an interval (a fake schedstat)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracing.timing.runqueue import RunQueueClock


@pytest.fixture
def clock(tmp_path: Path) -> RunQueueClock:
    path = tmp_path / "schedstat"
    path.write_text("0 0 0\n")
    return RunQueueClock(sample_interval_ns=1, samples=64, path=str(path))


def test_the_wait_is_taken_from_the_sample_at_or_before_the_start(clock: RunQueueClock) -> None:
    # Sampled at t = 0, 10, 20, ... with the wait growing by 3 ns per sample.
    for i in range(40):
        clock._samples.append((i * 10, i * 3))
    assert clock.wait_between(105, 400, wait_at_end=200) == 200 - 10 * 3
    assert clock.wait_between(100, 400, wait_at_end=200) == 200 - 10 * 3
    assert clock.wait_between(-5, 400, wait_at_end=200) == 200  # before every sample
    assert clock.wait_between(10_000, 10_050, wait_at_end=117 + 40) == 40  # after them all


def test_no_sample_means_no_wait(clock: RunQueueClock) -> None:
    assert clock.wait_between(0, 100, wait_at_end=50) == 0
