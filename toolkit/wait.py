"""One wait for a condition: every loop that polls until something holds or time runs
out calls this, so that the deadline and the poll interval are handled in one place."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    get: Callable[[], T],
    timeout_s: float,
    interval_s: float = 0.05,
    *,
    until: Callable[[T], object] = bool,
    sleep: Callable[[float], object] | None = None,
) -> T:
    """Call `get` until `until` holds for its answer, and return that answer; when
    `timeout_s` has passed, return its last answer. `get` is called at least once;
    `sleep` is how to wait between calls: by default `time.sleep` as it is at the call
    (gevent's once monkey-patched), or gevent.sleep in a hub that is not patched."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = get()
        if until(value) or time.monotonic() >= deadline:
            return value
        (sleep or time.sleep)(interval_s)


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float,
    interval_s: float = 0.05,
    *,
    sleep: Callable[[float], object] | None = None,
) -> bool:
    """Poll `predicate` until it is true (True) or `timeout_s` has passed (False)."""
    return bool(wait_for(predicate, timeout_s, interval_s, sleep=sleep))
