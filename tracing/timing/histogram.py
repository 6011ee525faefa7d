"""Fixed-bucket histograms, cheap enough to observe every request and every call.

One observation is a ``bisect`` and two additions (~0.3 us): the timings of 100 % of
calls go in, whatever the span sampling. Counts are per bucket (not cumulative);
exposition formats cumulate them. Labelled families create a histogram per label
value on first use.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Final

#: Default upper bounds (seconds); the last bucket is +Inf. From 0.5 ms (a call that
#: waited for nothing) to 5 s (far past any route timeout).
DEFAULT_BUCKETS_S: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class Histogram:
    """Counts per bucket and the sum of observations."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = DEFAULT_BUCKETS_S) -> None:
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


class HistogramFamily:
    """Histograms of one metric, one per label value (a route, an upstream)."""

    __slots__ = ("bounds", "by_label", "help", "label", "name")

    def __init__(
        self, name: str, help_text: str, label: str, bounds: Sequence[float] = DEFAULT_BUCKETS_S
    ) -> None:
        self.name = name
        self.help = help_text
        self.label = label
        self.bounds = tuple(bounds)
        self.by_label: dict[str, Histogram] = {}

    def observe(self, label_value: str, value: float) -> None:
        histogram = self.by_label.get(label_value)
        if histogram is None:
            histogram = self.by_label[label_value] = Histogram(self.bounds)
        histogram.observe(value)
