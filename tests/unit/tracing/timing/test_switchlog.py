"""Who ran during an interval, from a hand-written switch log (fake clock)."""

from __future__ import annotations

import pytest

from tests.samples import BIKE_ROUTE, RIDE_ROUTE
from tracing.timing.labels import UNKNOWN_LABEL
from tracing.timing.switchlog import UNRECORDED_LABEL, SwitchLog

HOG = RIDE_ROUTE


def log_of(*entries: tuple[int, str | None], size: int = 64) -> SwitchLog:
    log = SwitchLog(size)
    for entry in entries:
        log.append(entry)
    return log


def test_splits_an_interval_between_the_labels_that_ran() -> None:
    log = log_of((0, "<hub>"), (100, HOG), (400, "<hub>"), (450, BIKE_ROUTE), (700, "<hub>"))
    into: dict[str, int] = {}
    log.attribute(50, 700, into)
    assert into == {"<hub>": 50 + 50, HOG: 300, BIKE_ROUTE: 250}


def test_ignores_the_switch_that_ends_the_interval_and_anything_after() -> None:
    log = log_of((0, HOG), (1000, BIKE_ROUTE), (1200, HOG))
    into: dict[str, int] = {}
    log.attribute(500, 1000, into)
    assert into == {HOG: 500}


def test_unlabelled_greenlets_are_unknown() -> None:
    log = log_of((0, None), (10, HOG))
    into: dict[str, int] = {}
    log.attribute(0, 20, into)
    assert into == {UNKNOWN_LABEL: 10, HOG: 10}


def test_time_older_than_the_log_is_unrecorded() -> None:
    log = log_of((0, BIKE_ROUTE), (100, HOG), (200, BIKE_ROUTE), size=2)  # (0, BIKE_ROUTE) fell out
    into: dict[str, int] = {}
    log.attribute(50, 250, into)
    assert into == {UNRECORDED_LABEL: 50, HOG: 100, BIKE_ROUTE: 50}


def test_adds_to_what_is_already_there() -> None:
    log = log_of((0, HOG))
    into = {HOG: 5}
    log.attribute(0, 10, into)
    assert into == {HOG: 15}


def test_empty_or_reversed_interval_attributes_nothing() -> None:
    log = log_of((0, HOG))
    into: dict[str, int] = {}
    log.attribute(10, 10, into)
    log.attribute(10, 5, into)
    assert into == {}


def test_last_entry() -> None:
    assert SwitchLog().last() is None
    assert log_of((1, HOG), (2, BIKE_ROUTE)).last() == (2, BIKE_ROUTE)


def test_rejects_a_useless_size() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        SwitchLog(1)
