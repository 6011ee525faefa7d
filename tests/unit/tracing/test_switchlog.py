"""The switch log's attribution: its cost does not grow with the interval."""

from __future__ import annotations

from typing import Any

import pytest

from tracing.timing import native
from tracing.timing.switchlog import CHECKPOINT_EVERY, UNRECORDED_LABEL, SwitchLog

KINDS: list[Any] = [SwitchLog]
if native.module is not None:
    KINDS.append(native.module.SwitchLog)


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_interval_is_named_in_full(kind: Any) -> None:
    """The old walk stopped after 512 switches and named the rest <unrecorded>."""
    log = kind(8192)
    for i in range(4000):
        log.append((i * 10, "POST /hog" if i % 2 else "<hub>"))
    into: dict[str, int] = {}
    log.attribute(5, 39_995, into)
    assert UNRECORDED_LABEL not in into
    assert into == {"POST /hog": 19_995, "<hub>": 19_995}


@pytest.mark.parametrize("kind", KINDS)
def test_time_before_the_oldest_entry_is_unrecorded(kind: Any) -> None:
    log = kind(2 * CHECKPOINT_EVERY)
    for i in range(10 * CHECKPOINT_EVERY):
        log.append((i * 10, "POST /hog"))
    into: dict[str, int] = {}
    log.attribute(0, 10 * CHECKPOINT_EVERY * 10, into)
    oldest = (10 - 2) * CHECKPOINT_EVERY * 10  # the log holds the last 2 * CHECKPOINT_EVERY
    assert into == {UNRECORDED_LABEL: oldest, "POST /hog": 10 * CHECKPOINT_EVERY * 10 - oldest}
    assert sum(into.values()) == 10 * CHECKPOINT_EVERY * 10


def _walk(entries: list[tuple[int, str | None]], start: int, end: int) -> dict[str, int]:
    """The attribution as it was defined before the counters: walk back over entries."""
    into: dict[str, int] = {}
    segment_end = end
    for switched_at, label in reversed(entries):
        if switched_at >= segment_end:
            continue
        name = "<unknown>" if label is None else label
        into[name] = into.get(name, 0) + segment_end - max(switched_at, start)
        if switched_at <= start:
            return {k: v for k, v in into.items() if v > 0}
        segment_end = switched_at
    into[UNRECORDED_LABEL] = into.get(UNRECORDED_LABEL, 0) + segment_end - start
    return {k: v for k, v in into.items() if v > 0}


@pytest.mark.parametrize("kind", KINDS)
def test_the_counters_name_what_a_walk_over_the_log_names(kind: Any) -> None:
    import random

    rng = random.Random(7)
    log = kind(16384)  # holds every entry, as the walk here does
    entries: list[tuple[int, str | None]] = []
    t = 1_000
    for _ in range(300):
        for _ in range(rng.randrange(1, 40)):
            t += rng.randrange(1, 500)
            entry = (t, rng.choice(["POST /hog", "GET /bike", None, "<hub>"]))
            entries.append(entry)
            log.append(entry)
        start = rng.randrange(entries[0][0], t + 1)
        end = start + rng.randrange(1, 20_000)
        into: dict[str, int] = {}
        log.attribute(start, end, into)
        assert into == _walk(entries, start, end)


@pytest.mark.parametrize("kind", KINDS)
def test_a_switch_in_the_same_ns_as_the_last_one_named_is_not_lost(kind: Any) -> None:
    """The reference once took an entry appended at the time of the newest entry already
    folded into its counters for that entry, and gave its time to the label before."""
    log = kind(64)
    log.append((100, "<hub>"))
    log.attribute(50, 100, {})
    log.append((100, "GET /bike"))
    log.append((200, "<hub>"))
    into: dict[str, int] = {}
    log.attribute(100, 200, into)
    assert into == {"GET /bike": 100}
