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

import logging
import mmap
import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import mmap_dict, values

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


# --- a full file system never kills a worker -------------------------------------------
#
# A multiprocess value lives in an mmap'ed file of the pool's metrics directory, which
# prometheus_client extends with ``truncate``: a sparse file whose blocks are taken only
# when a page is first written. On a full file system that first write is SIGBUS, and
# the worker dies (a new worker's first metric, or a new series, takes a page): the pool
# crash-loops while its metrics directory is full. Here each file's blocks are reserved
# (``posix_fallocate``) before its pages are written; where the file system cannot, the
# file is moved into memory (``memfd_create``): that worker's values of that kind are
# then counted but no longer scraped (lost to the pool's totals), said in one warning.

_log = logging.getLogger("tracing.metrics")


class ReservedMmapedDict(mmap_dict.MmapedDict):
    """prometheus_client's ``MmapedDict`` whose pages are always backed."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode and not _reserve_file(filename):
            _in_memory(filename)
            self._f = os.fdopen(os.memfd_create("pricing-metrics"), "a+b")
            self._fname = filename
            self._capacity = mmap_dict._INITIAL_MMAP_SIZE
            self._f.truncate(self._capacity)
            self._m = mmap.mmap(self._f.fileno(), self._capacity)
            self._positions: dict[str, int] = {}
            self._used = 8
            mmap_dict._pack_integer(self._m, 0, self._used)
            return
        super().__init__(filename, read_mode)

    def _init_value(self, key: str) -> None:
        encoded = key.encode("utf-8")
        size = 4 + len(encoded) + (8 - (len(encoded) + 4) % 8) + 16  # as the base class packs
        capacity = self._capacity
        while self._used + size > capacity:
            capacity *= 2
        if capacity != self._capacity:
            try:
                os.posix_fallocate(self._f.fileno(), 0, capacity)
            except OSError:
                self._move_to_memory()
        super()._init_value(key)

    def _move_to_memory(self) -> None:
        """The values so far stay in the file (the pool's totals keep them); from here
        on, this process's values of this kind live in memory."""
        _in_memory(self._fname)
        moved = os.fdopen(os.memfd_create("pricing-metrics"), "a+b")
        moved.write(self._m[: self._capacity])
        moved.flush()
        self._m.close()
        self._f.close()
        self._f = moved
        self._m = mmap.mmap(moved.fileno(), self._capacity)


def _reserve_file(filename: str) -> bool:
    """Take the blocks of `filename` (created at prometheus_client's first size if new);
    False, and nothing left behind, where the file system has no room."""
    fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        try:
            os.posix_fallocate(fd, 0, size or mmap_dict._INITIAL_MMAP_SIZE)
        except OSError:
            if size == 0:  # an empty file would break every scrape's reader
                os.unlink(filename)
            return False
        return True
    finally:
        os.close(fd)


#: What the warning says of a file moved into memory (`pricingctl bench faults` counts it).
IN_MEMORY_WARNING = "kept in memory, not scraped"

#: Files of this process moved into memory: their later values are not scraped.
moved_to_memory: list[str] = []


def _in_memory(filename: str) -> None:
    moved_to_memory.append(filename)
    _log.warning(
        "metrics: no room for %s; this worker's values there are %s (the metrics "
        "directory's file system is full)",
        os.path.basename(filename),
        IN_MEMORY_WARNING,
    )


def reserve_metric_files() -> None:
    """Every multiprocess value of this process from now on in a ``ReservedMmapedDict``
    (idempotent)."""
    values.MmapedDict = ReservedMmapedDict  # type: ignore[misc]
