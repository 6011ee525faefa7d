"""The open-loop schedule: when each request is due, fixed before the run starts.

Arrivals of each kind are a Poisson process (exponential gaps at the kind's mean
rate); the kinds are merged into one time-ordered list. The schedule never depends
on how fast the server answers: that is what makes the load open-loop, so a server
that stalls shows up as latency, not as a lower request rate (no coordinated
omission). The same seed gives the same schedule, so every layout sees exactly the
same arrivals. App clients that poll (`Polls`: each client asks for its trip's offers
every ~2 s, bike and scooter at once) are scheduled the same way, fixed in advance.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request, due `at_s` seconds after the run starts."""

    at_s: float
    kind: str
    # Which of the kind's prepared request variants to send (the load generator
    # takes it modulo the number of variants).
    variant: int


def poisson_times(rate_rps: float, duration_s: float, rng: random.Random) -> list[float]:
    """Arrival times in [0, duration_s) of a Poisson process with mean rate `rate_rps`."""
    if rate_rps < 0 or duration_s < 0:
        raise ValueError("rate and duration must not be negative")
    times: list[float] = []
    if rate_rps == 0:
        return times
    t = rng.expovariate(rate_rps)
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate_rps)
    return times


def mixed_schedule(rates_rps: Mapping[str, float], duration_s: float, seed: int) -> list[Arrival]:
    """Independent Poisson arrivals per kind, merged in time order.

    Each kind draws from its own generator seeded from (seed, kind), so changing
    one kind's rate leaves the other kinds' arrivals where they were.
    """
    streams: list[list[Arrival]] = []
    for kind in sorted(rates_rps):
        rng = random.Random(f"{seed}:{kind}")
        times = poisson_times(rates_rps[kind], duration_s, rng)
        streams.append([Arrival(t, kind, rng.randrange(1 << 30)) for t in times])
    return list(heapq.merge(*streams, key=lambda a: a.at_s))


@dataclass(frozen=True)
class Polls:
    """App clients polling for offers, as the Lyft app did: each client has its own trip
    (its `variant`), and every `interval_s` (+-10 %) asks for each of `kinds` at once."""

    clients: int
    interval_s: float
    kinds: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"clients": self.clients, "interval_s": self.interval_s, "kinds": list(self.kinds)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Polls:
        kinds = data["kinds"]
        assert isinstance(kinds, list)
        return cls(
            int(str(data["clients"])), float(str(data["interval_s"])), tuple(str(k) for k in kinds)
        )


def poll_schedule(polls: Polls, duration_s: float, seed: int) -> list[Arrival]:
    """Each client's polls in [0, duration_s): the first at a random phase, then one
    every `interval_s` +-10 %, each asking for every kind at once. The variant is the
    client, so the same client always asks for the same trip."""
    arrivals: list[Arrival] = []
    rng = random.Random(f"{seed}:polls")
    for client in range(polls.clients):
        t = rng.uniform(0.0, polls.interval_s)
        while t < duration_s:
            arrivals.extend(Arrival(t, kind, client) for kind in polls.kinds)
            t += polls.interval_s * rng.uniform(0.9, 1.1)
    return sorted(arrivals, key=lambda a: a.at_s)


def load_schedule(
    rates_rps: Mapping[str, float], duration_s: float, seed: int, polls: Polls | None = None
) -> list[Arrival]:
    """The Poisson arrivals of `rates_rps` and, with `polls`, the clients' polls, merged
    in time order (`sorted` is stable: a poll's kinds stay together)."""
    schedule = mixed_schedule(rates_rps, duration_s, seed)
    if polls is None:
        return schedule
    return sorted([*schedule, *poll_schedule(polls, duration_s, seed)], key=lambda a: a.at_s)


def count_by_kind(schedule: Sequence[Arrival]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for arrival in schedule:
        counts[arrival.kind] = counts.get(arrival.kind, 0) + 1
    return counts
