"""The once-a-second flush of a worker's in-process counts into prometheus_client, on a
greenlet of the worker's hub.

Only needed in multiprocess mode (other workers answer scrapes too). Where a hub timer
already ticks (the loop-lag gauge, with the timing core on) the flush runs on its ticks
rather than on a timer of its own, which would wake an idle worker once more a second
(what a wake-up costs: docs/traces.md, "What tracing costs"). The flush itself:
``pricingctl bench metrics-cost``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from tracing.timing.hook_errors import swallow

#: Seconds between two flushes of a worker's in-process counts into prometheus_client:
#: how late a scrape may see another worker's counts, and what a SIGKILLed worker loses.
FLUSH_INTERVAL_S: Final = 1.0


class Ticker(Protocol):
    """A periodic timer already running on the hub, whose every tick calls its observers
    (``tracing.timing.loop_lag.LoopLagGauge`` is one)."""

    interval_s: float
    observers: list[Callable[[float], None]]


def start_flushing(
    flush: Callable[[], None], ticker: Ticker | None, interval_s: float = FLUSH_INTERVAL_S
) -> object:
    """Call *flush* every *interval_s* on a greenlet of this process's hub, on the
    *ticker*'s ticks when it has one; returns the greenlet. A failed flush is logged
    (``hook_errors``) and the next one runs."""
    import gevent

    from tracing.timing.labels import set_greenlet_label

    wait = _wait_on_ticker(ticker, interval_s)

    def run() -> None:
        while True:
            if wait is None:
                gevent.sleep(interval_s)
            else:
                wait()
            try:
                flush()
            except Exception as exc:
                swallow("metrics flush", exc)

    flusher = gevent.spawn(run)
    set_greenlet_label("<metrics flush>", flusher)
    return flusher


def _wait_on_ticker(ticker: Ticker | None, interval_s: float) -> Callable[[], None] | None:
    """A wait that ends on the ticker's tick closest to every *interval_s* (it ends by
    itself after two intervals: a ticker that stopped does not stop the flush); None
    without a ticker that ticks at least that often."""
    if ticker is None or not 0 < ticker.interval_s <= interval_s:
        return None
    import gevent.event

    every = max(1, round(interval_s / ticker.interval_s))
    due = gevent.event.Event()
    ticks = [0]

    def on_tick(_lag_s: float) -> None:
        ticks[0] += 1
        if ticks[0] >= every:
            ticks[0] = 0
            due.set()  # the flush greenlet runs in this same loop iteration

    def wait() -> None:
        due.wait(2 * interval_s)
        due.clear()

    ticker.observers.append(on_tick)
    return wait
