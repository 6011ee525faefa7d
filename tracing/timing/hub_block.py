"""Hub-block detector: notice code that holds the hub without yielding, while it does.

Some code blocks the whole process and gevent cannot patch it: a C extension's blocking
call, an unpatched library, a greenlet computing for 300 ms. Every such block is counted
when it ends, by the switch tracer (``route_cpu.RouteCpu.blocks``: a greenlet's run that
lasted the threshold or more), with no thread watching. This module catches a block
while it lasts, for what only then can be seen: the hub thread's stack. A real OS thread
(taken with ``gevent.monkey.get_original``, so it runs even in a monkey-patched worker)
looks at the hub heartbeat (greenlet switches and loop-lag ticks). When it is stale for
longer than the threshold, the thread captures the hub thread's stack and the running
greenlet's label, and publishes a :class:`HubBlocked` event to the registered callbacks:
once when the block is seen (``ongoing=True``) and once when it ends, with its length.

The watcher looks once per ``watch_s`` while no block is open (``DEFAULT_WATCH_S``: once
a second), then every ``check_interval_s`` until the block ends. Each look is a wake-up of
the process, which costs CPU whatever it does, so a watcher looking ten times a second
cost an idle worker more than everything else tracing does to it (docs/traces.md,
"What tracing costs"). A block
that lasts ``watch_s`` past the threshold is always seen live; a shorter one with a
probability of about its length over ``watch_s``, and counted all the same.
``watch_s=None`` looks about once per threshold (every block seen live, for debugging).

A hub that is silent because it has nothing to do is not blocked: it sleeps in the loop's
``epoll_wait``. Where the kernel says where a thread sleeps (``/proc/self/task/<tid>/wchan``,
see :func:`parked_probe`), a silent hub found parked there counts as a heartbeat, so the
loop-lag gauge need not tick faster than the threshold to keep an idle hub from looking
blocked; without it, the gauge is the idle hub's heartbeat.

Callbacks run on the watcher thread: keep them short and thread-safe (logging, a metric).
Limits: a C call that holds the GIL also stops this thread, so such a block is only seen
once it is over (``ongoing=False``, no stack of the culprit); many short hogs that yield
in between never look like a block: the loop-lag gauge sees those.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tracing.timing.hook_errors import swallow
from tracing.timing.labels import UNKNOWN_LABEL

#: Default threshold: a hub silent for longer than this is blocked (seconds).
DEFAULT_THRESHOLD_S: Final = 0.1

#: Default seconds between two looks of the watcher while no block is open.
DEFAULT_WATCH_S: Final = 1.0

#: Frames of the hub thread's stack kept in an event.
STACK_LIMIT: Final = 30

#: Default seconds between two logged stacks of the same label: a CPU-heavy route in a
#: shared pool blocks the hub on every request, and one stack says it all.
DEFAULT_LOG_INTERVAL_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class HubBlocked:
    """The hub did not switch or tick for ``blocked_s`` seconds."""

    blocked_s: float
    #: True when published while the block was still going on (``blocked_s`` so far).
    ongoing: bool
    #: Label of the greenlet that was running when the block was detected.
    label: str
    #: Formatted frames of the hub thread when the block was detected, outermost first.
    stack: tuple[str, ...]
    pid: int


HubBlockedCallback = Callable[[HubBlocked], None]

#: Where the kernel says a thread parked in ``epoll_wait`` sleeps (``wchan``): the function
#: names differ between kernel versions (``do_epoll_wait``, ``ep_poll``).
_PARKED_MARKERS: Final = (b"epoll", b"ep_poll")


def parked_probe(native_tid: int) -> Callable[[], bool] | None:
    """A function that says whether thread *native_tid* of this process sleeps in
    ``epoll_wait`` now (the gevent loop waiting for I/O or a timer, with nothing to run),
    or None where the kernel does not say: no ``wchan``, or one that hides where threads
    sleep (it then reads ``0`` for every thread; checked on a thread that sleeps). One
    ``pread`` per call; safe from any thread."""
    if not _wchan_visible():
        return None
    try:
        fd = os.open(f"/proc/self/task/{native_tid}/wchan", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None

    def parked() -> bool:
        try:
            where = os.pread(fd, 64, 0)
        except OSError:
            return False
        return any(marker in where for marker in _PARKED_MARKERS)

    return parked


def _wchan_visible() -> bool:
    """True when ``wchan`` names where a sleeping thread of this process sleeps: a real
    OS thread is started, left waiting on a lock, and read."""
    from gevent.monkey import get_original

    allocate_lock, get_native_id, start_new_thread = get_original(
        "_thread", ["allocate_lock", "get_native_id", "start_new_thread"]
    )
    (sleep,) = get_original("time", ["sleep"])
    hold, started = allocate_lock(), allocate_lock()
    hold.acquire()
    started.acquire()
    tid: list[int] = []

    def wait() -> None:
        tid.append(get_native_id())
        started.release()
        hold.acquire()  # sleeps in the kernel (a futex) until released below

    start_new_thread(wait, ())
    try:
        started.acquire()
        for _ in range(50):  # until it sleeps: at most ~0.05 s
            try:
                with open(f"/proc/self/task/{tid[0]}/wchan", "rb") as file:
                    where = file.read(64).strip()
            except OSError:
                return False
            if where not in (b"", b"0"):
                return True
            sleep(0.001)
        return False
    finally:
        hold.release()


class HubBlockDetector:
    """Watches a heartbeat from a real OS thread; fork-safe (restart with ``start()``)."""

    def __init__(
        self,
        heartbeat_ns: Callable[[], int],
        running_label: Callable[[], str | None],
        *,
        threshold_s: float = DEFAULT_THRESHOLD_S,
        check_interval_s: float | None = None,
        watch_s: float | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        parked: Callable[[], bool] | None = None,
    ) -> None:
        if threshold_s <= 0:
            raise ValueError(f"hub block threshold_s must be positive, got {threshold_s}")
        if watch_s is not None and watch_s <= 0:
            raise ValueError(f"hub block watch_s must be positive, got {watch_s}")
        #: Seconds between two looks while no block is open (None: about one threshold).
        self.watch_s = watch_s
        self._heartbeat_ns = heartbeat_ns
        self._running_label = running_label
        self.threshold_s = threshold_s
        self._threshold_ns = int(threshold_s * 1_000_000_000)
        # While a block is open, checking 5x per threshold bounds the error of its reported
        # length to a fifth of it; while the hub beats, the watcher sleeps until the beat
        # could first be stale (``next_check_s``), about once per threshold.
        self.check_interval_s = threshold_s / 5 if check_interval_s is None else check_interval_s
        self._clock_ns = clock_ns
        #: Says whether the hub's thread sleeps in the loop's poll (None: unknown; then
        #: the heartbeat alone decides, and an idle hub needs the loop-lag ticks).
        self.parked = parked
        # When the hub was last seen parked: a heartbeat of its own.
        self._parked_ns = 0
        self._callbacks: list[HubBlockedCallback] = []
        # The open block: the last heartbeat before it, and what was captured.
        self._block_since_ns: int | None = None
        self._block_label = UNKNOWN_LABEL
        self._block_stack: tuple[str, ...] = ()
        self._hub_thread_ident: int | None = None
        # Which process runs the watcher, and which start() it belongs to: a thread whose
        # generation is stale (stopped, or restarted) exits at its next check.
        self._thread_pid: int | None = None
        self._generation = 0
        self._running = False

    # -- callbacks ----------------------------------------------------------------------

    def register(self, callback: HubBlockedCallback) -> None:
        if callback not in self._callbacks:
            self._callbacks.append(callback)

    def unregister(self, callback: HubBlockedCallback) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def _publish(self, event: HubBlocked) -> None:
        for callback in list(self._callbacks):
            try:
                callback(event)
            except Exception as exc:
                swallow("hub block callback", exc)

    # -- the check (pure: fake clock and heartbeat in tests) ----------------------------

    def check(self) -> HubBlocked | None:
        """Look at the heartbeat once; publish and return an event if there is one."""
        now = self._clock_ns()
        beat = max(self._heartbeat_ns(), self._parked_ns)
        since = self._block_since_ns
        event = None
        if since is None:
            if now - beat > self._threshold_ns:
                if self.parked is not None and self.parked():
                    self._parked_ns = now  # silent, but idle: nothing to run
                    return None
                self._block_since_ns = beat
                self._block_label = self._running_label() or UNKNOWN_LABEL
                self._block_stack = self._hub_stack()
                event = HubBlocked(
                    (now - beat) / 1e9, True, self._block_label, self._block_stack, os.getpid()
                )
        elif beat != since:
            # The hub is back. The newest beat is at most one check interval after the
            # block ended, so the duration is over-reported by at most that much.
            self._block_since_ns = None
            event = HubBlocked(
                (beat - since) / 1e9, False, self._block_label, self._block_stack, os.getpid()
            )
        if event is not None:
            self._publish(event)
        return event

    def next_check_s(self) -> float:
        """Seconds the watcher sleeps before its next check.

        While a block is open: one check interval, so its end (and length) is seen
        within that. Otherwise the hub can at the earliest look blocked one threshold
        after its newest beat; the check comes one interval past that, so a block is
        reported at most one interval late, as with a fixed period. A beating hub is
        thus looked at about once per threshold (10 wake-ups a second at 100 ms, not 50):
        each wake-up takes the GIL from the hub's thread. With ``watch_s``, never sooner
        than that while no block is open.
        """
        interval = self.check_interval_s
        if self._block_since_ns is not None:
            return interval
        if self.watch_s is not None:
            return self.watch_s
        beat = max(self._heartbeat_ns(), self._parked_ns)
        stale_in_ns = beat + self._threshold_ns - self._clock_ns()
        stale_in_ns = min(stale_in_ns, self._threshold_ns)  # a beat "from the future"
        return max(interval, stale_in_ns / 1e9 + interval)

    def _hub_stack(self) -> tuple[str, ...]:
        ident = self._hub_thread_ident
        frame = sys._current_frames().get(ident) if ident is not None else None
        if frame is None:
            return ()
        return tuple(traceback.format_stack(frame, limit=STACK_LIMIT))

    # -- the watcher thread -------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True when a watcher thread runs in this process."""
        return self._running and self._thread_pid == os.getpid()

    def start(self) -> None:
        """Start the watcher thread for this process (idempotent; call from the hub's
        thread). After a fork the thread is gone: calling ``start()`` again restarts it."""
        if self.running:
            return
        from gevent.monkey import get_original

        get_ident, start_new_thread = get_original("_thread", ["get_ident", "start_new_thread"])
        self._hub_thread_ident = get_ident()
        self._block_since_ns = None
        self._parked_ns = 0
        self._generation += 1
        self._thread_pid = os.getpid()
        self._running = True
        start_new_thread(self._run, (self._generation, self._thread_pid))

    def ensure_running(self) -> None:
        """Restart the watcher in a forked child whose parent had one running. Cheap
        enough for a periodic hub timer (one getpid)."""
        if self._running and self._thread_pid != os.getpid():
            self.start()

    def stop(self) -> None:
        """Ask the watcher thread to exit at its next check."""
        self._running = False
        self._generation += 1

    def _run(self, generation: int, pid: int) -> None:
        from gevent.monkey import get_original

        # The real sleep: under monkey patching time.sleep would try to use the hub.
        (sleep,) = get_original("time", ["sleep"])
        while self._generation == generation and os.getpid() == pid:
            try:
                pause = self.next_check_s()
            except Exception as exc:
                swallow("hub block check", exc)
                pause = self.check_interval_s
            sleep(pause)
            if self._generation != generation:
                break
            try:
                self.check()
            except Exception as exc:
                swallow("hub block check", exc)


class HubBlockLog:
    """A detector callback: logs the stack of an ongoing block, at most once per label per
    ``interval_s``, with the count of the blocks by that label that had ended by then.

    Runs on the detector's thread. *counts*: the finished blocks per label, which the
    switch tracer keeps (``route_cpu.RouteCpu.blocks``; read here, never written). Each
    block is published twice, when it is seen (with the hub's stack) and when it ends;
    only the first is logged.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        counts: Mapping[str | None, int] | None = None,
        interval_s: float = DEFAULT_LOG_INTERVAL_S,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self.interval_s = interval_s
        self._clock_s = clock_s
        self._last_logged_s: dict[str, float] = {}
        #: Finished blocks per label (None: unlabelled greenlets).
        self.counts: Mapping[str | None, int] = {} if counts is None else counts

    def __call__(self, event: HubBlocked) -> None:
        if not event.ongoing:
            return
        label = event.label or UNKNOWN_LABEL
        now = self._clock_s()
        if now - self._last_logged_s.get(label, -self.interval_s) < self.interval_s:
            return
        self._last_logged_s[label] = now
        self._logger.warning(
            "hub blocked for %.0f ms so far by %s (CPU work, or a C call gevent cannot patch; "
            "%d earlier blocks by this route; one stack per route per %.0f s):\n%s",
            event.blocked_s * 1000,
            label,
            self.counts.get(None if label == UNKNOWN_LABEL else label, 0),
            self.interval_s,
            "".join(event.stack),
        )
