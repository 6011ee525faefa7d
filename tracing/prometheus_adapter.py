"""The one place that reaches into prometheus_client's internals: adding a batch of
observations to a histogram or a summary at once, and the process id its multiprocess
values check.

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

import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import values

#: This process's id, refreshed in a forked child (``os.register_at_fork``): what
#: ``os.getpid()`` returns, without its syscall.
_pid = os.getpid()


def _refresh_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


def cached_pid() -> int:
    """``os.getpid()`` from a cache that every fork refreshes."""
    return _pid


def check_pid_from_cache() -> bool:
    """Have the multiprocess values made from now on take this process's id from
    :func:`cached_pid`. prometheus_client calls ``os.getpid()`` on every value write, to
    notice a fork, and a worker's once-a-second flush writes a few hundred values: that
    many syscalls a second for a pid that only a fork changes. Only in multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR``); idempotent; True when the values check it so."""
    current = values.ValueClass
    if getattr(current, "_pid_from_cache", False):
        return True
    if not getattr(current, "_multiprocess", False):
        return False
    value_class = values.MultiProcessValue(process_identifier=cached_pid)
    value_class._pid_from_cache = True
    values.ValueClass = value_class
    return True


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
