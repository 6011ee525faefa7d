"""The greenlet switch tracer: feeds the switch log, the CPU time per label and the
measured greenlets.

Installed with ``greenlet.settrace`` (per OS thread: install it from the hub's thread), and
chained to whatever tracer was there before, e.g. gevent's monitor. It runs on every switch,
so it does the minimum: one clock read, one tag lookup per side, one deque append, one dict
update (``route_cpu``); more only for greenlets with an active call measurement.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import greenlet

from tracing.timing import labels, native
from tracing.timing.call_state import measuring
from tracing.timing.hook_errors import swallow
from tracing.timing.labels import TAG_ATTR, tag_of
from tracing.timing.route_cpu import RouteCpu
from tracing.timing.switchlog import SwitchLog

TraceFunction = Callable[[str, Any], Any]


class PeriodicSampler(Protocol):
    """Sampled from the tracer when due (``runqueue.RunQueueClock`` is one)."""

    due_ns: list[int]

    def sample(self, now_ns: int) -> int: ...


def _make_trace(
    log: SwitchLog,
    previous: TraceFunction | None,
    enabled: list[bool],
    sampler: PeriodicSampler | None = None,
    route_cpu: RouteCpu | None = None,
    clock: Callable[[], int] = time.monotonic_ns,
) -> Any:
    # Everything the hot path touches is bound to a local name here, once.
    append = log.append
    find = getattr
    attr = TAG_ATTR
    active = measuring
    sample = None if sampler is None else sampler.sample
    due = [1 << 62] if sampler is None else sampler.due_ns
    cpu = route_cpu if route_cpu is not None else RouteCpu()
    since = cpu.since
    by_label = cpu.by_label_ns
    charged = by_label.get
    long_ns = cpu.long_ns
    charge_long = cpu.charge_long

    def trace(event: str, args: Any) -> None:
        if (event == "switch" or event == "throw") and enabled[0]:
            try:
                origin, target = args
                now = clock()
                target_tag = find(target, attr, None)
                if target_tag is None:
                    target_tag = tag_of(target)
                label = target_tag.label
                append((now, label))
                ran = now - since[0]
                ran_label = since[1]
                if ran < long_ns:
                    by_label[ran_label] = charged(ran_label, 0) + ran
                else:
                    charge_long(ran_label, since[0], now)
                since[0] = now
                since[1] = label
                if now >= due[0]:
                    sample(now)  # type: ignore[misc]
                if active[0]:
                    origin_tag = find(origin, attr, None)
                    if origin_tag is not None:
                        call = origin_tag.call
                        if call is not None:
                            if call.in_socket_wait:  # the socket hook dates this one
                                call.out_since_send = True
                            else:
                                call.on_switch_out(origin, now)
                        request = origin_tag.request
                        if request is not None:
                            request.on_switch_out(now)
                    call = target_tag.call
                    if call is not None:
                        call.last_in_ns = now
                        if call.out_ns is not None:
                            call.on_switch_in(now)
                    request = target_tag.request
                    if request is not None:
                        request.on_switch_in(now)
            except Exception as exc:
                # An exception escaping a greenlet trace function fails the switch itself.
                swallow("greenlet switch tracer", exc)
        if previous is not None:
            previous(event, args)

    return trace


class SwitchTracer:
    """Install/uninstall the switch tracer on the current OS thread.

    The compiled tracer (``native``) when the compiled path runs and *log* is a compiled
    switch log (``switchlog.new_log``); this module's ``_make_trace`` otherwise. *clock*
    replaces ``time.monotonic_ns`` in the Python tracer (tests replay recorded sequences;
    the compiled one takes ``_native.set_clock``).
    """

    def __init__(self, log: Any, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.log = log
        self._clock = clock
        self._native: Any = None
        self._sampler: PeriodicSampler | None = None
        #: CPU time per label while installed (``route_cpu``).
        self.route_cpu: RouteCpu | None = None
        self._trace: TraceFunction | None = None
        self._previous: TraceFunction | None = None
        self._enabled = [False]

    @property
    def installed(self) -> bool:
        return self._trace is not None

    def install(
        self, sampler: PeriodicSampler | None = None, route_cpu: RouteCpu | None = None
    ) -> None:
        """Install on the current thread, chaining to the previous tracer (idempotent).
        *route_cpu* is fed with every run's time (a fresh one when omitted)."""
        if self._trace is not None:
            return
        self.route_cpu = route_cpu if route_cpu is not None else RouteCpu()
        # Checked on every switch with one compare; sampled only when due (the run-queue
        # clock: at most one pread per interval).
        self._sampler = sampler
        self._previous = greenlet.gettrace()
        # A fresh flag per install: a disabled tracer left in someone's chain stays off.
        self._enabled = [True]
        compiled_tracer = compiled_tracer_for(self.log)
        if compiled_tracer is not None:
            self._native = compiled_tracer(
                self.log,
                self._previous,
                self.route_cpu,
                sampler,
                # RouteCpu's own charge_long is done in C (a subclass's is called).
                hub_label=labels.HUB_LABEL if type(self.route_cpu) is RouteCpu else None,
            )
            self._trace = self._native
            # It keeps the route CPU in its own state: read it through RouteCpu.current.
            self.route_cpu.pull = self._native.pull_route_cpu
        else:
            self._native = None
            self._trace = _make_trace(
                self.log, self._previous, self._enabled, self._sampler, self.route_cpu, self._clock
            )
        greenlet.settrace(self._trace)
        labels.current_label_listener = (
            self._on_relabel if self._native is None else self._native.relabel
        )

    def _on_relabel(self, label: str | None) -> None:
        # The reference of the compiled tracer's ``relabel``.
        if self._enabled[0]:
            now = self._clock()
            self.log.append((now, label))
            if self.route_cpu is not None:
                self.route_cpu.switch(now, label)

    def uninstall(self) -> bool:
        """Restore the previous tracer. Returns False when another tracer was installed
        on top of ours: ours then stays in the chain, disabled, forwarding only."""
        if self._trace is None:
            return True
        self._enabled[0] = False
        if self._native is not None:
            self._native.enabled = False
            if self.route_cpu is not None and self.route_cpu.pull == self._native.pull_route_cpu:
                self._native.pull_route_cpu()
                self.route_cpu.pull = None
        listener = labels.current_label_listener
        if listener == self._on_relabel or (
            self._native is not None and listener == self._native.relabel
        ):
            labels.current_label_listener = None
        restored = greenlet.gettrace() is self._trace
        if restored:
            greenlet.settrace(self._previous)
        self._trace = None
        self._previous = None
        return restored


def compiled_tracer_for(log: Any) -> Any:
    """The compiled tracer's class where the compiled path runs and *log* is a compiled
    switch log (the only kind it writes into); None: the reference tracer runs."""
    return None


def _compiled(extension: Any) -> dict[str, Any]:
    def tracer_for(log: Any) -> Any:
        return extension.Tracer if isinstance(log, extension.SwitchLog) else None

    return {"compiled_tracer_for": tracer_for}


native.accelerate(sys.modules[__name__], _compiled)
