"""The one switch between the compiled hot path (``_native``, built from ``csrc/`` at
install) and the Python reference, decided once per process.

What runs on every greenlet switch and around every socket wait (the switch tracer, the
switch log, relabelling, a long run's CPU with its run-queue read, the ``_wait`` hook with
its receive-timestamp peek, the read hooks with a request's inbound stamp and the stamped
read that takes a reply's stamp itself), a call's measurement begun and finished
(``call_timing``), a request's (``server_timing``), the histograms every request and call
feeds (``histogram``), and the observer around an unsampled request's upstream call
(``tracing.client``), exists twice: the Python modules are the reference,
``csrc/<module>.c`` follows each and is what runs when it was built. The observer
belongs to the layer above this core and has its own extension
(``tracing._client_native``), built on this one's C API capsule (``csrc/capi.h``); this
module only swaps its names in, as it swaps the core's.

As gevent's ``import_c_accel``: each of those modules is written as the reference, and
its last lines hand :func:`accelerate` the names the compiled module replaces. This
module swaps them in (or back, :func:`use`); a caller calls the module's name and never
asks which path runs. ``PRICING_TIMING_NATIVE=0`` (as gevent's ``PURE_PYTHON=1``) forces
the reference; without a compiler the install builds no extension and the reference
runs, and :func:`announce` says so in one line when a worker instruments itself.

Cost of each path: ``pricingctl bench timing-cost`` (the switch tracer, a measured send
and read wait) and its culprits figure (naming the culprits of a delay).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from greenlet import getcurrent

from tracing.timing import call_state, kernel_rx, labels, request_state, runqueue
from tracing.timing.hook_errors import swallow

#: Set to 0 (or off/false/no) to run the Python reference even where the C path was built.
ENV: Final = "PRICING_TIMING_NATIVE"

module: Any = None
#: Why the Python reference runs (None: the compiled path does). For messages; callers
#: never test it.
reason: str | None = None


def configure_core(extension: Any) -> None:
    """Hand the compiled core the reference's classes and functions it works with (it
    reads each class's slots against its own tables, and refuses one that disagrees)."""
    extension.configure(
        getcurrent=getcurrent,
        measuring=call_state.measuring,
        tag_of=labels.tag_of,
        tag_type=labels.GreenletTag,
        call_state=call_state,
        request_type=request_state.RequestState,
        max_waits=request_state.MAX_WAITS,
        runqueue_type=runqueue.RunQueueClock,
    )


try:
    from tracing.timing import _native  # type: ignore[attr-defined]
except ImportError as exc:  # not built: no compiler at install, or a source checkout
    reason = f"the compiled extension is not built ({exc})"
else:
    configure_core(_native)
    module = _native
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        reason = f"{ENV}={os.environ[ENV]}"


class _Swap:
    """The names of one owner (a module or a class) the compiled path replaces."""

    __slots__ = ("compiled", "owner", "reference")

    def __init__(self, owner: Any, compiled: Mapping[str, Any]) -> None:
        self.owner = owner
        self.compiled = dict(compiled)
        self.reference = {name: getattr(owner, name) for name in compiled}

    def apply(self, use_compiled: bool) -> None:
        for name, value in (self.compiled if use_compiled else self.reference).items():
            setattr(self.owner, name, value)


_swaps: list[_Swap] = []


def accelerate(
    owner: Any, compiled: Callable[[Any], Mapping[str, Any]], extension: str | None = None
) -> None:
    """Register the names of *owner* (a module or a class, as written: the reference)
    that ``compiled(extension)`` replaces, and put in the path this process runs.

    *compiled* is called once, with the compiled module: ``_native``, or the module
    named *extension* (a layer above this core with a compiled part of its own, built on
    ``_native``'s C API). It configures that module with the owner's types and returns
    the replacements by name. Where the module was not built, or refuses the types (a
    stale build), the owner keeps its reference."""
    if module is None:
        return
    compiled_module = module
    if extension is not None:
        try:
            compiled_module = importlib.import_module(extension)
        except ImportError as exc:
            swallow(f"compiled {getattr(owner, '__name__', owner)}", exc)
            return
    try:
        swap = _Swap(owner, compiled(compiled_module))
    except (TypeError, ValueError, AttributeError, RuntimeError) as exc:
        swallow(f"compiled {getattr(owner, '__name__', owner)}", exc)
        return
    _swaps.append(swap)
    swap.apply(reason is None)


def use(compiled: bool) -> bool:
    """Switch every registered name to the compiled path or the reference (tests);
    returns whether the compiled path ran before. Raises RuntimeError when the compiled
    path was not built."""
    global reason
    if compiled and module is None:
        raise RuntimeError(reason or "the compiled extension is not built")
    before = reason is None
    reason = None if compiled else "the Python reference was asked for"
    for swap in _swaps:
        swap.apply(compiled)
    return before


def compiled_runs() -> bool:
    """Whether this process runs the compiled path (for reports and tests)."""
    return reason is None


def bad_states() -> int:
    """Hook calls in the compiled path that met a state they could not handle, and were
    dropped (the reference logs those through ``hook_errors``)."""
    return 0 if module is None else int(module.bad_states())


def announce(logger: logging.Logger) -> None:
    """One line, at start, when the Python reference runs instead of the compiled path."""
    if reason is not None:
        logger.warning("timing core: the Python reference runs (%s); it costs more CPU", reason)


# ``kernel_rx.peek_arrival_ns`` and ``call_state.explain_delay``, compiled where the
# compiled path runs (one ``recvmsg`` without the Python socket method; the switch log
# walked and the run-queue clock read without a Python call). Named here rather than
# swapped in their modules: the reference stays callable there, for the parity tests.
peek_arrival_ns: Callable[[Any], int | None] = kernel_rx.peek_arrival_ns
explain_delay: Callable[[int, int, dict[str, int]], int] = call_state.explain_delay


def _compiled_helpers(extension: Any) -> dict[str, Any]:
    return {"peek_arrival_ns": extension.peek_arrival_ns, "explain_delay": extension.explain_delay}


accelerate(sys.modules[__name__], _compiled_helpers)
