"""``GeventTimingInstrumentor``: installs and removes everything the measurement needs.

Like an OpenTelemetry contrib instrumentor: ``instrument()`` twice is harmless, and
``uninstrument()`` puts back exactly what it replaced (gevent's socket methods, the greenlet
trace function it chained to). Create and call it in each worker process, after the fork
(gunicorn ``post_fork``), from the thread that runs the hub.

What it installs:

- socket hooks (``socket_hooks``): per-wait network/delay split;
- the thread-pool hook (``threadpool_hook``): when DNS work finished;
- the switch tracer and its log (``switch_tracer``, ``switchlog``): delay
  of non-socket yields and the culprits' labels; CPU time per label (``route_cpu``);
- optionally the loop-lag gauge (``loop_lag``) and the hub-block detector
  (``hub_block``), whose heartbeat is the newer of the last switch and the last tick.
"""

from __future__ import annotations

import logging

import gevent
from gevent.monkey import get_original

from tracing.timing import (
    call_state,
    hub_block,
    kernel_rx,
    loop_lag,
    native,
    route_cpu,
    socket_hooks,
    switchlog,
    threadpool_hook,
)
from tracing.timing.hub_block import HubBlockDetector
from tracing.timing.labels import tag_of
from tracing.timing.loop_lag import LoopLagGauge
from tracing.timing.route_cpu import RouteCpu
from tracing.timing.runqueue import SCHEDSTAT_PATH, RunQueueClock
from tracing.timing.switch_tracer import SwitchTracer

logger = logging.getLogger("tracing")

# The OS thread's id even under monkey patching (patched, it is the greenlet's id).
(_os_thread_ident, _os_native_id) = get_original("_thread", ["get_ident", "get_native_id"])

# One instrumentor at a time per process: two would chain their patches.
_active: GeventTimingInstrumentor | None = None


class GeventTimingInstrumentor:
    """Instrument gevent sockets and greenlet switches for per-call timing.

    Tunables (seconds): ``culprit_threshold_s`` is the smallest delay piece whose culprits
    are named; ``loop_lag_interval_s`` the gauge's period (None: no gauge);
    ``hub_block_threshold_s`` the silence that counts as a blocked hub (None: no detector,
    and no blocks counted); ``hub_block_watch_s`` how often the detector's thread looks
    for one while none is open (None: about once per threshold; see ``hub_block``).
    The detector needs to tell an idle hub from a blocked one: where the kernel says the
    hub's thread sleeps in the loop's poll (``hub_block.parked_probe``) that is enough;
    elsewhere the gauge is the idle hub's heartbeat, and ticks at least every
    ``loop_lag.HEARTBEAT_INTERVAL_S`` (shorter than the threshold) whatever was asked.
    """

    def __init__(
        self,
        *,
        culprit_threshold_s: float = call_state.CULPRIT_THRESHOLD_S,
        switch_log_size: int = switchlog.DEFAULT_SIZE,
        loop_lag_interval_s: float | None = loop_lag.DEFAULT_INTERVAL_S,
        hub_block_threshold_s: float | None = hub_block.DEFAULT_THRESHOLD_S,
        hub_block_watch_s: float | None = hub_block.DEFAULT_WATCH_S,
    ) -> None:
        if culprit_threshold_s < 0:
            raise ValueError(f"culprit_threshold_s must be >= 0, got {culprit_threshold_s}")
        if hub_block_threshold_s is not None and loop_lag_interval_s is None:
            raise ValueError("hub_block_threshold_s needs loop_lag_interval_s (its heartbeat)")
        self.culprit_threshold_s = culprit_threshold_s
        self._switch_log_size = switch_log_size
        self.switch_log = switchlog.new_log(switch_log_size)
        self._tracer = SwitchTracer(self.switch_log)
        self._loop_lag_interval_s = loop_lag_interval_s
        self._hub_block_threshold_s = hub_block_threshold_s
        self._hub_block_watch_s = hub_block_watch_s
        #: The loop-lag gauge while instrumented (if enabled).
        self.loop_lag: LoopLagGauge | None = None
        #: The hub-block detector while instrumented (if enabled): ``register()`` on it.
        self.hub_block: HubBlockDetector | None = None
        #: The hub thread's run-queue clock while instrumented (None where the kernel
        #: does not count run-queue wait).
        self.cpu_wait: RunQueueClock | None = None
        #: CPU time per greenlet label (route) while instrumented.
        self.route_cpu: RouteCpu | None = None
        self._thread_ident: int | None = None

    @property
    def is_instrumented(self) -> bool:
        return _active is self

    def instrument(self) -> None:
        """Install the hooks (idempotent). Call from the hub's thread, after the fork."""
        global _active
        if _active is self:
            return
        if _active is not None:
            logger.warning("another GeventTimingInstrumentor is active; not instrumenting")
            return
        self._thread_ident = _os_thread_ident()
        native.announce(logger)
        if type(self.switch_log) is switchlog.SwitchLog and not switchlog.is_current(
            self.switch_log
        ):
            # Created while the reference was asked for; the compiled tracer needs its log.
            self.switch_log = switchlog.new_log(self._switch_log_size)
            self._tracer = SwitchTracer(self.switch_log)
        socket_hooks.install()
        problems = socket_hooks.verify()
        if problems:
            socket_hooks.uninstall()
            raise RuntimeError(
                "gevent socket hooks did not take (gevent changed?): " + "; ".join(problems)
            )
        threadpool_hook.install()
        kernel_rx.hold_timestamping()
        hub = gevent.get_hub()
        tag_of(hub)  # labelled "<hub>" before the first switch is logged
        # Opened here, on the hub's thread: the descriptor names the thread that opens it.
        self.cpu_wait = RunQueueClock.open()
        if self.cpu_wait is None:
            logger.info("no %s: scheduling delay is not split by CPU wait", SCHEDSTAT_PATH)
        # Hub blocks are counted by the tracer as they end (route_cpu.blocks).
        block_ns = (
            route_cpu.NO_BLOCKS_NS
            if self._hub_block_threshold_s is None
            else max(int(self._hub_block_threshold_s * 1e9), route_cpu.LONG_RUN_NS)
        )
        self.route_cpu = RouteCpu(self.cpu_wait, block_ns=block_ns)
        self._tracer.install(self.cpu_wait, self.route_cpu)
        call_state.configure(self.switch_log, self.culprit_threshold_s, self.cpu_wait)
        if self._loop_lag_interval_s is not None:
            detector = None
            if self._hub_block_threshold_s is not None:
                detector = HubBlockDetector(
                    self._heartbeat_ns,
                    self._running_label,
                    threshold_s=self._hub_block_threshold_s,
                    watch_s=self._hub_block_watch_s,
                )
            interval = self._loop_lag_interval_s
            if detector is not None:
                detector.parked = hub_block.parked_probe(_os_native_id())
                if detector.parked is None and interval >= detector.threshold_s:
                    interval = min(loop_lag.HEARTBEAT_INTERVAL_S, detector.threshold_s / 2)
                    logger.info(
                        "the kernel does not say where threads sleep (wchan): the loop-lag "
                        "gauge ticks every %.0f ms to be the idle hub's heartbeat",
                        interval * 1000,
                    )
            self.loop_lag = LoopLagGauge(
                interval,
                loop=hub.loop,
                on_tick=None if detector is None else detector.ensure_running,
            )
            self.loop_lag.start()
            if detector is not None:
                detector.start()
                self.hub_block = detector
        _active = self

    def uninstrument(self) -> None:
        """Restore everything :meth:`instrument` replaced (idempotent)."""
        global _active
        if _active is not self:
            return
        if _os_thread_ident() != self._thread_ident:
            raise RuntimeError("uninstrument() must run on the thread that called instrument()")
        if self.hub_block is not None:
            self.hub_block.stop()
            self.hub_block = None
        if self.loop_lag is not None:
            self.loop_lag.stop()
            self.loop_lag = None
        call_state.configure(None, self.culprit_threshold_s)
        if self.cpu_wait is not None:
            self.cpu_wait.close()
            self.cpu_wait = None
        if not self._tracer.uninstall():
            logger.warning(
                "another greenlet tracer was installed after ours; ours stays in its chain, "
                "disabled"
            )
        threadpool_hook.uninstall()
        socket_hooks.uninstall()
        kernel_rx.release_timestamping()
        _active = None

    # -- heartbeat for the hub-block detector (called on the watcher thread) -------------

    def _heartbeat_ns(self) -> int:
        last = self.switch_log.last()
        tick = self.loop_lag.last_tick_ns if self.loop_lag is not None else 0
        return max(tick, last[0] if last is not None else 0)

    def _running_label(self) -> str | None:
        last = self.switch_log.last()
        return None if last is None else last[1]
