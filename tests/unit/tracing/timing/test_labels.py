"""Greenlet labels: set, read, inherited by fan-out greenlets, the hub's own label."""

from __future__ import annotations

import gevent
import greenlet

from tests.samples import RIDE_ROUTE
from tracing.timing.labels import (
    HUB_LABEL,
    UNKNOWN_LABEL,
    get_greenlet_label,
    set_greenlet_label,
    tag_of,
)


def test_unlabelled_is_unknown_and_the_hub_is_the_hub() -> None:
    assert get_greenlet_label(greenlet.greenlet(lambda: None)) == UNKNOWN_LABEL
    assert get_greenlet_label(gevent.get_hub()) == HUB_LABEL


def test_set_returns_the_previous_label() -> None:
    assert set_greenlet_label(RIDE_ROUTE) is None
    assert get_greenlet_label() == RIDE_ROUTE
    assert set_greenlet_label(None) == RIDE_ROUTE
    assert get_greenlet_label() == UNKNOWN_LABEL


def test_fan_out_greenlets_inherit_the_spawners_label() -> None:
    def handler() -> list[str]:
        set_greenlet_label(RIDE_ROUTE)
        children = [gevent.spawn(get_greenlet_label) for _ in range(3)]
        grandchild = gevent.spawn(lambda: gevent.spawn(get_greenlet_label).get())
        return [child.get() for child in children] + [grandchild.get()]

    assert gevent.spawn(handler).get() == [RIDE_ROUTE] * 4


def test_explicit_label_wins_over_inheritance() -> None:
    def handler() -> str:
        set_greenlet_label(RIDE_ROUTE)
        child = gevent.spawn(get_greenlet_label)
        set_greenlet_label("GET /v1/offers/bike", child)
        return child.get()

    assert gevent.spawn(handler).get() == "GET /v1/offers/bike"


def test_the_tag_is_created_once() -> None:
    worker = greenlet.greenlet(lambda: None)
    assert tag_of(worker) is tag_of(worker)
