"""The scenario file of `pricingctl incident`: the shipped one loads, and every kind of
mistake is refused in one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scenario import DEFAULT_SCENARIO, ScenarioError, load_scenario


def test_the_shipped_scenario_is_the_seed_s_incident() -> None:
    scenario = load_scenario(DEFAULT_SCENARIO)
    assert scenario.offer_kinds == ("offers.bike", "offers.scooter")
    assert scenario.cap_ms == 500
    assert scenario.polls.interval_s == 2.0
    assert scenario.upstream_ms == 110
    assert set(scenario.cpu_kinds) == {"offers.rideshare", "quotes.batch"}
    assert scenario.after_within_cap_min == 0.9999
    assert scenario.to_json()["clients"] == scenario.polls.clients


def _written(tmp_path: Path, old: str, new: str) -> Path:
    text = DEFAULT_SCENARIO.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "scenario.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("[timing]", "[timings]", "unknown table [timings]"),
        ("count = 60", "count = 60\nkount = 3", "[clients].kount: unknown key"),
        ("count = 60", 'count = "sixty"', "[clients].count: a whole number from 1 to 5000"),
        ("count = 60", "count = 0", "[clients].count: 0 is outside 1 to 5000"),
        ("cap_ms = 500", "cap_ms = true", "[clients].cap_ms: a number"),
        ("after_s = 60", "", "[timing].after_s: missing"),
        ('"quotes.batch" = 0.08', '"quotes.batsh" = 0.1', "[cpu].quotes.batsh: not an endpoint"),
        (
            '"quotes.batch" = 0.08',
            '"quotes.batch" = 1.5',
            "[cpu].quotes.batch: a share of the pool",
        ),
        ('"quotes.batch" = 0.08', '"quotes.batch" = 0.95', "[cpu]: the shares add up"),
        ('"offers.rideshare" = 0.08\n"quotes.batch" = 0.08', "", "[cpu]: no CPU-heavy endpoint"),
        ('offers = ["offers.bike", "offers.scooter"]', "offers = []", "[clients].offers"),
        ("offer_timeout_ms = 2000", "offer_timeout_ms = 400", "below [clients].cap_ms"),
        ("# The founding", "seed = 1\n# The founding", "unknown table [seed]"),
    ],
)
def test_a_bad_scenario_is_refused_in_one_line_naming_the_key(
    tmp_path: Path, old: str, new: str, says: str
) -> None:
    path = _written(tmp_path, old, new)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert says in message, message
    assert "\n" not in message


def test_a_missing_or_broken_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[clients\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="not TOML"):
        load_scenario(broken)
