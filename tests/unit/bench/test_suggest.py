"""`pricingctl bench suggest` without stacks: its schedule inside the load, its results
file and summary (the measuring itself is tests/integration/test_suggest.py's runs)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.suggest import min_requests, settings_for, window_s, write_suggest
from pricingctl.main import build_parser


def test_the_scrape_window_fits_inside_the_measured_load() -> None:
    for quick in (False, True):
        s = settings_for(quick=quick)
        # suggest starts after the warm-up and the generator's start, scrapes one window
        # (plus its own start-up) while the load still runs.
        assert 0 < window_s(s) < s.duration_s
        assert min_requests(s) >= 3
    assert min_requests(settings_for()) == 5


def side(p99: float, wait: float | None, moves: dict[str, str]) -> dict[str, object]:
    return {
        "config": "x/routes.toml",
        "suggest_exit": 1 if moves else 0,
        "moves": moves,
        "offers_p99_ms": p99,
        "hub_wait_p99_ms": {"offers.bike": wait, "offers.scooter": None},
        "other_processes_cpu_pct": 12.0,
        "suggest_output": "",
    }


def test_results_hold_both_sides_and_their_ratios(tmp_path: Path) -> None:
    doc = {
        "command": "pricingctl bench suggest",
        "wrong": side(400.0, 250.0, {"offers.rideshare": "cpu", "quotes.batch": "cpu"}),
        "suggested": side(120.0, 10.0, {}),
        "ratios": {
            "offers_p99": 400.0 / 120.0,
            "hub_wait_p99": {"offers.bike": 25.0, "offers.scooter": None},
        },
    }
    summary = write_suggest(doc, tmp_path)
    assert json.loads((tmp_path / "suggest.json").read_text()) == doc
    assert "offers.rideshare -> cpu, quotes.batch -> cpu" in summary
    assert "no move" in summary
    assert "offers p99 400 -> 120 ms (3.33 x)" in summary
    assert "offers.bike 250 -> 10 ms (25.00 x)" in summary
    assert "offers.scooter n/a -> n/a ms (n/a x)" in summary


def test_the_part_takes_the_load_flags() -> None:
    args = build_parser().parse_args(["bench", "suggest", "--quick", "--rates", "batch=2"])
    assert (args.bench_command, args.quick, args.rates) == ("suggest", True, {"batch": 2.0})
