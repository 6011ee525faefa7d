"""A worker's own process metrics (CPU, memory, descriptors, start), sampled from /proc
before each flush into the pool's ``process_*`` families.

prometheus_client's process collector reports the scraping process only in
multiprocess mode; these are the pool's workers' own, each sampling itself (a few
/proc reads, once a second, inside the flush ``pricingctl bench metrics-cost`` times).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from prometheus_client import ProcessCollector

from tracing.metric_families import ALLOCATED_BLOCKS

#: The CPU sample (a running total, brought in as a counter's gain).
CPU_SAMPLE: Final = "process_cpu_seconds_total"

#: Seconds between two counts of the allocator's blocks: ``sys.getallocatedblocks()``
#: walks every arena of the heap while it holds the hub, and a leak shows in minutes,
#: not seconds.
ALLOCATED_BLOCKS_EVERY_S: Final = 10.0

#: Reads /proc/self; not registered anywhere (``ProcessSampler`` copies its values).
_PROCESS: Final = ProcessCollector(registry=None)

#: Adds to a counter what a running total gained since the last call
#: (``PoolMetrics.sync``'s shape).
Sync = Callable[[Any, tuple[str, ...], float, dict[Any, float]], None]


class ProcessSampler:
    """Copies this process's samples into *cpu* (a counter family, through *sync*) and
    *gauges* (by sample name)."""

    def __init__(self, cpu: Any, gauges: Mapping[str, Any], sync: Sync) -> None:
        self._cpu = cpu
        self._gauges = dict(gauges)
        self._sync = sync
        self._seen: dict[Any, float] = {}
        self._blocks_due = 0.0

    def __call__(self) -> None:
        for family in _PROCESS.collect():
            for sample in family.samples:
                if sample.name == CPU_SAMPLE:
                    self._sync(self._cpu, (), sample.value, self._seen)
                elif sample.name in self._gauges:
                    self._gauges[sample.name].set(sample.value)
        blocks = self._gauges.get(ALLOCATED_BLOCKS)
        now = time.monotonic()
        if blocks is not None and now >= self._blocks_due:
            self._blocks_due = now + ALLOCATED_BLOCKS_EVERY_S
            blocks.set(sys.getallocatedblocks())


def build_labels() -> tuple[str, str, str, str]:
    """The ``pricing_build_info`` labels: the service's version, Python's, gevent's and
    the OpenTelemetry SDK's."""
    from importlib.metadata import PackageNotFoundError, version

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "unknown"

    python = ".".join(str(part) for part in sys.version_info[:3])
    return of("pricingservice"), python, of("gevent"), of("opentelemetry-sdk")
