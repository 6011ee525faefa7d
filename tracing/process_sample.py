"""A worker's own process metrics (CPU, memory, descriptors, start), sampled from /proc
before each flush into the pool's ``process_*`` families.

prometheus_client's process collector reports the scraping process only in
multiprocess mode; these are the pool's workers' own, each sampling itself (a few
/proc reads, once a second, inside the flush ``pricingctl bench metrics-cost`` times).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from prometheus_client import ProcessCollector

#: The CPU sample (a running total, brought in as a counter's gain).
CPU_SAMPLE: Final = "process_cpu_seconds_total"

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

    def __call__(self) -> None:
        for family in _PROCESS.collect():
            for sample in family.samples:
                if sample.name == CPU_SAMPLE:
                    self._sync(self._cpu, (), sample.value, self._seen)
                elif sample.name in self._gauges:
                    self._gauges[sample.name].set(sample.value)


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
