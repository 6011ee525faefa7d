"""What naming a delay's culprits costs, by how many switches the delay spans: the switch
log's ``attribute`` (``tracing.timing.switchlog``), in Python and compiled.

    python -m bench.culprit_cost [--reps 2000]

Prints CPU microseconds per attribution (best of 3), for a log with a switch every
10 us and delays spanning 10 to 8,000 switches. Folding new entries into the counters is
paid once per entry, at the next attribution; the log here is folded before timing.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

SPANS = (10, 100, 512, 2000, 8000)


def _cost(kind: Any, switches: int, reps: int) -> float:
    log = kind(8192)
    for i in range(8192):
        log.append((i * 10_000, "POST /hog" if i % 2 else None))
    end = 8191 * 10_000
    start = end - switches * 10_000
    log.attribute(start, end, {})
    began = time.thread_time()
    for _ in range(reps):
        log.attribute(start, end, {})
    return (time.thread_time() - began) / reps * 1e6


def main() -> None:
    from tracing.timing import native, switchlog

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    kinds: list[tuple[str, Any]] = [("python", switchlog.SwitchLog)]
    if native.module is not None:
        kinds.append(("compiled", native.module.SwitchLog))
    for name, kind in kinds:
        costs = {n: min(_cost(kind, n, args.reps) for _ in range(3)) for n in SPANS}
        print(f"{name}: " + ", ".join(f"{n} switches {us:.2f} us" for n, us in costs.items()))


if __name__ == "__main__":
    main()
