"""Date the end of work a measured greenlet hands to gevent's thread pool.

gevent's default resolver runs ``getaddrinfo`` on its thread pool (even for an IP
literal), so every new upstream connection switches out into ``ThreadPool.apply``. The
switch tracer cannot tell when that greenlet became ready again; this hook wraps the
function run on the worker thread and notes when it returned, so the rest of the wait
counts as scheduling delay instead of "blocked". No measurement in progress: one check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from greenlet import getcurrent

from tracing.timing.call_state import measuring
from tracing.timing.labels import TAG_ATTR
from tracing.timing.patching import Patches

_patches = Patches()


def _make_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    def apply(self: Any, func: Callable[..., Any], args: Any = None, kwds: Any = None) -> Any:
        if not measuring[0]:
            return original(self, func, args, kwds)
        tag = getattr(getcurrent(), TAG_ATTR, None)
        call = None if tag is None else tag.call
        if call is None:
            return original(self, func, args, kwds)
        done = [0]

        def run(*a: Any, **k: Any) -> Any:
            try:
                return func(*a, **k)
            finally:
                done[0] = time.monotonic_ns()  # on the worker thread

        previous = call.pending_done
        call.pending_done = done
        try:
            return original(self, run, args, kwds)
        finally:
            call.pending_done = previous

    return apply


def install() -> None:
    """Install the hook (idempotent)."""
    if _patches:
        return
    from gevent.threadpool import ThreadPool

    _patches.apply(ThreadPool, "apply", _make_apply)


def uninstall() -> None:
    """Restore ``ThreadPool.apply`` (idempotent)."""
    _patches.restore()
