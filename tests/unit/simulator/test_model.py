"""Simulator settings: defaults, partial updates, validation, latency sampling."""

from __future__ import annotations

import dataclasses
import random
import statistics
from pathlib import Path

import pytest

from simulator.model import (
    DEFAULT_CONFIG,
    UPSTREAMS,
    Latency,
    SettingsError,
    UpstreamSettings,
    load_config,
    parse_config,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


# --- defaults and the example config ---------------------------------------------------


def test_embedded_defaults_match_the_documented_ones() -> None:
    ups = DEFAULT_CONFIG.upstreams
    assert set(ups) == set(UPSTREAMS) == {"vehicles", "routing", "promotions"}
    assert ups["vehicles"].latency == Latency("jitter", 35.0, jitter_ms=10.0)
    assert ups["routing"].latency == Latency("longtail", 45.0, tail_p=0.01, tail_ms=400.0)
    assert ups["promotions"].latency == Latency("jitter", 20.0, jitter_ms=5.0)
    for settings in ups.values():
        assert settings.fault == "none"
        assert settings.error_rate == 0.0
        assert settings.error_status == 503


def test_example_simulator_toml_is_valid_and_mirrors_the_defaults() -> None:
    config = load_config(REPO_ROOT / "simulator.toml")
    assert dict(config.upstreams) == dict(DEFAULT_CONFIG.upstreams)


def test_settings_are_frozen() -> None:
    settings = UpstreamSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.error_rate = 0.5  # type: ignore[misc]


# --- partial updates -------------------------------------------------------------------


def test_partial_update_keeps_everything_it_does_not_name() -> None:
    base = DEFAULT_CONFIG.upstreams["vehicles"]
    new = base.updated({"latency": {"ms": 50}, "error_rate": 0.25})
    assert new.latency == Latency("jitter", 50.0, jitter_ms=10.0)
    assert new.error_rate == 0.25
    assert new.error_status == base.error_status
    assert new.fault == base.fault
    assert base.latency.ms == 35.0  # the original is untouched


def test_switching_distribution_starts_from_that_distributions_defaults() -> None:
    base = DEFAULT_CONFIG.upstreams["vehicles"]  # jitter
    assert base.updated({"latency": {"dist": "fixed", "ms": 100}}).latency == Latency("fixed", 100)
    tail = base.updated({"latency": {"dist": "longtail", "ms": 50, "tail_ms": 1500}}).latency
    assert tail == Latency("longtail", 50.0, tail_p=0.01, tail_ms=1500.0)


def test_to_dict_round_trips_and_shows_only_the_keys_of_the_distribution() -> None:
    for settings in DEFAULT_CONFIG.upstreams.values():
        assert UpstreamSettings().updated(settings.to_dict()) == settings
    assert Latency("fixed", 100.0).to_dict() == {"dist": "fixed", "ms": 100}
    assert Latency("jitter", 35.0, jitter_ms=10.0).to_dict() == {
        "dist": "jitter",
        "ms": 35,
        "jitter_ms": 10,
    }


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"colour": "red"}, "colour"),
        ({"latency": 100}, "latency"),
        ({"latency": {"dist": "gaussian"}}, "latency.dist"),
        ({"latency": {"ms": -1}}, "latency.ms"),
        ({"latency": {"ms": "100"}}, "latency.ms"),
        ({"latency": {"ms": True}}, "latency.ms"),
        ({"latency": {"ms": float("nan")}}, "latency.ms"),
        ({"latency": {"ms": 10_000_000}}, "latency.ms"),
        ({"latency": {"dist": "jitter", "ms": 10, "jitter_ms": 20}}, "latency.jitter_ms"),
        ({"latency": {"dist": "fixed", "ms": 10, "jitter_ms": 2}}, "latency.jitter_ms"),
        ({"latency": {"dist": "longtail", "tail_p": 1.5}}, "latency.tail_p"),
        ({"latency": {"dist": "fixed", "speed": 1}}, "latency.speed"),
        ({"error_rate": 1.01}, "error_rate"),
        ({"error_rate": -0.1}, "error_rate"),
        ({"error_status": 200}, "error_status"),
        ({"error_status": 503.0}, "error_status"),
        ({"error_status": True}, "error_status"),
        ({"fault": "explode"}, "fault"),
        ({"fault_rate": 2}, "fault_rate"),
        ({"trickle_ms": 0}, "trickle_ms"),
    ],
)
def test_invalid_updates_name_the_field(update: dict[str, object], field: str) -> None:
    with pytest.raises(SettingsError) as info:
        UpstreamSettings().updated(update)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_update_that_is_not_an_object_is_rejected() -> None:
    with pytest.raises(SettingsError) as info:
        UpstreamSettings().updated([1, 2])
    assert info.value.field == "body"


# --- config documents ------------------------------------------------------------------


def test_config_overrides_only_what_it_names() -> None:
    config = parse_config({"seed": 7, "upstreams": {"routing": {"fault": "reset"}}})
    assert config.seed == 7
    assert config.upstreams["routing"].fault == "reset"
    assert config.upstreams["routing"].latency == DEFAULT_CONFIG.upstreams["routing"].latency
    assert config.upstreams["vehicles"] == DEFAULT_CONFIG.upstreams["vehicles"]


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"sead": 1}, "sead"),
        ({"seed": "x"}, "seed"),
        ({"upstreams": {"payments": {}}}, "upstreams.payments"),
        (
            {"upstreams": {"routing": {"latency": {"tail_p": 2}}}},
            "upstreams.routing.latency.tail_p",
        ),
        ({"upstreams": {"vehicles": {"error_rate": "high"}}}, "upstreams.vehicles.error_rate"),
    ],
)
def test_invalid_config_names_the_dotted_key(doc: dict[str, object], field: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse_config(doc)
    assert info.value.field == field


def test_unreadable_or_unparsable_config_files(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as info:
        load_config(tmp_path / "missing.toml")
    assert info.value.field == "config"
    bad = tmp_path / "bad.toml"
    bad.write_text("[upstreams.vehicles\n")
    with pytest.raises(SettingsError) as info:
        load_config(bad)
    assert info.value.field == "config"
    assert "not valid TOML" in str(info.value)


# --- latency sampling ------------------------------------------------------------------

N = 20_000


def _samples(latency: Latency, seed: int = 1234) -> list[float]:
    rng = random.Random(seed)
    return [latency.sample_ms(rng) for _ in range(N)]


def test_fixed_latency_is_always_the_same() -> None:
    assert set(_samples(Latency("fixed", 100.0))) == {100.0}


def test_jitter_is_uniform_within_the_band() -> None:
    samples = _samples(Latency("jitter", 100.0, jitter_ms=20.0))
    assert min(samples) >= 80.0
    assert max(samples) <= 120.0
    assert statistics.fmean(samples) == pytest.approx(100.0, abs=0.5)
    # uniform on [80, 120]: standard deviation 40 / sqrt(12) ~ 11.55, quartiles at 90 / 110
    assert statistics.pstdev(samples) == pytest.approx(40 / 12**0.5, rel=0.03)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    assert q1 == pytest.approx(90.0, abs=1.0)
    assert q3 == pytest.approx(110.0, abs=1.0)


def test_longtail_hits_the_tail_at_the_configured_rate() -> None:
    latency = Latency("longtail", 50.0, tail_p=0.01, tail_ms=1500.0)
    samples = _samples(latency)
    assert set(samples) <= {50.0, 1500.0}
    tail_share = samples.count(1500.0) / N
    # binomial: sd = sqrt(0.01 * 0.99 / 20000) ~ 0.0007; allow ~5 sd
    assert tail_share == pytest.approx(0.01, abs=0.0035)
    assert statistics.fmean(samples) == pytest.approx(latency.mean_ms(), rel=0.1)


def test_same_seed_same_delays() -> None:
    latency = Latency("jitter", 35.0, jitter_ms=10.0)
    assert _samples(latency, seed=9) == _samples(latency, seed=9)
    assert _samples(latency, seed=9) != _samples(latency, seed=10)
