"""What one outbound call's measurement accumulates, and the result it reports.

A :class:`CallState` hangs off the calling greenlet's tag (see ``labels``), so it is
greenlet-local without a ContextVar; the socket hooks and the switch tracer feed it, this
module only accumulates and classifies. Internal times are ``time.monotonic_ns()``; kernel
receive timestamps (CLOCK_REALTIME) are converted with an offset sampled when the call
begins.

Classification of the call's wall time, each nanosecond counted at most once:

- network: a socket wait before its data arrived (kernel receive timestamp), a connect
  wait before the handshake's ACK (``TCP_INFO``, 4 ms resolution), and the time from the
  request send until the reply arrived when the reply was already queued at the first read;
- scheduling delay: switched out although ready: reply bytes sat in the kernel, a
  ``sleep(0)`` / ``poll(0)`` yield (a client library's pre-send check of a pooled
  connection, for example), a timer that had expired, thread-pool work (DNS) that had
  finished;
- blocked: switched out for anything else (locks, queues, the thread pool still working);
- the rest is the greenlet running (``CallTiming.running_s``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple, Protocol, TypeVar

from tracing.timing.runnable import ready_after_ns


class CulpritLog(Protocol):
    """Names who ran during an interval (``switchlog.SwitchLog`` is one)."""

    def attribute(self, start_ns: int, end_ns: int, into: dict[str, int]) -> None: ...


class CpuWaitClock(Protocol):
    """Says how much of an interval the thread waited for a CPU
    (``runqueue.RunQueueClock`` is one)."""

    def wait_between(self, start_ns: int, end_ns: int, wait_at_end: int | None = None) -> int: ...


#: Delay pieces shorter than this (seconds) are counted but their culprits are not named:
#: walking the switch log costs per switch inside the piece (``pricingctl bench
#: timing-cost``, naming the culprits of a delay), and nobody needs the culprits of a
#: delay shorter than a millisecond.
CULPRIT_THRESHOLD_S: Final = 0.001
#: How many culprits a span names (the largest; the rest are in the metrics).
TOP_CULPRITS: Final = 5

NS_PER_S: Final = 1_000_000_000

# A realtime/monotonic offset sample whose bracketing reads are further apart than this
# was probably preempted (ns); normally they are a small fraction of it apart.
_MAX_OFFSET_GAP_NS: Final = 20_000

# Kinds of pieces remembered between a request send and the first read of its reply.
_NETWORK, _DELAY, _BLOCKED = 0, 1, 2

#: Number of measurements in progress in this process (one-element list, so hooks can
#: hold a reference). Zero lets every hook skip its greenlet lookup: ~0 cost when idle.
#: A measurement that is never finished keeps it above zero; that only costs speed.
measuring: list[int] = [0]

# Set by the instrumentor; a measurement begun while they are unset still measures what
# the hooks feed it, without culprits.
_switch_log: CulpritLog | None = None
_cpu_wait: CpuWaitClock | None = None
_culprit_threshold_ns: int = int(CULPRIT_THRESHOLD_S * NS_PER_S)


def configure(
    switch_log: CulpritLog | None,
    culprit_threshold_s: float,
    cpu_wait: CpuWaitClock | None = None,
) -> None:
    """Set the switch log used to name culprits, the clock that splits off the time the
    thread waited for a CPU, and the delay worth both (shorter pieces are counted, but
    neither attributed nor split: their CPU wait counts as 0)."""
    global _switch_log, _culprit_threshold_ns, _cpu_wait
    _switch_log = switch_log
    _cpu_wait = cpu_wait
    _culprit_threshold_ns = int(culprit_threshold_s * NS_PER_S)


def explain_delay(start_ns: int, end_ns: int, culprits_ns: dict[str, int]) -> int:
    """Name who ran during a delay ``[start_ns, end_ns)`` (into *culprits_ns*) and return
    how much of it the thread waited for a CPU (ns). Pieces below the threshold: 0."""
    if end_ns - start_ns < _culprit_threshold_ns:
        return 0
    log = _switch_log
    if log is not None:
        log.attribute(start_ns, end_ns, culprits_ns)
    clock = _cpu_wait
    return 0 if clock is None else clock.wait_between(start_ns, end_ns)


#: The culprits of a call none was named for (shared: read-only).
NO_CULPRITS: Final[Mapping[str, float]] = MappingProxyType({})


class CallTiming(NamedTuple):
    """Where the wall time of one outbound call went (seconds).

    A named tuple rather than a frozen dataclass: one is made for every call, and a
    frozen dataclass sets each field through ``object.__setattr__``, about three times
    slower to make (``timeit`` with keywords)."""

    duration_s: float
    network_s: float
    scheduling_delay_s: float
    blocked_s: float
    #: label -> seconds of scheduling delay during which that label's greenlets (or the
    #: hub) ran. Only delay pieces above the culprit threshold are attributed, so the
    #: values may sum to less than ``scheduling_delay_s``.
    culprits: Mapping[str, float] = NO_CULPRITS
    #: Socket waits measured (reads, writes, connects).
    socket_waits: int = 0
    #: Of ``scheduling_delay_s``, the time this process's thread was runnable but not
    #: on a CPU (run-queue wait); the rest, other greenlets or the hub ran.
    cpu_wait_s: float = 0.0
    #: When the measurement began and ended (``time.monotonic_ns()``).
    start_ns: int = 0
    end_ns: int = 0
    #: When the last reply bytes waited for reached this host's kernel (Unix ns, the
    #: kernel receive timestamp), if any was read.
    reply_arrived_unix_ns: int | None = None

    @property
    def running_s(self) -> float:
        """Time the calling greenlet itself ran (parsing, TLS, tracing overhead), or the
        OS had the whole process preempted while it ran."""
        rest = self.duration_s - self.network_s - self.scheduling_delay_s - self.blocked_s
        return max(rest, 0.0)

    def top_culprits(self, limit: int = TOP_CULPRITS) -> list[tuple[str, float]]:
        """Return the *limit* largest culprits, largest first (:func:`top_culprits`)."""
        return top_culprits(self.culprits, limit)


def top_culprits(
    culprits: Mapping[str, float], limit: int = TOP_CULPRITS
) -> list[tuple[str, float]]:
    """The *limit* culprits with the most seconds, largest first (the first seen, on a tie).

    The one definition: a call's culprits (``CallTiming.top_culprits``, on the client
    span), a request's inbound culprits (on the server span) and `pricingctl traces`'
    culprits of a group of spans (``tracing.readback.report``) all call this."""
    return sorted(culprits.items(), key=lambda item: item[1], reverse=True)[:limit]


_Call = TypeVar("_Call")


def critical_call(calls: Iterable[_Call], end: Callable[[_Call], float]) -> _Call | None:
    """The critical call of a request: of the upstream calls it made, the one that
    ended last (the first of those, on a tie). The handler could not answer before it,
    so its pre-send wait, network time, delay and wake are the request's critical path.

    The one definition: the pool's request timing (``server_timing``, which names it
    on the server span as ``gevent.critical.upstream``), `routes suggest`'s read-back
    (``tracing.readback.usage``) and the benchmark's (``bench.spans``) all call this, with the
    end each of them has (monotonic ns, a span's end)."""
    best: _Call | None = None
    best_end = 0.0
    for call in calls:
        call_end = end(call)
        if best is None or call_end > best_end:
            best, best_end = call, call_end
    return best


def realtime_offset_ns(
    monotonic_ns: Callable[[], int] = time.monotonic_ns,
    realtime_ns: Callable[[], int] = time.time_ns,
) -> tuple[int, int]:
    """Return (CLOCK_REALTIME - CLOCK_MONOTONIC, now) in ns.

    The offset converts kernel receive stamps; an error in it moves every arrival. A
    sample bracketed by two monotonic reads is off by at most half their gap, and the
    gap grows to milliseconds if the OS preempts us in between: keep the tightest of a
    few tries.
    """
    best_gap, best_offset, after = 1 << 62, 0, 0
    for _ in range(3):
        before = monotonic_ns()
        realtime = realtime_ns()
        after = monotonic_ns()
        if after - before < best_gap:
            best_gap, best_offset = after - before, realtime - (before + after) // 2
            if best_gap <= _MAX_OFFSET_GAP_NS:
                break
    return best_offset, after


class CallState:
    """Mutable accumulator of one measurement; fed by the hooks, owned by one greenlet."""

    __slots__ = (
        "awaiting_first_read",
        "blocked_ns",
        "cpu_wait_ns",
        "culprits_ns",
        "delay_ns",
        "depth",
        "in_socket_wait",
        "last_in_ns",
        "network_ns",
        "out_ns",
        "out_ready_ns",
        "out_since_send",
        "pending_done",
        "previous",
        "realtime_offset_ns",
        "reply_arrived_unix_ns",
        "reply_pending",
        "sent_ns",
        "since_send",
        "socket_waits",
        "start_ns",
    )

    def __init__(self, previous: CallState | None = None, offset_ns: int | None = None) -> None:
        self.previous = previous
        self.depth: int = 1 if previous is None else previous.depth + 1
        if offset_ns is None:
            self.realtime_offset_ns, self.start_ns = realtime_offset_ns()
        else:
            # The request's own sample (``RequestTotals.offset_ns``): the clocks do not
            # drift apart measurably within a request, and three clock reads are saved.
            self.realtime_offset_ns, self.start_ns = offset_ns, time.monotonic_ns()
        self.network_ns = 0
        self.delay_ns = 0
        self.blocked_ns = 0
        self.cpu_wait_ns = 0
        self.reply_arrived_unix_ns: int | None = None
        self.culprits_ns: dict[str, int] = {}
        self.socket_waits = 0
        # Set by the socket wait hook around a wait, so the tracer leaves that switch-out
        # to the hook (which knows when the data arrived).
        self.in_socket_wait = False
        # Time the tracer last switched this greenlet in: the exact end of a wait.
        self.last_in_ns = 0
        # A switch-out the tracer is classifying: when, and when the greenlet was ready.
        self.out_ns: int | None = None
        self.out_ready_ns: int | None = None
        # While the greenlet waits in ThreadPool.apply: [monotonic ns the work finished,
        # or 0], written by the worker thread (see tracing.timing.threadpool_hook).
        self.pending_done: list[int] | None = None
        # Request send bookkeeping, for replies already queued at the first read.
        self.sent_ns = 0
        # A request was sent and no read has seen its reply yet.
        self.reply_pending = False
        self.awaiting_first_read = False
        self.out_since_send = False
        self.since_send: list[tuple[int, int, int]] = []

    def monotonic_from_realtime_ns(self, realtime_ns: int) -> int:
        """Convert a CLOCK_REALTIME timestamp (kernel receive stamp) to monotonic ns."""
        return realtime_ns - self.realtime_offset_ns

    # -- accumulation -------------------------------------------------------------------

    def _piece(self, kind: int, start_ns: int, end_ns: int) -> None:
        if self.awaiting_first_read:
            self.since_send.append((kind, start_ns, end_ns))

    def add_network(self, start_ns: int, end_ns: int) -> None:
        if end_ns > start_ns:
            self.network_ns += end_ns - start_ns
            self._piece(_NETWORK, start_ns, end_ns)

    def add_blocked(self, start_ns: int, end_ns: int) -> None:
        if end_ns > start_ns:
            self.blocked_ns += end_ns - start_ns
            self._piece(_BLOCKED, start_ns, end_ns)

    def add_delay(self, start_ns: int, end_ns: int) -> None:
        delay = end_ns - start_ns
        if delay <= 0:
            return
        self.delay_ns += delay
        self._piece(_DELAY, start_ns, end_ns)
        if delay >= _culprit_threshold_ns:
            self.cpu_wait_ns += explain_delay(start_ns, end_ns, self.culprits_ns)

    def on_socket_wait(self, started_ns: int, resumed_ns: int, ready_ns: int | None) -> None:
        """One socket wait from *started_ns* to *resumed_ns*; the socket became ready
        (data arrived, handshake done) at *ready_ns*, if known."""
        self.socket_waits += 1
        if ready_ns is None or ready_ns >= resumed_ns:
            self.add_network(started_ns, resumed_ns)
        elif ready_ns <= started_ns:
            # Ready before the wait began (arrived between EAGAIN and the wait).
            self.add_delay(started_ns, resumed_ns)
        elif self.awaiting_first_read:
            self.add_network(started_ns, ready_ns)
            self.add_delay(ready_ns, resumed_ns)
        else:
            # The common case, inlined: it runs for every measured read wait.
            self.network_ns += ready_ns - started_ns
            delay = resumed_ns - ready_ns
            self.delay_ns += delay
            if delay >= _culprit_threshold_ns:
                self.cpu_wait_ns += explain_delay(ready_ns, resumed_ns, self.culprits_ns)

    def wait_start_ns(self, now_ns: int, is_read: bool) -> int:
        """Where a socket wait starting at *now_ns* begins counting.

        The first read wait after a send starts at the send when the greenlet ran without
        pause in between: the upstream was already working, whatever this greenlet did
        (or the OS preempting it) before it got to wait.
        """
        if is_read and self.reply_pending:
            self.reply_pending = False
            if not self.out_since_send and 0 < self.sent_ns <= now_ns:
                return self.sent_ns
        return now_ns

    def on_send(self, started_ns: int, now_ns: int) -> None:
        """A ``sendall`` that began at *started_ns* handed a request (or part of one) to
        the kernel. Without a wait inside it, the request left during the syscall: date
        the send at its start. After a wait, at its end (the waits are counted already)."""
        waited = self.last_in_ns > started_ns
        self.sent_ns = now_ns if waited else started_ns
        self.reply_pending = True
        self.awaiting_first_read = True
        self.out_since_send = False
        self.since_send.clear()

    def on_first_read(self, arrival_ns: int | None, now_ns: int) -> None:
        """First read after a send, which found the reply already queued (arrival known).

        From the send until the reply arrived everything counts as network (the upstream
        was working); pieces already classified inside that window are moved there, so
        nothing is counted twice. Culprits are left as they were.
        """
        pieces = self.since_send
        self.awaiting_first_read = False
        try:
            if arrival_ns is not None:
                self.reply_pending = False
            sent = self.sent_ns
            if arrival_ns is None or not sent <= arrival_ns <= now_ns:
                return  # nothing queued, or data from before the send (a TLS ticket)
            already_network = 0
            for kind, start, end in pieces:
                overlap = min(end, arrival_ns) - max(start, sent)
                if overlap <= 0:
                    continue
                if kind == _NETWORK:
                    already_network += overlap
                elif kind == _DELAY:
                    self.delay_ns -= overlap
                else:
                    self.blocked_ns -= overlap
            self.network_ns += (arrival_ns - sent) - already_network
        finally:
            pieces.clear()

    # -- fed by the switch tracer -------------------------------------------------------

    def on_switch_out(self, greenlet: Any, now_ns: int) -> None:
        """Switched out outside a socket wait (the tracer handles those itself)."""
        self.out_since_send = True
        self.out_ns = now_ns
        after = ready_after_ns(greenlet.gr_frame)
        self.out_ready_ns = None if after is None else now_ns + after

    def on_switch_in(self, now_ns: int) -> None:
        """Switched back in after :meth:`on_switch_out` (the tracer sets ``last_in_ns``)."""
        self.last_in_ns = now_ns
        out = self.out_ns
        if out is None:
            return
        self.out_ns = None
        ready = self.out_ready_ns
        if ready is None and self.pending_done is not None:
            done = self.pending_done[0]
            if 0 < done <= now_ns:
                ready = max(done, out)
        if ready is None or ready >= now_ns:
            self.add_blocked(out, now_ns)
        else:
            self.add_blocked(out, ready)
            self.add_delay(ready, now_ns)

    # -- results ------------------------------------------------------------------------

    def absorb(self, inner: CallState) -> None:
        """Add a finished nested measurement's numbers to this one."""
        self.network_ns += inner.network_ns
        self.delay_ns += inner.delay_ns
        self.blocked_ns += inner.blocked_ns
        self.cpu_wait_ns += inner.cpu_wait_ns
        self.socket_waits += inner.socket_waits
        if inner.reply_arrived_unix_ns is not None:
            self.reply_arrived_unix_ns = inner.reply_arrived_unix_ns
        for label, ns in inner.culprits_ns.items():
            self.culprits_ns[label] = self.culprits_ns.get(label, 0) + ns

    def to_timing(self, end_ns: int) -> CallTiming:
        # Runs for every call: no builtins called where a comparison does.
        culprits_ns = self.culprits_ns
        culprits = (
            MappingProxyType({label: ns / NS_PER_S for label, ns in culprits_ns.items()})
            if culprits_ns
            else NO_CULPRITS
        )
        network, delay, blocked = self.network_ns, self.delay_ns, self.blocked_ns
        delay = delay if delay > 0 else 0
        cpu_wait = self.cpu_wait_ns
        cpu_wait = 0 if cpu_wait < 0 else delay if cpu_wait > delay else cpu_wait
        return CallTiming(
            duration_s=(end_ns - self.start_ns) / NS_PER_S,
            network_s=(network if network > 0 else 0) / NS_PER_S,
            scheduling_delay_s=delay / NS_PER_S,
            blocked_s=(blocked if blocked > 0 else 0) / NS_PER_S,
            culprits=culprits,
            socket_waits=self.socket_waits,
            cpu_wait_s=cpu_wait / NS_PER_S,
            start_ns=self.start_ns,
            end_ns=end_ns,
            reply_arrived_unix_ns=self.reply_arrived_unix_ns,
        )
