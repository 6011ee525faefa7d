"""The switch log's attribution walk."""

from __future__ import annotations

from tracing.timing.switchlog import MAX_WALK, UNRECORDED_LABEL, SwitchLog


def test_a_walk_is_bounded_and_names_the_rest_unrecorded() -> None:
    log = SwitchLog(size=4 * MAX_WALK)
    for i in range(2 * MAX_WALK):
        log.append((i * 10, "POST /hog"))
    into: dict[str, int] = {}
    log.attribute(0, 2 * MAX_WALK * 10, into)
    assert into["POST /hog"] == MAX_WALK * 10
    assert into[UNRECORDED_LABEL] == MAX_WALK * 10
