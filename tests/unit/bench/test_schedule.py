"""The open-loop schedule: Poisson arrivals at the requested mean rate, fixed in advance."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from bench.schedule import (
    Polls,
    count_by_kind,
    load_schedule,
    mixed_schedule,
    poisson_times,
    poll_schedule,
)


def test_poisson_arrivals_have_the_requested_mean_rate() -> None:
    rate, duration = 200.0, 100.0
    times = poisson_times(rate, duration, random.Random(7))
    # ~20 000 arrivals: the count's standard deviation is ~0.7 % of the mean.
    assert abs(len(times) / duration - rate) / rate < 0.03
    assert all(0.0 <= t < duration for t in times)
    assert times == sorted(times)


def test_poisson_gaps_are_exponential() -> None:
    rate = 50.0
    times = poisson_times(rate, 400.0, random.Random(3))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert mean == pytest.approx(1 / rate, rel=0.03)
    # Exponential: standard deviation equals the mean, and P(gap > mean) = 1/e.
    assert sd / mean == pytest.approx(1.0, abs=0.05)
    assert sum(g > mean for g in gaps) / len(gaps) == pytest.approx(math.exp(-1), abs=0.02)


def test_zero_rate_gives_no_arrivals_and_negative_is_refused() -> None:
    assert poisson_times(0.0, 10.0, random.Random(1)) == []
    with pytest.raises(ValueError):
        poisson_times(-1.0, 10.0, random.Random(1))


def test_mixed_schedule_is_time_ordered_with_each_kind_at_its_rate() -> None:
    rates = {"offers.bike": 50.0, "offers.scooter": 50.0, "offers.rideshare": 30.0}
    schedule = mixed_schedule(rates, 200.0, seed=1)
    assert [a.at_s for a in schedule] == sorted(a.at_s for a in schedule)
    counts = count_by_kind(schedule)
    for kind, rate in rates.items():
        assert counts[kind] / 200.0 == pytest.approx(rate, rel=0.05)


def test_same_seed_same_schedule_whatever_the_server_does() -> None:
    rates = {"a": 10.0, "b": 5.0}
    assert mixed_schedule(rates, 30.0, seed=4) == mixed_schedule(rates, 30.0, seed=4)
    assert mixed_schedule(rates, 30.0, seed=4) != mixed_schedule(rates, 30.0, seed=5)


def test_changing_one_kinds_rate_leaves_the_others_arrivals_alone() -> None:
    before = mixed_schedule({"offers": 20.0, "cpu": 10.0}, 30.0, seed=2)
    after = mixed_schedule({"offers": 20.0, "cpu": 40.0}, 30.0, seed=2)
    assert [a for a in before if a.kind == "offers"] == [a for a in after if a.kind == "offers"]


def test_each_client_polls_every_kind_at_once_every_interval() -> None:
    polls = Polls(clients=5, interval_s=2.0, kinds=("offers.bike", "offers.scooter"))
    schedule = poll_schedule(polls, 60.0, seed=3)
    assert schedule == sorted(schedule, key=lambda a: a.at_s)
    for client in range(5):
        mine = [a for a in schedule if a.variant == client]
        bikes = [a.at_s for a in mine if a.kind == "offers.bike"]
        scooters = [a.at_s for a in mine if a.kind == "offers.scooter"]
        assert bikes == scooters  # in parallel, as the app asked
        gaps = [b - a for a, b in itertools.pairwise(bikes)]
        assert all(1.8 <= g <= 2.2 for g in gaps), gaps
        assert bikes[0] < 2.0 and len(bikes) >= 27
    assert poll_schedule(polls, 60.0, seed=3) == schedule


def test_polls_merge_with_the_poisson_arrivals_in_time_order() -> None:
    polls = Polls(clients=3, interval_s=1.0, kinds=("offers.bike",))
    merged = load_schedule({"offers.rideshare": 5.0}, 20.0, 1, polls)
    assert merged == sorted(merged, key=lambda a: a.at_s)
    assert count_by_kind(merged)["offers.bike"] == len(poll_schedule(polls, 20.0, 1))
    assert [a for a in merged if a.kind == "offers.rideshare"] == mixed_schedule(
        {"offers.rideshare": 5.0}, 20.0, 1
    )
    assert Polls.from_json(polls.to_json()) == polls
