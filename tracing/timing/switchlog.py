"""A ring buffer of greenlet switches, and who ran during a given interval.

Each entry is ``(time_ns, label)``: from ``time_ns`` on, a greenlet with that label ran
(``None`` for unlabelled). Entries hold labels, never greenlets, so the log keeps nothing
alive.

Who ran during ``[start, end)`` is what the entries inside it say; time before the
oldest entry still in the log is ``UNRECORDED_LABEL``. Two ways to the same numbers:

- here, the reference, naming costs the same whatever the interval's length: the log keeps,
  per label, the time it ran since the log began (cumulative counters), with a checkpoint
  every ``CHECKPOINT_EVERY`` entries. Who ran during ``[start, end)`` is the counters at
  ``end`` minus those at ``start``, each found from the checkpoint before it (a binary
  search) plus at most ``CHECKPOINT_EVERY`` entries. The counters are brought up to date
  lazily, when an interval is asked for: each entry is folded into them once, so the
  switch tracer's per-switch work stays one append. A walk over a long interval's
  entries in Python would cost a few ms.
- the compiled log (``csrc/switchlog.c``) walks the entries inside the interval: a few ns an
  entry, bounded by the log's size, and nothing to fold or copy.
"""

from __future__ import annotations

import bisect
import sys
from collections import deque
from typing import Any

from tracing.timing import native
from tracing.timing.labels import UNKNOWN_LABEL

#: Default capacity (entries): how far back it reaches is this over the switch rate (a
#: loaded io worker's: ``pricingctl bench timing-accuracy``); a delay reaching further
#: back is partly attributed to ``UNRECORDED_LABEL``.
DEFAULT_SIZE = 8192

#: Entries between two checkpoints of the cumulative counters: an interval's end and its
#: start each cost a binary search plus at most this many entries.
CHECKPOINT_EVERY = 64

#: Label for the part of an interval older than the oldest entry still in the log.
UNRECORDED_LABEL = "<unrecorded>"


class _Checkpoint:
    """The counters when the entry at ``time_ns`` began, and the entries after it."""

    __slots__ = ("cumulative", "followers", "name", "time_ns")

    def __init__(self, time_ns: int, name: str, cumulative: dict[str, int]) -> None:
        self.time_ns = time_ns
        self.name = name
        self.cumulative = cumulative
        self.followers: list[tuple[int, str]] = []


class SwitchLog:
    """Fixed-size log of ``(time_ns, label)`` switch entries, oldest first."""

    __slots__ = (
        "_checkpoint_times",
        "_checkpoints",
        "_cumulative",
        "_entries",
        "_folded_entry",
        "_folded_name",
        "_folded_ns",
        "_max_checkpoints",
        "append",
    )

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 2:
            raise ValueError(f"switch log size must be at least 2, got {size}")
        self._entries: deque[tuple[int, str | None]] = deque(maxlen=size)
        # Bound method, looked up once: the switch tracer calls it on every switch.
        self.append = self._entries.append
        # Checkpoints cover about as many entries as the log holds.
        self._max_checkpoints = size // CHECKPOINT_EVERY + 2
        self._checkpoints: list[_Checkpoint] = []
        self._checkpoint_times: list[int] = []
        self._cumulative: dict[str, int] = {}
        self._folded_ns: int | None = None  # the newest entry folded into the counters
        self._folded_entry: tuple[int, str | None] | None = None  # that entry itself
        self._folded_name = UNKNOWN_LABEL

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

    def _fold(self) -> None:
        """Fold the entries appended since the last fold into the counters."""
        folded = self._folded_ns
        new: list[tuple[int, str | None]] = []
        exhausted = True
        last = self._folded_entry
        for entry in reversed(self._entries):
            # By identity, not time: an entry appended in the same ns as the last one
            # folded is new (each append is a new tuple; the tracer never reuses one).
            if entry is last:
                exhausted = False
                break
            new.append(entry)
        if exhausted and folded is not None:
            # Entries between the last fold and the oldest one left were overwritten:
            # start again from what the log holds.
            self._checkpoints.clear()
            self._checkpoint_times.clear()
            self._cumulative = {}
            folded = None
        cumulative = self._cumulative
        name = self._folded_name
        checkpoints = self._checkpoints
        current = checkpoints[-1] if checkpoints else None
        for time_ns, label in reversed(new):
            if folded is not None:
                cumulative[name] = cumulative.get(name, 0) + (time_ns - folded)
            folded = time_ns
            name = UNKNOWN_LABEL if label is None else label
            if current is None or len(current.followers) >= CHECKPOINT_EVERY - 1:
                current = _Checkpoint(time_ns, name, dict(cumulative))
                checkpoints.append(current)
                self._checkpoint_times.append(time_ns)
            else:
                current.followers.append((time_ns, name))
        self._folded_ns = folded
        self._folded_name = name
        if new:
            self._folded_entry = new[0]
        excess = len(checkpoints) - self._max_checkpoints
        if excess > 0:
            del checkpoints[:excess]
            del self._checkpoint_times[:excess]

    def _counters_at(self, at_ns: int) -> dict[str, int]:
        """The cumulative counters at *at_ns* (not before the oldest checkpoint)."""
        index = bisect.bisect_right(self._checkpoint_times, at_ns) - 1
        checkpoint = self._checkpoints[index]
        counters = dict(checkpoint.cumulative)
        since, name = checkpoint.time_ns, checkpoint.name
        for time_ns, follower in checkpoint.followers:
            if time_ns > at_ns:
                break
            counters[name] = counters.get(name, 0) + (time_ns - since)
            since, name = time_ns, follower
        counters[name] = counters.get(name, 0) + (at_ns - since)
        return counters

    def attribute(self, start_ns: int, end_ns: int, into: dict[str, int]) -> None:
        """Add to *into* how many ns of ``[start_ns, end_ns)`` each label was running.

        Entries at or after *end_ns* are ignored: the switch that ends the interval belongs
        to the greenlet that was waiting, not to a culprit. The cost does not depend on
        the interval's length (see the module docstring).
        """
        if end_ns <= start_ns:
            return
        self._fold()
        if not self._checkpoints:
            into[UNRECORDED_LABEL] = into.get(UNRECORDED_LABEL, 0) + (end_ns - start_ns)
            return
        # The checkpoints may reach a little further back than the entries: what the log
        # no longer holds is unrecorded, as in the compiled log.
        oldest = max(self._checkpoint_times[0], self._entries[0][0])
        if start_ns < oldest:
            unrecorded = min(end_ns, oldest) - start_ns
            into[UNRECORDED_LABEL] = into.get(UNRECORDED_LABEL, 0) + unrecorded
            if end_ns <= oldest:
                return
            start_ns = oldest
        before = self._counters_at(start_ns)
        after = self._counters_at(end_ns)
        for name, ns in after.items():
            ran = ns - before.get(name, 0)
            if ran > 0:
                into[name] = into.get(name, 0) + ran


def new_log(size: int = DEFAULT_SIZE) -> Any:
    """A switch log: :class:`SwitchLog`, or the compiled one where the compiled path runs
    (the compiled switch tracer writes only into that kind)."""
    return SwitchLog(size)


def is_current(log: Any) -> bool:
    """Whether *log* is of the kind :func:`new_log` makes now."""
    return type(log) is SwitchLog


def _compiled(extension: Any) -> dict[str, Any]:
    def new_compiled_log(size: int = DEFAULT_SIZE) -> Any:
        return extension.SwitchLog(size)

    def is_compiled(log: Any) -> bool:
        return type(log) is extension.SwitchLog

    return {"new_log": new_compiled_log, "is_current": is_compiled}


native.accelerate(sys.modules[__name__], _compiled)
