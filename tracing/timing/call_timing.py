"""Measure one outbound call: how long it waited for the network, and how long the
calling greenlet was ready to run but waited for the hub.

Usage, inside the greenlet making the call::

    with measure_call() as measurement:
        response = client.get("/v1/quote")
    timing = measurement.timing  # CallTiming, available after the block

The measurement hangs off the calling greenlet's tag (see ``labels``), so a greenlet
spawned for fan-out starts with no measurement of its own; nested measurements add into
the outer one. What is counted as network, delay or blocked: ``call_state``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from greenlet import getcurrent

from tracing.timing import call_state, native
from tracing.timing.call_state import NS_PER_S, CallState, CallTiming
from tracing.timing.hook_errors import swallow
from tracing.timing.labels import GreenletTag, tag_of

#: Nested measurements deeper than this replace the innermost one instead of nesting: a
#: caller that begins calls and never finishes them must not grow a chain forever.
MAX_NESTING: Final = 8

# The public names of a measurement's result, importable from here.
__all__ = [
    "MAX_NESTING",
    "CallMeasurement",
    "CallTiming",
    "begin_call",
    "bound_calls",
    "finish_call",
    "measure_call",
]


class CallMeasurement:
    """Handle of one measurement begun by :func:`begin_call`."""

    __slots__ = ("_state", "_tag", "timing")

    def __init__(self, state: CallState, tag: GreenletTag | None) -> None:
        self._state = state
        self._tag = tag
        #: The result, set by :meth:`finish`.
        self.timing: CallTiming | None = None

    def finish(self) -> CallTiming:
        """End the measurement (idempotent) and return its timing. Never raises."""
        return finish_call(self)


def finish_call(measurement: CallMeasurement) -> CallTiming:
    """``measurement.finish()``: the reference, replaced by the compiled one (``native``)."""
    if measurement.timing is not None:
        return measurement.timing
    end = time.monotonic_ns()
    state = measurement._state
    try:
        tag = measurement._tag
        if tag is not None:
            if tag.call is state:
                tag.call = state.previous
                call_state.measuring[0] -= 1
                if state.previous is not None:
                    state.previous.absorb(state)
            else:
                # Finished out of order (an outer call before an inner one): unlink it
                # so that it does not come back to life when the inner one finishes.
                node = tag.call
                while node is not None and node.previous is not state:
                    node = node.previous
                if node is not None:
                    node.previous = state.previous
                    call_state.measuring[0] -= 1
        measurement.timing = state.to_timing(end)
    except Exception as exc:
        swallow("finish call measurement", exc)
        measurement.timing = CallTiming(
            duration_s=(end - state.start_ns) / NS_PER_S,
            network_s=0.0,
            scheduling_delay_s=0.0,
            blocked_s=0.0,
        )
    return measurement.timing


def begin_call(offset_ns: int | None = None) -> CallMeasurement:
    """Start measuring an outbound call made by the current greenlet. Never raises.

    Pair with :meth:`CallMeasurement.finish` in the same greenlet (``try/finally``), or
    use :func:`measure_call`. *offset_ns*: the realtime - monotonic offset already sampled
    for the request the call is part of (else one is sampled for the call).
    """
    try:
        tag = tag_of(getcurrent())
        previous = tag.call
        if previous is not None and previous.depth >= MAX_NESTING:
            previous = previous.previous  # drop the innermost: it was never finished
            call_state.measuring[0] -= 1
        state = CallState(previous, offset_ns)
        tag.call = state
        call_state.measuring[0] += 1
        return CallMeasurement(state, tag)
    except Exception as exc:
        swallow("begin call measurement", exc)
        return CallMeasurement(CallState(), None)


def bound_calls() -> tuple[
    Callable[[int | None], CallMeasurement], Callable[[CallMeasurement], CallTiming]
]:
    """``begin_call`` and ``finish_call`` of the path that runs now, for a caller that
    binds them once per process (``tracing.client``'s observer)."""
    return begin_call, finish_call


@contextmanager
def measure_call() -> Iterator[CallMeasurement]:
    """Measure the outbound call made inside the block; see the module docstring."""
    measurement = begin_call()
    try:
        yield measurement
    finally:
        measurement.finish()


def _compiled(extension: Any) -> dict[str, Any]:
    extension.configure_calls(
        CallMeasurement, CallState, CallTiming, call_state.NO_CULPRITS, MAX_NESTING
    )
    return {"begin_call": extension.begin_call, "finish_call": extension.finish_call}


native.accelerate(sys.modules[__name__], _compiled)
