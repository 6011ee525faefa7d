"""The one place that reaches into prometheus_client's internals: adding a batch of
observations to a histogram or a summary at once.

prometheus_client has no public call for "add these bucket counts and this sum": a
histogram's or a summary's ``observe`` takes one value. ``tracing.metrics`` counts
observations in plain in-process histograms on the request path and folds their deltas
into the prometheus_client values once a second; folding bucket counts needs a
histogram child's ``_buckets`` (one value per bucket, ``+Inf`` last, not cumulative)
and ``_sum``, folding a count a summary child's ``_count`` and ``_sum``.
prometheus-client is pinned in pyproject.toml for this reason, and
tests/unit/tracing/test_prometheus_adapter.py fails if those internals change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def histogram_bounds(child: Any) -> tuple[float, ...]:
    """A histogram child's upper bounds, ``+Inf`` last."""
    return tuple(child._upper_bounds)


def add_to_histogram(child: Any, bucket_counts: Sequence[int], sum_delta: float) -> None:
    """Add observations to a histogram child (its ``labels(...)``, or an unlabelled
    histogram): *bucket_counts* per bucket (not cumulative, ``+Inf`` last; one per
    bound of ``histogram_bounds``) and their sum. Same result as ``observe`` called
    once per observation, one value write per non-empty bucket instead."""
    buckets = child._buckets
    if len(buckets) != len(bucket_counts):
        raise ValueError(f"{len(bucket_counts)} bucket counts for {len(buckets)} buckets")
    child._sum.inc(sum_delta)
    for bucket, count in zip(buckets, bucket_counts, strict=True):
        if count:
            bucket.inc(count)


def add_to_summary(child: Any, count: int, sum_delta: float) -> None:
    """Add *count* observations summing to *sum_delta* to a summary child (no quantiles:
    prometheus_client's summaries have none): same result as ``observe`` called once
    per observation."""
    child._count.inc(count)
    child._sum.inc(sum_delta)
