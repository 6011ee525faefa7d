"""When does a greenlet that switched out for something other than a socket become ready?

A switch-out seen by the switch tracer outside a socket wait is classified by the Python
frame that yielded. Only waits whose end is known in advance count towards scheduling
delay:

- ``gevent.sleep(s)``: ready after ``s`` (``sleep(0)``: at once);
- ``gevent.select.poll.poll(t)`` / ``select(..., t)``: ready after ``t`` at the latest;
  ``poll(0)`` is a full trip through the loop (client libraries such as urllib3 check a
  pooled connection that way before reusing it; the io pool's client does not).

Anything else (locks, queues, ``Event.wait``, DNS on the thread pool) returns None: the
greenlet was blocked on something we cannot date, and that time is reported as blocked,
never blamed on the hub. The lookup is by code object, so it costs a dict lookup per frame
and only runs for greenlets with an active call measurement.
"""

from __future__ import annotations

from types import CodeType, FrameType
from typing import Final

# How many frames up from the innermost Python frame to look: gevent's Cython-compiled
# primitives (Waiter.get, AbstractLinkable._wait) leave no frames, so the yielding
# gevent function is usually the innermost one.
_MAX_DEPTH: Final = 3

# code object -> (name of the local holding the wait in seconds, whether a negative or
# None value means "no deadline" rather than "zero")
_deadline_locals: dict[CodeType, tuple[str, bool]] | None = None


def _table() -> dict[CodeType, tuple[str, bool]]:
    global _deadline_locals
    if _deadline_locals is None:
        import gevent.hub
        import gevent.select

        table = {gevent.hub.sleep.__code__: ("seconds", False)}
        poll_type = getattr(gevent.select, "poll", None)
        if poll_type is not None:
            # poll() converts its millisecond timeout to seconds before it waits.
            table[poll_type.poll.__code__] = ("timeout", True)
        table[gevent.select.SelectResult.select.__code__] = ("timeout", True)
        _deadline_locals = table
    return _deadline_locals


def ready_after_ns(frame: FrameType | None) -> int | None:
    """Return after how many ns a greenlet suspended in *frame* is ready at the latest.

    None when the wait has no known end (the greenlet is blocked on something else).
    """
    table = _table()
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        entry = table.get(frame.f_code)
        if entry is not None:
            name, negative_blocks = entry
            value = frame.f_locals.get(name)
            if value is None or value < 0:
                # poll(None) / poll(-1) wait for an fd with no deadline; sleep(-1) is sleep(0)
                return None if negative_blocks or value is None else 0
            return int(value * 1_000_000_000)
        frame = frame.f_back
        depth += 1
    return None
