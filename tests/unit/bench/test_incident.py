"""`pricingctl incident`'s pure parts: the configs before and after the move, the
figures from the clients' samples (within the cap, flicker, failures during the move,
the time series), and the targets that decide the exit status."""

from __future__ import annotations

from pathlib import Path

from bench.incident import before_config, moved_config, summary_lines, targets
from bench.incident_report import failed_during, flicker, nines, sent, timeline, window_stats
from bench.loadgen import TIMEOUT, Samples
from bench.scenario import DEFAULT_SCENARIO, load_scenario
from bench.schedule import Arrival
from routing.load import load_routes

BIKE, SCOOTER, RIDE = "offers.bike", "offers.scooter", "offers.rideshare"


def test_before_the_move_the_cpu_heavy_endpoints_share_the_offers_pool(tmp_path: Path) -> None:
    scenario = load_scenario(DEFAULT_SCENARIO)
    config = before_config(load_routes(), scenario, tmp_path)
    pools = {r.endpoint: r.pool for r in config.routes}
    assert pools[RIDE] == pools["quotes.batch"] == pools[BIKE] == "io"
    assert pools["meta.openapi"] == "cpu"  # the cpu pool still serves a route
    bike = config.route_for_endpoint(BIKE)
    assert bike is not None and bike.timeout_ms == scenario.offer_timeout_ms
    assert bike.slow_ms == 250  # every late offer is traced
    assert Path(config.source) == tmp_path / "before.toml"
    moved = moved_config(config, {RIDE: "cpu", "quotes.batch": "cpu"}, tmp_path)
    after = {r.endpoint: r.pool for r in moved.routes}
    assert after[RIDE] == after["quotes.batch"] == "cpu" and after[BIKE] == "io"
    assert moved.pools == config.pools  # sizes need a restart: only the moves


def _samples(rows: list[tuple[Arrival, int, float]]) -> tuple[list[Arrival], Samples]:
    kinds = tuple(sorted({a.kind for a, _, _ in rows}))
    schedule = [a for a, _, _ in rows]
    return schedule, Samples(
        kinds=kinds,
        kind=[kinds.index(a.kind) for a in schedule],
        scheduled_s=[a.at_s for a in schedule],
        lag_s=[0.0] * len(rows),
        latency_s=[x for _, _, x in rows],
        status=[s for _, s, _ in rows],
    )


def polls() -> list[tuple[Arrival, int, float]]:
    """Client 0 sees its bike offer vanish twice; client 1 never; a quote fails."""
    rows = []
    bike0 = [0.1, 0.9, 0.1, 0.1, 0.1, 0.7, 0.2]  # late at polls 1 and 5
    for i, latency in enumerate(bike0):
        rows.append((Arrival(2.0 * i, BIKE, 0), 200, latency))
        rows.append((Arrival(2.0 * i + 0.5, BIKE, 1), 200, 0.12))
        rows.append((Arrival(2.0 * i + 0.5, SCOOTER, 1), 200 if i != 0 else 503, 0.12))
    rows.append((Arrival(6.2, RIDE, 7), TIMEOUT, 3.0))
    return sorted(rows, key=lambda r: r[0].at_s)


def test_flicker_is_an_offer_present_in_one_poll_and_gone_in_the_next() -> None:
    schedule, samples = _samples(polls())
    items = sent(schedule, samples)
    seen = flicker(items, (BIKE, SCOOTER), (0.0, 14.0), cap_s=0.5)
    # Client 0: present, late (1), present x3, late (2), present. Client 1's scooter
    # failed at its first poll: absent then present is no flicker.
    assert seen["flickers"] == 2
    assert seen["clients"] == 2 and seen["clients_that_saw_one"] == 1
    assert seen["most_by_one_client"] == 2
    assert seen["poll_pairs"] == 3 * 6
    late_window = flicker(items, (BIKE,), (4.0, 14.0), cap_s=0.5)
    assert late_window["flickers"] == 1


def test_within_the_cap_nines_failures_during_a_window_and_the_timeline() -> None:
    schedule, samples = _samples(polls())
    offers = window_stats(samples, (BIKE, SCOOTER), (0.0, 14.0), cap_s=0.5)
    assert offers["count"] == 21
    assert offers["within_deadline"] == round(18 / 21, 6)
    assert offers["nines"] == nines(18 / 21)
    assert nines(0.995) == 2.3 and nines(1.0) is None
    items = sent(schedule, samples)
    during = failed_during(items, (0.0, 7.0))
    assert during["failed"] == 2  # the scooter's 503 and the quote: late offers are no failure
    assert during["by_kind"] == {RIDE: {"timeout": 1}, SCOOTER: {"http_503": 1}}
    points = timeline(items, (BIKE, SCOOTER), cap_s=0.5, bin_s=7.0)
    assert [p["offers"] for p in points] == [12, 9]
    assert points[0]["p99_ms"] == 900.0


def test_the_fix_worked_only_when_every_deciding_target_is_met(tmp_path: Path) -> None:
    scenario = load_scenario(DEFAULT_SCENARIO)
    flick = {"flickers": 3, "clients_that_saw_one": 2, "per_client_per_minute": 0.1}
    calm = {**flick, "flickers": 0, "clients_that_saw_one": 0, "per_client_per_minute": 0.0}
    offers = {"count": 3000, "p50_ms": 120.0, "p95_ms": 400.0, "p99_ms": 900.0}
    doc = {
        "before": {"offers": {**offers, "within_deadline": 0.994, "nines": 2.2, "p999_ms": 1500.0},
                   "flicker": flick},
        "after": {"offers": {**offers, "within_deadline": 1.0, "nines": None, "p999_ms": 130.0},
                  "flicker": calm},
        "diagnosis": {"culprit": "POST /v1/offers/rideshare"},
        "suggest": {"moves": {RIDE: "cpu"}},
        "move": {"exit": 0, "start_s": 70.0, "end_s": 100.0,
                 "during": {"failed": 0, "requests": 2000}},
        "other_processes_cpu_pct": {"before": 30.0, "after": 35.0},
    }  # fmt: skip
    labels = {"POST /v1/offers/rideshare", "POST /v1/quotes/batch"}
    rows = targets(doc, scenario, labels)
    assert all(t["met"] for t in rows), rows
    doc["move"]["during"]["failed"] = 1
    failed = {t["target"]: t["met"] for t in targets(doc, scenario, labels)}
    assert failed["requests failed during the move"] is False
    assert all(v for k, v in failed.items() if k != "requests failed during the move")
    doc["targets"], doc["fixed"] = targets(doc, scenario, labels), False
    text = "\n".join(summary_lines(doc))
    assert "MISSED requests failed during the move: 1 (wanted 0)" in text
    assert "the fix did not work" in text
    assert "every offer" in text  # the after window's nines, when every offer made it
