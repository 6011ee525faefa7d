"""CPU time per label: how long greenlets working for each route ran on the hub.

The switch tracer charges the time from one switch to the next to the label of the
greenlet that ran in between (``labels``: a route template; fan-out greenlets inherit
their spawner's). Summed per label and divided by the route's requests, that is the
route's CPU per request: the number that says whether it may share a hub with
I/O-bound routes.

Switched-in time is CPU time unless the OS preempted the thread meanwhile. A short run
(below ``LONG_RUN_NS``) is charged as it is: preemption inside it is rare and small. A
long run, the kind CPU-heavy routes make, has the thread's run-queue wait during it
(``runqueue.RunQueueClock``, one ``pread``) taken off, so a route is not blamed for a
busy machine. Blocking calls a greenlet makes while holding the hub (off CPU, but the
hub is held all the same) count as its time.

Reading the thread's CPU clock at every switch would be exact, but costs several times
what this does (a dict update, plus one ``pread`` per long run); the switch tracer's
cost, this included: ``pricingctl bench timing-cost``.

A run of a greenlet (not the hub, whose long runs are its idle waits in ``epoll_wait``)
that lasts ``block_ns`` or more held the hub that long: it is counted in ``blocks``, per
label, when it ends. That is the count of hub blocks (``pricing_hub_blocks``): exact, and
with no thread waking up to watch; ``hub_block``'s watcher only catches a block while it
lasts, for its stack.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from tracing.timing.labels import HUB_LABEL

#: Runs at least this long (ns) have the run-queue wait inside them taken off.
LONG_RUN_NS: Final = 1_000_000

#: Never: no run counts as a hub block (``block_ns`` when nobody asked for blocks).
NO_BLOCKS_NS: Final = 1 << 62


class RunQueueWait(Protocol):
    """``runqueue.RunQueueClock`` is one."""

    def wait_between(self, start_ns: int, end_ns: int, wait_at_end: int | None = None) -> int: ...


class RouteCpu:
    """Per-label time on the hub (ns), fed by the switch tracer on the hub's thread.

    ``since`` is ``[time_ns, label]`` of the run in progress; the tracer updates it and
    ``by_label_ns`` inline (see ``switch_tracer``) and calls :meth:`charge_long` for long
    runs. ``None`` is the label of unlabelled greenlets. ``blocks``: runs of at least
    ``block_ns`` per label (never the hub's), counted as they end.

    The compiled tracer keeps both in its own state and brings them in when ``pull`` is
    called (it sets ``pull``): read them through :meth:`current`.
    """

    __slots__ = ("block_ns", "blocks", "by_label_ns", "long_ns", "pull", "runqueue", "since")

    def __init__(
        self,
        runqueue: RunQueueWait | None = None,
        long_ns: int = LONG_RUN_NS,
        block_ns: int = NO_BLOCKS_NS,
    ) -> None:
        if block_ns < long_ns:
            raise ValueError(f"block_ns ({block_ns}) must be at least long_ns ({long_ns})")
        self.by_label_ns: dict[str | None, int] = {}
        self.blocks: dict[str | None, int] = {}
        self.block_ns = block_ns
        # [start ns, label]: a list, not two attributes, so the tracer updates it in place.
        self.since: list[Any] = [time.monotonic_ns(), HUB_LABEL]
        self.runqueue = runqueue
        self.long_ns = long_ns
        #: Brings what a tracer holds into ``since`` and ``by_label_ns`` (None: nothing).
        self.pull: Callable[[], None] | None = None

    def current(self) -> dict[str | None, int]:
        """``by_label_ns``, up to date (what the tracer holds brought in first)."""
        if self.pull is not None:
            self.pull()
        return self.by_label_ns

    def charge_long(self, label: str | None, start_ns: int, end_ns: int) -> None:
        """Charge a run of *label* that lasted at least ``long_ns``."""
        ran = end_ns - start_ns
        # The hub's long runs are mostly its idle waits in epoll (off every run queue):
        # not worth a pread, and nobody sizes a pool by the hub's own time.
        if label == HUB_LABEL:
            self.by_label_ns[label] = self.by_label_ns.get(label, 0) + ran
            return
        if ran >= self.block_ns:  # held the hub, whatever kept it off the CPU meanwhile
            self.blocks[label] = self.blocks.get(label, 0) + 1
        if self.runqueue is not None:
            ran -= self.runqueue.wait_between(start_ns, end_ns)
        self.by_label_ns[label] = self.by_label_ns.get(label, 0) + max(ran, 0)

    def switch(self, now_ns: int, label: str | None) -> None:
        """From *now_ns* on, *label* runs (the tracer's fast path, as a method: for
        relabelling, which happens twice a request, not on every switch)."""
        since = self.since
        start: int = since[0]
        previous: str | None = since[1]
        if now_ns - start >= self.long_ns:
            self.charge_long(previous, start, now_ns)
        elif now_ns > start:
            self.by_label_ns[previous] = self.by_label_ns.get(previous, 0) + (now_ns - start)
        since[0] = now_ns
        since[1] = label

    def seconds(self) -> dict[str | None, float]:
        """Seconds per label so far (the run in progress not included)."""
        return {label: ns / 1e9 for label, ns in list(self.current().items())}
