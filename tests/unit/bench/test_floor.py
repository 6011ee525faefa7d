"""The upstream floor: configured, or from the simulator's records."""

from __future__ import annotations

from bench.floor import fixed_latency, floor_from_records, floor_from_settings
from simulator.model import UpstreamSettings


def settings(**latencies: dict[str, object]) -> dict[str, UpstreamSettings]:
    return {name: UpstreamSettings().updated({"latency": lat}) for name, lat in latencies.items()}


def test_fixed_latencies_floor_is_the_slowest() -> None:
    floor = floor_from_settings(
        settings(
            vehicles={"dist": "fixed", "ms": 40},
            routing={"dist": "fixed", "ms": 100},
            promotions={"dist": "fixed", "ms": 20},
        ),
        draws=1000,
    )
    assert (floor.p50_ms, floor.p99_ms, floor.p999_ms, floor.source) == (
        100.0,
        100.0,
        100.0,
        "configured",
    )


def test_longtail_shows_in_the_floor_tail() -> None:
    floor = floor_from_settings(
        settings(
            vehicles={"dist": "fixed", "ms": 50},
            routing={"dist": "longtail", "ms": 50, "tail_p": 0.05, "tail_ms": 400},
            promotions={"dist": "fixed", "ms": 50},
        ),
        draws=20_000,
    )
    assert floor.p50_ms == 50.0
    assert floor.p99_ms == 400.0


def test_fixed_latency_body_is_valid_for_the_simulator() -> None:
    assert UpstreamSettings().updated(fixed_latency(100)).latency.ms == 100.0


def _record(upstream: str, trace: str, delay: float) -> dict[str, object]:
    return {"upstream": upstream, "traceparent": f"00-{trace}-{'1' * 16}-01", "delay_ms": delay}


def test_floor_from_records_groups_by_trace() -> None:
    records = []
    for i in range(200):
        trace = f"{i:032x}"
        records += [
            _record("vehicles", trace, 30.0),
            _record("routing", trace, 100.0 + (i == 0) * 300),
            _record("promotions", trace, 20.0),
        ]
    floor = floor_from_records(records)
    assert floor is not None
    assert floor.source == "records" and floor.offers == 200
    assert floor.p50_ms == 100.0 and floor.p999_ms == 400.0


def test_floor_from_records_needs_traceparents() -> None:
    records = [{"upstream": "routing", "traceparent": None, "delay_ms": 1.0}] * 500
    assert floor_from_records(records) is None
