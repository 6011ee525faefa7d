"""The compiled hot path (``_native``, built from ``csrc/`` at install) or the Python
reference: which one the timing core runs, decided once per process.

What runs on every greenlet switch and around every socket wait (the switch tracer, the
switch log, relabelling, a long run's CPU with its run-queue read, the ``_wait`` hook with
its receive-timestamp peek, the read hooks with a request's inbound stamp and the stamped
read that takes a reply's stamp itself), a call's
measurement begun and finished (``call_timing``), a request's (``server_timing``), the
histograms every request and call feeds (``histogram``), exists twice: the Python
modules are the reference, ``csrc/<module>.c`` follows each and is what runs when it was
built. (``tracing.client``'s observer has its own extension, ``tracing._client_native``,
which takes what it needs of this one through its C API capsule, ``csrc/capi.h``.)
``PRICING_TIMING_NATIVE=0`` forces the reference (tests run both and compare). Without a
compiler the install builds no extension and the reference runs; :func:`announce` says so
in one line when a worker instruments itself.

Cost, compiled against the reference (``pricingctl bench timing-cost``, CPU time): the
switch tracer adds 0.32 us to a greenlet switch (0.56 us), a measured send + read wait
4.1 us (6.0 us), naming the culprits of a delay ~3-4 us whatever its length
(``python -m bench.culprit_cost``; 8-11 us).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

from greenlet import getcurrent

from tracing.timing import call_state, kernel_rx, labels, request_state, runqueue

#: Set to 0 (or off/false/no) to run the Python reference even where the C path was built.
ENV: Final = "PRICING_TIMING_NATIVE"

module: Any = None
#: Why the Python reference runs (None: the compiled path does).
reason: str | None = None

try:
    from tracing.timing import _native  # type: ignore[attr-defined]
except ImportError as exc:  # not built: no compiler at install, or a source checkout
    reason = f"the compiled extension is not built ({exc})"
else:
    _native.configure(
        getcurrent=getcurrent,
        measuring=call_state.measuring,
        tag_of=labels.tag_of,
        tag_type=labels.GreenletTag,
        call_state=call_state,
        request_type=request_state.RequestState,
        max_waits=request_state.MAX_WAITS,
        runqueue_type=runqueue.RunQueueClock,
    )
    module = _native
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        reason = f"{ENV}={os.environ[ENV]}"


def active() -> Any:
    """The compiled module when it is in use, else None (the Python reference runs)."""
    return module if reason is None else None


def use(compiled: bool) -> None:
    """Switch between the compiled path and the reference for what is installed from now
    on (tests). Raises RuntimeError when the compiled path was not built."""
    global reason
    if compiled and module is None:
        raise RuntimeError(reason or "the compiled extension is not built")
    reason = None if compiled else "the Python reference was asked for"


def peek_arrival_ns(raw_sock: Any) -> int | None:
    """``kernel_rx.peek_arrival_ns``, compiled where the compiled path runs (one
    ``recvmsg`` without the Python socket method, its ancillary list and struct)."""
    if reason is None:
        return module.peek_arrival_ns(raw_sock)
    return kernel_rx.peek_arrival_ns(raw_sock)


def explain_delay(start_ns: int, end_ns: int, culprits_ns: dict[str, int]) -> int:
    """``call_state.explain_delay``, compiled where the compiled path runs (the switch log
    walked and the run-queue clock read without a Python call)."""
    if reason is None:
        return int(module.explain_delay(start_ns, end_ns, culprits_ns))
    return call_state.explain_delay(start_ns, end_ns, culprits_ns)


def bad_states() -> int:
    """Hook calls in the compiled path that met a state they could not handle, and were
    dropped (the reference logs those through ``hook_errors``)."""
    return 0 if module is None else int(module.bad_states())


def announce(logger: logging.Logger) -> None:
    """One line, at start, when the Python reference runs instead of the compiled path."""
    if reason is not None:
        logger.warning("timing core: the Python reference runs (%s); it costs more CPU", reason)
