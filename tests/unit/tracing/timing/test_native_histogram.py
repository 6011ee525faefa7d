"""The compiled hot path against its Python reference: the histograms."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.unit.tracing.timing.replay import (
    compiled,
    needs_compiled,
)


@needs_compiled
@pytest.mark.parametrize("seed", range(4))
def test_a_histogram_counts_as_the_reference_does(seed: int) -> None:
    from tracing.timing.histogram import Histogram

    rng = random.Random(seed)
    bounds = sorted({round(rng.uniform(0.0001, 2.0), 4) for _ in range(rng.randrange(1, 20))})
    reference, fast = Histogram(bounds), compiled.Histogram(bounds)
    values: list[float] = [*bounds, 0.0, -1.0, 5.0, 1 + 2**-40, 3]  # on each bound, ints
    values += [rng.uniform(-0.1, 2.5) for _ in range(500)]
    for value in values:
        reference.observe(value)
        fast.observe(value)
    assert fast.bounds == reference.bounds
    assert fast.counts == reference.counts and fast.count == reference.count == len(values)
    assert fast.sum == reference.sum
    assert fast.cumulative() == reference.cumulative()


@needs_compiled
@pytest.mark.parametrize("bounds", [[], [1.0, 1.0], [2.0, 1.0]])
def test_a_histogram_refuses_the_bounds_the_reference_refuses(bounds: list[Any]) -> None:
    from tracing.timing.histogram import Histogram

    with pytest.raises(ValueError):
        Histogram(bounds)
    with pytest.raises(ValueError, match="distinct and increasing"):
        compiled.Histogram(bounds)
