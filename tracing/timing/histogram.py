"""Fixed-bucket histograms, cheap enough to observe every request and every call.

One observation is a ``bisect`` and two additions (compiled: ``csrc/histogram.c``'s
``Histogram``; both measured by ``pricingctl bench metrics-cost``): the timings of 100 % of
calls go in, whatever the span sampling. Counts are per bucket (not cumulative);
exposition formats cumulate them. The labelled families, their bounds and the flush into
prometheus_client are ``tracing.metrics``'.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Sequence
from typing import Any

from tracing.timing import native


class Histogram:
    """Counts per bucket and the sum of observations."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(bounds) or len(set(bounds)) != len(bounds) or not bounds:
            raise ValueError(f"bucket bounds must be distinct and increasing, got {bounds!r}")
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` pairs, ending with ``(inf, count)``."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


def new_histogram(bounds: Sequence[float]) -> Any:
    """A histogram: :class:`Histogram`, or the compiled one where the compiled path runs
    (the same numbers, see ``test_native``)."""
    return Histogram(bounds)


native.accelerate(sys.modules[__name__], lambda extension: {"new_histogram": extension.Histogram})
