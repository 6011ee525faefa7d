"""A ring buffer of greenlet switches, and who ran during a given interval.

Each entry is ``(time_ns, label)``: from ``time_ns`` on, a greenlet with that label ran
(``None`` for unlabelled). Entries hold labels, never greenlets, so the log keeps nothing
alive. Attribution walks the log backwards from the end of an interval, so its cost grows
with the number of switches inside the interval; callers only walk it for delays worth
naming (see ``CULPRIT_THRESHOLD_S``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from tracing.timing import native
from tracing.timing.labels import UNKNOWN_LABEL

#: Default capacity (entries). At ~20k switches/s under load this covers ~0.4 s; a delay
#: reaching further back is partly attributed to ``UNRECORDED_LABEL``.
DEFAULT_SIZE = 8192

#: Entries one attribution walks at most (~0.12 us each). An overloaded hub switches
#: tens of thousands of times a second and every call is delayed: unbounded walks
#: would add the CPU that makes the delays longer. The part of a delay further back
#: than this is named ``UNRECORDED_LABEL``.
MAX_WALK = 512

#: Label for the part of an interval older than the oldest entry still in the log
#: (or than the walk reached).
UNRECORDED_LABEL = "<unrecorded>"


class SwitchLog:
    """Fixed-size log of ``(time_ns, label)`` switch entries, oldest first."""

    __slots__ = ("_entries", "append")

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 2:
            raise ValueError(f"switch log size must be at least 2, got {size}")
        self._entries: deque[tuple[int, str | None]] = deque(maxlen=size)
        # Bound method, looked up once: the switch tracer calls it on every switch.
        self.append = self._entries.append

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[tuple[int, str | None]]:
        """Every entry, oldest first."""
        return list(self._entries)

    def last(self) -> tuple[int, str | None] | None:
        """Return the newest entry, or None. Safe to call from another OS thread."""
        try:
            return self._entries[-1]
        except IndexError:
            return None

    def attribute(self, start_ns: int, end_ns: int, into: dict[str, int]) -> None:
        """Add to *into* how many ns of ``[start_ns, end_ns)`` each label was running.

        Entries at or after *end_ns* are ignored: the switch that ends the interval belongs
        to the greenlet that was waiting, not to a culprit.
        """
        if end_ns <= start_ns:
            return
        segment_end = end_ns
        budget = MAX_WALK
        for switched_at, label in reversed(self._entries):
            budget -= 1
            if budget < 0:
                break  # the rest is named <unrecorded>: bounded cost under overload
            if switched_at >= segment_end:
                continue
            segment_start = switched_at if switched_at > start_ns else start_ns
            name = UNKNOWN_LABEL if label is None else label
            into[name] = into.get(name, 0) + (segment_end - segment_start)
            if switched_at <= start_ns:
                return
            segment_end = switched_at
        into[UNRECORDED_LABEL] = into.get(UNRECORDED_LABEL, 0) + (segment_end - start_ns)


def new_log(size: int = DEFAULT_SIZE) -> Any:
    """A switch log: the compiled one where the compiled path runs (the compiled switch
    tracer writes only into that kind), else :class:`SwitchLog`."""
    compiled = native.active()
    return SwitchLog(size) if compiled is None else compiled.SwitchLog(size)
