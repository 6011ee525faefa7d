"""When a switched-out greenlet becomes ready, judged from the frame it yielded in (real
gevent greenlets, no monkey patching)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
import gevent.select
import pytest
from gevent import socket as gsocket

from tracing.timing.runnable import ready_after_ns


def suspended_frame(body: Callable[[], Any]) -> Any:
    """Run *body* in a greenlet until it first switches out; return its frame then."""
    greenlet = gevent.spawn(body)
    gevent.sleep(0)  # let it start and switch out
    frame = greenlet.gr_frame
    result = ready_after_ns(frame)
    greenlet.kill()
    return result


def test_sleep_is_ready_when_its_time_is_up() -> None:
    assert suspended_frame(lambda: gevent.sleep(0)) == 0
    assert suspended_frame(lambda: gevent.sleep(0.25)) == 250_000_000


def test_poll_with_zero_timeout_is_ready_at_once() -> None:
    """urllib3's "was the pooled connection dropped?" check is a poll(0)."""
    a, b = gsocket.socketpair()
    try:

        def poll_zero() -> None:
            poller = gevent.select.poll()
            poller.register(a.fileno(), gevent.select.POLLIN)
            poller.poll(0)

        assert suspended_frame(poll_zero) == 0

        def poll_forever() -> None:
            poller = gevent.select.poll()
            poller.register(a.fileno(), gevent.select.POLLIN)
            poller.poll()

        assert suspended_frame(poll_forever) is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "wait",
    [
        lambda: gevent.event.Event().wait(),
        lambda: gevent.lock.Semaphore(0).acquire(),
        lambda: gevent.queue.Queue().get(),
    ],
    ids=["event", "semaphore", "queue"],
)
def test_waits_with_no_known_end_are_not_ready(wait: Callable[[], Any]) -> None:
    assert suspended_frame(wait) is None


def test_no_frame() -> None:
    assert ready_after_ns(None) is None
