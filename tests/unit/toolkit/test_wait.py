from __future__ import annotations

from toolkit.wait import wait_for, wait_until


def test_wait_for_returns_the_first_answer_that_holds() -> None:
    answers = iter([[], [1], [1, 2], [1, 2, 3]])
    assert wait_for(lambda: next(answers), 10, 0) == [1]
    answers = iter(range(10))
    assert wait_for(lambda: next(answers), 10, 0, until=lambda n: n >= 3) == 3


def test_wait_for_returns_the_last_answer_when_time_runs_out() -> None:
    calls: list[int] = []

    def get() -> list[int]:
        calls.append(1)
        return []

    assert wait_for(get, 0.05, 0.01) == []
    assert len(calls) >= 2


def test_wait_until_asks_at_least_once_and_says_whether_it_held() -> None:
    assert wait_until(lambda: True, 0)
    assert not wait_until(lambda: False, 0.02, 0.005)


def test_wait_until_waits_with_the_sleep_it_is_given() -> None:
    slept: list[float] = []
    ticks = iter([False, False, True])
    assert wait_until(lambda: next(ticks), 10, 0.25, sleep=slept.append)
    assert slept == [0.25, 0.25]
