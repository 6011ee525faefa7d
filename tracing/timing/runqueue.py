"""How long the hub's OS thread waited for a CPU: the other half of scheduling delay.

A greenlet that is ready but not running waits for one of two things: other greenlets
(or the hub) running on this thread, or the thread itself being runnable but not on a
CPU (a busy machine, the cpu pool next door, a container's CPU quota). Linux counts the
second per thread in ``/proc/thread-self/schedstat`` (second field: ns spent runnable on
a run queue; needs CONFIG_SCHED_INFO, on in every common kernel).

Reading it costs a ``pread``, too much for every greenlet switch. The
switch tracer calls :meth:`RunQueueClock.maybe_sample` on each switch and it reads at most
once per ``sample_interval_ns``; a delay interval ``[start, end)`` is then charged the
wait between the newest sample at or before ``start`` and a fresh read at ``end``. The
error is the run-queue wait between that sample and ``start``: below one interval when
the thread is busy (samples are dense), and ~0 when it was idle (an idle thread sleeps
in epoll, off every run queue).

The descriptor names the thread that opened it: create the clock on the hub's thread,
after the fork.
"""

from __future__ import annotations

import bisect
import os
from collections import deque
from typing import Final

SCHEDSTAT_PATH: Final = "/proc/thread-self/schedstat"

#: Default minimum gap between two samples taken from the switch tracer (ns). Each read
#: costs a pread: at 2 ms, at most 500 reads a second, and
#: the error of a delay's CPU wait is at most the run-queue wait of 2 ms of a busy thread.
DEFAULT_SAMPLE_INTERVAL_NS: Final = 2_000_000

#: Samples kept: at one per 2 ms, about four seconds of history; a delay that began
#: earlier is charged from the oldest sample (an over-estimate, clamped).
DEFAULT_SAMPLES: Final = 2048

# Sorts after any run-queue wait sampled at the same time.
_LATEST: Final = 1 << 63


class RunQueueClock:
    """Run-queue wait of the calling thread, read cheaply and remembered over time."""

    __slots__ = ("_fd", "_samples", "due_ns", "sample_interval_ns")

    def __init__(
        self,
        sample_interval_ns: int = DEFAULT_SAMPLE_INTERVAL_NS,
        samples: int = DEFAULT_SAMPLES,
        path: str = SCHEDSTAT_PATH,
    ) -> None:
        if sample_interval_ns <= 0:
            raise ValueError(f"sample_interval_ns must be > 0, got {sample_interval_ns}")
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.sample_interval_ns = sample_interval_ns
        self._samples: deque[tuple[int, int]] = deque(maxlen=samples)
        #: When the next periodic sample is due (monotonic ns); the switch tracer checks
        #: it inline, so a switch costs a compare, not a call, until then.
        self.due_ns = [0]

    @classmethod
    def open(cls, sample_interval_ns: int = DEFAULT_SAMPLE_INTERVAL_NS) -> RunQueueClock | None:
        """A clock for the calling thread, or None where the kernel does not count it."""
        try:
            clock = cls(sample_interval_ns)
            clock.read_ns()
            return clock
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def read_ns(self) -> int:
        """Total ns this thread has waited on a run queue since it started."""
        return int(os.pread(self._fd, 96, 0).split()[1])

    def maybe_sample(self, now_ns: int) -> None:
        """Remember (now, wait) if the previous sample is older than the interval."""
        if now_ns >= self.due_ns[0]:
            self.sample(now_ns)

    def sample(self, now_ns: int) -> int:
        """Read now, remember it, and return the wait. (The compiled switch tracer does
        the same for its periodic samples without calling this: ``csrc/runqueue.c``,
        ``sample_runqueue``; it reads ``_fd``, ``_samples`` and ``sample_interval_ns``.)"""
        wait = self.read_ns()
        self.due_ns[0] = now_ns + self.sample_interval_ns
        self._samples.append((now_ns, wait))
        return wait

    def _wait_at_or_before(self, at_ns: int) -> int | None:
        # A binary search: a scan back from the newest sample would grow with the delay
        # being explained (one sample per 2 ms of it).
        samples = self._samples
        if not samples:
            return None
        index = bisect.bisect_right(samples, (at_ns, _LATEST)) - 1
        return samples[max(index, 0)][1]

    def wait_between(self, start_ns: int, end_ns: int, wait_at_end: int | None = None) -> int:
        """Run-queue ns within ``[start_ns, end_ns)``, clamped to the interval.

        *wait_at_end* is a read taken at *end_ns* (read now when omitted).
        """
        if end_ns <= start_ns:
            return 0
        before = self._wait_at_or_before(start_ns)
        if before is None:
            return 0
        after = self.sample(end_ns) if wait_at_end is None else wait_at_end
        return min(max(after - before, 0), end_ns - start_ns)
