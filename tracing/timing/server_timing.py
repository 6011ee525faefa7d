"""The server side of a request: how long it waited before its handler ran (inbound
delay), and where the handler's own time went.

Inbound delay runs from the moment the request's first bytes reached this host's kernel
(a receive timestamp, as for replies: accepted sockets inherit ``SO_TIMESTAMPNS`` from
their listener) until its handler started. It is the starvation the product exposes, on
the inbound side: the bytes sat in the socket while the hub ran other greenlets, or while
the process waited for a CPU.

How it is fed, by any gevent server:

- :func:`enable_on_listener` on the listening socket, before connections arrive;
- :func:`watch_connection` in the greenlet that serves a connection (gunicorn: its
  ``handle``); the socket hooks then stamp the first read of each request on it;
- :func:`begin_request` when the handler starts and :meth:`RequestMeasurement.finish`
  when it ends; the latter re-arms the stamp for the next request on the connection.

While a request is measured, the switch tracer splits the handler greenlet's time into
running (switched in) and waiting (switched out); the critical upstream call, the one
whose end the handler waited for last, explains the wait: the time before that call
began (``presend``), the call itself, and the time from its end until the handler ran
again (``wake``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from greenlet import getcurrent

from tracing.timing import call_state, kernel_rx, native
from tracing.timing.call_state import (
    NO_CULPRITS,
    NS_PER_S,
    CallTiming,
    critical_call,
    realtime_offset_ns,
)
from tracing.timing.hook_errors import swallow
from tracing.timing.labels import tag_of
from tracing.timing.request_state import InboundWatch, RequestState

#: Connections watched in this process (one-element list, read by the socket hooks).
watching: list[int] = [0]


def enable_on_listener(raw_sock: Any) -> None:
    """Stamp the bytes of every connection this listening socket will accept."""
    kernel_rx.hold_timestamping()
    kernel_rx.enable_rx_timestamps(raw_sock)


def watch_connection(sock: Any) -> InboundWatch | None:
    """The current greenlet serves requests read from *sock* (a gevent socket). Never raises."""
    try:
        watch = InboundWatch(sock)
        tag_of(getcurrent()).inbound = watch
        watching[0] += 1
        return watch
    except Exception as exc:
        swallow("watch connection", exc)
        return None


def unwatch_connection() -> None:
    """The current greenlet is done with its connection. Never raises."""
    try:
        tag = tag_of(getcurrent())
        if tag.inbound is not None:
            tag.inbound = None
            watching[0] -= 1
    except Exception as exc:
        swallow("unwatch connection", exc)


def stamp_arrival(watch: InboundWatch, sock: Any) -> None:
    """Called by the read hook before the first read of a request on a watched socket:
    note when the request's first bytes reached the kernel, waiting for them if none
    are queued yet (exactly as the read itself would)."""
    arrival = native.peek_arrival_ns(sock._sock)
    if arrival is None and sock.timeout != 0.0:
        sock._wait(sock._read_event)  # raises the socket's timeout as the read would
        arrival = native.peek_arrival_ns(sock._sock)
    watch.armed = False
    watch.arrival_unix_ns = arrival


class RequestTiming(NamedTuple):
    """Where one request's time went (seconds unless named ``_ns``). A named tuple, as
    ``CallTiming``: one is made for every request."""

    #: When its first bytes reached the kernel (Unix ns), if stamped.
    arrival_unix_ns: int | None
    #: When the handler started and ended (Unix ns, converted from the monotonic clock).
    start_unix_ns: int
    end_unix_ns: int
    #: First bytes in the kernel -> handler started.
    inbound_delay_s: float | None
    #: Of the inbound delay, the time the process waited for a CPU.
    inbound_cpu_wait_s: float
    inbound_culprits: Mapping[str, float]
    #: Handler started -> ended.
    duration_s: float
    #: The handler greenlet switched in (its own CPU, and the OS preempting it).
    running_s: float
    #: The handler greenlet switched out: waiting for its upstream calls.
    waiting_s: float
    #: The upstream call whose end the handler waited for last, if any.
    critical: CallTiming | None = None
    critical_upstream: str | None = None
    #: Handler switched out -> the critical call began (its greenlet waited for its turn).
    presend_delay_s: float = 0.0
    #: Critical call ended -> the handler ran again.
    wake_delay_s: float = 0.0
    #: Handler running while the critical call was in flight (it woke as other calls
    #: finished): part of ``running_s``, concurrent with the critical call.
    overlap_s: float = 0.0
    calls: int = 0

    @property
    def explained_wait_s(self) -> float:
        """The part of ``waiting_s`` the critical call explains."""
        if self.critical is None:
            return 0.0
        return self.presend_delay_s + self.critical.duration_s + self.wake_delay_s - self.overlap_s

    @property
    def hub_wait_s(self) -> float:
        """Time the request was ready but waited for the hub, along its critical path:
        inbound delay, then (if it made calls) the critical call's pre-send wait, its
        scheduling delay and the wake after it. Parallel calls are not added up, so
        this never exceeds the request's time in the pool."""
        wait = self.inbound_delay_s or 0.0
        if self.critical is not None:
            wait += self.presend_delay_s + self.critical.scheduling_delay_s + self.wake_delay_s
        return wait


#: A request is *delayed* when it waited at least this long for the hub along its
#: critical path (:attr:`RequestTiming.hub_wait_s`), in seconds.
DELAYED_THRESHOLD_S: Final = 0.05


def is_delayed(timing: RequestTiming) -> bool:
    """Whether the loop held the request up: its hub wait (inbound delay, then the critical
    call's pre-send wait, scheduling delay and wake) reached :data:`DELAYED_THRESHOLD_S`.

    The one definition: the server span's ``pricing.delayed`` calls it, and it reads the
    same hub wait as the route's ``pricing_route_hub_wait_seconds`` that `routes suggest`
    places routes by (parallel calls' delays are not added up)."""
    return timing.hub_wait_s >= DELAYED_THRESHOLD_S


class RequestMeasurement:
    """Handle of one request begun by :func:`begin_request`."""

    __slots__ = (
        "_inbound",
        "_offset_ns",
        "_state",
        "_tag",
        "arrival_unix_ns",
        "inbound_cpu_wait_ns",
        "inbound_culprits_ns",
        "start_ns",
        "timing",
    )

    def __init__(self, tag: Any, start_ns: int, offset_ns: int) -> None:
        self._tag = tag
        self._offset_ns = offset_ns
        self.start_ns = start_ns
        self._state = RequestState(start_ns)
        self._inbound: InboundWatch | None = None if tag is None else tag.inbound
        self.arrival_unix_ns: int | None = None
        self.inbound_culprits_ns: dict[str, int] = {}
        self.inbound_cpu_wait_ns = 0
        self.timing: RequestTiming | None = None

    @property
    def start_unix_ns(self) -> int:
        return self.start_ns + self._offset_ns

    @property
    def offset_ns(self) -> int:
        """CLOCK_REALTIME - CLOCK_MONOTONIC, sampled when the request began (ns)."""
        return self._offset_ns

    def finish(
        self, calls: Sequence[tuple[str, CallTiming]] = (), end_ns: int | None = None
    ) -> RequestTiming:
        """End the measurement (idempotent) and explain the handler's wait with the
        critical one of *calls* (``(upstream, timing)`` pairs). Never raises."""
        return finish_request(self, calls, end_ns)

    def _timing(
        self,
        end: int,
        running_ns: int,
        waits: Sequence[tuple[int, int]],
        calls: Sequence[tuple[str, CallTiming]],
    ) -> RequestTiming:
        duration = end - self.start_ns
        arrival = self.arrival_unix_ns
        inbound = None if arrival is None else (self.start_unix_ns - arrival) / NS_PER_S
        critical_name, critical = None, None
        presend = wake = overlap = 0
        last = critical_call(calls, lambda item: item[1].end_ns)
        if last is not None:
            critical_name, critical = last
            presend, wake, overlap = _explain_wait(waits, critical.start_ns, critical.end_ns)
        return RequestTiming(
            arrival_unix_ns=arrival,
            start_unix_ns=self.start_unix_ns,
            end_unix_ns=end + self._offset_ns,
            inbound_delay_s=inbound,
            inbound_cpu_wait_s=self.inbound_cpu_wait_ns / NS_PER_S,
            inbound_culprits=MappingProxyType(
                {k: v / NS_PER_S for k, v in self.inbound_culprits_ns.items()}
            )
            if self.inbound_culprits_ns
            else NO_CULPRITS,
            duration_s=duration / NS_PER_S,
            running_s=min(running_ns, duration) / NS_PER_S,
            waiting_s=max(duration - running_ns, 0) / NS_PER_S,
            critical=critical,
            critical_upstream=critical_name,
            presend_delay_s=presend / NS_PER_S,
            wake_delay_s=wake / NS_PER_S,
            overlap_s=overlap / NS_PER_S,
            calls=len(calls),
        )


def finish_request(
    measurement: RequestMeasurement,
    calls: Sequence[tuple[str, CallTiming]] = (),
    end_ns: int | None = None,
) -> RequestTiming:
    """``measurement.finish(calls, end_ns)``: the reference, replaced by the compiled one
    (``native``)."""
    if measurement.timing is not None:
        return measurement.timing
    end = time.monotonic_ns() if end_ns is None else end_ns
    state = measurement._state
    try:
        tag = measurement._tag
        if tag is not None and tag.request is state:
            tag.request = None
            call_state.measuring[0] -= 1
        if measurement._inbound is not None:
            measurement._inbound.armed = True
        running = state.running_ns + max(end - state.in_ns, 0)
        measurement.timing = measurement._timing(end, running, state.waits, calls)
    except Exception as exc:
        swallow("finish request measurement", exc)
        measurement.timing = measurement._timing(end, end - measurement.start_ns, [], ())
    return measurement.timing


def _explain_wait(
    waits: Sequence[tuple[int, int]], call_start_ns: int, call_end_ns: int
) -> tuple[int, int, int]:
    """(presend, wake, overlap) ns of a critical call from the handler's waits.

    The handler may wake several times while its calls are in flight (``joinall`` hands
    it each call that finishes): the window runs from the switch-out before the call
    began to the switch-in after it ended; the handler's runs inside it overlap the call.
    """
    first = last = None
    for index, (out, back) in enumerate(waits):
        if out <= call_start_ns:
            first = index
        if back >= call_end_ns:
            last = index
            break
    if first is None or last is None or first > last:
        return 0, 0, 0
    presend = max(call_start_ns - waits[first][0], 0)
    wake = waits[last][1] - call_end_ns
    overlap = sum(waits[i + 1][0] - waits[i][1] for i in range(first, last))
    return presend, wake, overlap


def begin_request() -> RequestMeasurement:
    """The current greenlet starts handling a request. Never raises.

    Takes the arrival stamped on its connection (if watched) and explains the inbound
    delay at once, while the switch log still covers it.
    """
    offset, now = realtime_offset_ns()
    try:
        tag = tag_of(getcurrent())
        measurement = RequestMeasurement(tag, now, offset)
        watch = tag.inbound
        if watch is not None and watch.arrival_unix_ns is not None:
            arrival = watch.arrival_unix_ns
            watch.arrival_unix_ns = None
            if arrival <= measurement.start_unix_ns:
                measurement.arrival_unix_ns = arrival
                measurement.inbound_cpu_wait_ns = native.explain_delay(
                    arrival - offset, now, measurement.inbound_culprits_ns
                )
        if tag.request is None:
            call_state.measuring[0] += 1
        tag.request = measurement._state
        return measurement
    except Exception as exc:
        swallow("begin request measurement", exc)
        return RequestMeasurement(None, now, offset)


def bound_requests() -> tuple[
    Callable[[], RequestMeasurement],
    Callable[[RequestMeasurement, Sequence[tuple[str, CallTiming]]], RequestTiming],
]:
    """``begin_request`` and ``finish_request`` of the path that runs now, for a caller
    that binds them once per process (``tracing.server``'s hooks)."""
    return begin_request, finish_request


def _compiled(extension: Any) -> dict[str, Any]:
    extension.configure_requests(RequestMeasurement, RequestState, RequestTiming, NO_CULPRITS)
    return {"begin_request": extension.begin_request, "finish_request": extension.finish_request}


native.accelerate(sys.modules[__name__], _compiled)
