"""CPU time of process trees, read from /proc (Linux).

A component (the simulator, Envoy, a gunicorn pool: master and workers, the load
generator) is a root pid and its descendants (``stack.procfs.tree``), each process's CPU
its utime + stime (``stack.procfs.process_cpu_s``), and each named thread's summed over
the component's processes (``stack.procfs.thread_cpu_s``: the span exporter's, say).
Snapshots before and after the measured window give each process's CPU seconds in the
window. A process that exits inside the
window loses its CPU from the count (none should: a restarted worker is a failed
run anyway and shows in the per-process list).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stack.procfs import CLK_TCK, process_cpu_s, thread_cpu_s, tree

_PROC = Path("/proc")


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat, first line)."""
    fields = (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    # user nice system idle iowait irq softirq steal (guest time is inside user/nice)
    values = [int(x) for x in fields[:8]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLK_TCK


def machine_busy_pct(window_s: float) -> float:
    """% of one core the whole machine was busy over the next `window_s` (blocks)."""
    before = machine_busy_s()
    time.sleep(window_s)
    return 100.0 * (machine_busy_s() - before) / window_s


# The component name under which CPU used by everything else on the machine is
# reported: on a shared machine it says how much the neighbours took.
OTHER = "other processes"


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds per process, grouped by component, and the whole machine's."""

    cpu_s: Mapping[str, Mapping[int, float]]
    machine_busy_s: float = 0.0
    # Component -> thread name -> CPU seconds of its threads of that name (all processes).
    threads_s: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @classmethod
    def take(cls, roots: Mapping[str, int]) -> Snapshot:
        out: dict[str, dict[int, float]] = {}
        threads: dict[str, dict[str, float]] = {}
        for name, root in roots.items():
            per_pid: dict[int, float] = {}
            per_thread: dict[str, float] = {}
            for pid in tree(root):
                cpu = process_cpu_s(pid)
                if cpu is not None:
                    per_pid[pid] = cpu
                for thread, seconds in thread_cpu_s(pid).items():
                    per_thread[thread] = per_thread.get(thread, 0.0) + seconds
            out[name] = per_pid
            threads[name] = per_thread
        return cls(out, machine_busy_s(), threads)


@dataclass(frozen=True)
class ComponentCpu:
    """One component's CPU in a window. Percent of ONE core (200 % = both cores)."""

    cpu_s: float
    cpu_pct: float
    # Per process (pid -> % of one core), root first: for a gunicorn pool the master
    # then each worker.
    processes_pct: Mapping[int, float]
    # Per thread name, CPU seconds of the component's threads of that name.
    threads_s: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "cpu_s": round(self.cpu_s, 3),
            "cpu_pct": round(self.cpu_pct, 2),
            "processes_pct": {str(p): round(v, 2) for p, v in self.processes_pct.items()},
            "threads_s": {name: round(v, 3) for name, v in self.threads_s.items()},
        }


def usage(
    before: Snapshot,
    after: Snapshot,
    window_s: float,
    extra: Mapping[str, ComponentCpu] | None = None,
) -> dict[str, ComponentCpu]:
    """CPU of each component between two snapshots `window_s` apart, plus `OTHER`:
    the machine's busy time minus the components' (never below zero: the two
    sources tick independently). Components in `extra` (the driver itself, which
    is not a root here) are subtracted from `OTHER` too."""
    out: dict[str, ComponentCpu] = dict(extra or {})
    for name, now in after.cpu_s.items():
        then = before.cpu_s.get(name, {})
        # A process first seen in `after` started inside the window: all its CPU counts.
        per_pid = {pid: max(0.0, cpu - then.get(pid, 0.0)) for pid, cpu in now.items()}
        total = sum(per_pid.values())
        threads_then = before.threads_s.get(name, {})
        out[name] = ComponentCpu(
            cpu_s=total,
            cpu_pct=100.0 * total / window_s,
            processes_pct={pid: 100.0 * v / window_s for pid, v in per_pid.items()},
            threads_s={
                thread: max(0.0, cpu - threads_then.get(thread, 0.0))
                for thread, cpu in after.threads_s.get(name, {}).items()
            },
        )
    ours = sum(c.cpu_s for c in out.values())
    other = max(0.0, after.machine_busy_s - before.machine_busy_s - ours)
    out[OTHER] = ComponentCpu(cpu_s=other, cpu_pct=100.0 * other / window_s, processes_pct={})
    return out
