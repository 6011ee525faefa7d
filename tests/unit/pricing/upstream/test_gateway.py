"""pricing.upstream.gateway.join_each: how an offer's fan-out is joined."""

from __future__ import annotations

from collections.abc import Callable

import gevent
import greenlet

from pricing.upstream.gateway import join_each


def _wakes_of_the_joiner(fan_out: Callable[[], list[gevent.Greenlet]], timeout: float) -> int:
    """How many times the joining greenlet is switched into while join_each waits."""
    wakes = [0]

    def joiner() -> None:
        me = greenlet.getcurrent()
        greenlets = fan_out()

        def trace(event: str, args: tuple[greenlet.greenlet, greenlet.greenlet]) -> None:
            if args[1] is me:
                wakes[0] += 1

        previous = greenlet.settrace(trace)
        try:
            join_each(greenlets, timeout)
        finally:
            greenlet.settrace(previous)

    gevent.spawn(joiner).join()
    return wakes[0]


def test_calls_that_end_together_wake_the_joiner_once() -> None:
    """gevent.joinall wakes its caller once for each greenlet that ends (three here): every
    wake is two switches, each traced by the timing core."""

    def fan_out() -> list[gevent.Greenlet]:
        return [gevent.spawn(gevent.sleep, 0.01) for _ in range(3)]

    assert _wakes_of_the_joiner(fan_out, 5.0) == 1


def test_calls_already_over_are_joined_without_a_switch() -> None:
    def fan_out() -> list[gevent.Greenlet]:
        greenlets = [gevent.spawn(lambda: None) for _ in range(3)]
        gevent.joinall(greenlets)
        return greenlets

    assert _wakes_of_the_joiner(fan_out, 5.0) == 0


def test_the_join_ends_at_its_timeout_and_leaves_the_rest_to_the_caller() -> None:
    fast = gevent.spawn(lambda: 1)
    slow = gevent.spawn(gevent.sleep, 30)
    try:
        join_each([slow, fast], 0.05)
        assert fast.dead and fast.value == 1
        assert not slow.dead
    finally:
        slow.kill()
