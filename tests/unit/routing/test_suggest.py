"""Placement and sizing from measurements (fakes shaped like tracing.readback.usage.RouteUsage):
the committed config stays put, a CPU-heavy route in the io pool moves, the thresholds
and the sizing are the ones stated."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from routing.load import load_routes
from routing.model import RouteConfig
from routing.suggest import (
    CPU,
    IO,
    Thresholds,
    render_diff,
    render_evidence,
    render_sizing,
    suggest,
)
from routing.write import write_routes

WINDOW_S = 10.0


@dataclass(frozen=True)
class Fake:
    route: str
    requests: float
    cpu_ms: float
    network_ms: float = 0.0
    caused_s: float = 0.0
    window_s: float = WINDOW_S
    hub_wait_p99_s: float | None = 0.01

    @property
    def cpu_s(self) -> float:
        return self.requests * self.cpu_ms / 1000

    @property
    def network_s(self) -> float:
        return self.requests * self.network_ms / 1000

    @property
    def wall_s(self) -> float:
        return self.cpu_s + self.network_s + self.hub_wait_s

    @property
    def hub_wait_s(self) -> float:
        return self.requests * 0.002


def mixed_load() -> list[Fake]:
    """50 offers/s (2 ms CPU, 100 ms network), 20 quotes/s (30 ms CPU), 1 batch/s."""
    return [
        Fake("GET /v1/offers/bike", 250, 2.0, 100.0),
        Fake("GET /v1/offers/scooter", 250, 2.0, 100.0),
        Fake("POST /v1/offers/rideshare", 200, 30.0, caused_s=4.0),
        Fake("POST /v1/quotes/batch", 25, 120.0, caused_s=1.0),
    ]


@pytest.fixture(scope="module")
def committed() -> RouteConfig:
    return load_routes()


def wrong(config: RouteConfig) -> RouteConfig:
    """Rideshare and batch in the io pool, next to the offers (the API description in
    the cpu pool: a pool must serve some route)."""
    routes = tuple(
        replace(r, pool="cpu" if r.endpoint == "meta.openapi" else "io") for r in config.routes
    )
    return replace(config, routes=routes)


def test_the_committed_placement_is_kept(committed: RouteConfig) -> None:
    s = suggest(committed, mixed_load())
    assert s.moves == ()
    assert not s.changed
    assert render_diff(s) == ""
    kinds = {e.endpoint: e.kind for e in s.routes}
    assert kinds["offers.rideshare"] == CPU and kinds["offers.bike"] == IO
    assert kinds["regions.list"] is None  # not measured: stays


def test_cpu_heavy_routes_in_the_io_pool_move_to_the_cpu_pool(committed: RouteConfig) -> None:
    s = suggest(wrong(committed), mixed_load())
    assert {(e.endpoint, e.pool, e.proposed_pool) for e in s.moves} == {
        ("offers.rideshare", "io", "cpu"),
        ("quotes.batch", "io", "cpu"),
    }
    assert s.changed
    moved = {r.endpoint: r.pool for r in s.proposed.routes}
    assert moved["offers.rideshare"] == "cpu" and moved["offers.bike"] == "io"
    diff = render_diff(s)
    assert '-pool = "io"\n+pool = "cpu"' in diff.replace(" \n", "\n")
    table = render_evidence(s)
    assert "offers.rideshare" in table and "cpu (move)" in table
    assert "CPU-heavy at >= 5 ms" in table


def test_the_threshold_is_configurable(committed: RouteConfig) -> None:
    s = suggest(wrong(committed), mixed_load(), Thresholds(cpu_heavy_ms=50.0))
    assert [e.endpoint for e in s.moves] == ["quotes.batch"]  # 120 ms; rideshare 30 ms


def test_a_route_with_too_few_requests_stays(committed: RouteConfig) -> None:
    load = [*mixed_load()[:3], Fake("POST /v1/quotes/batch", 5, 120.0)]
    s = suggest(wrong(committed), load)
    assert [e.endpoint for e in s.moves] == ["offers.rideshare"]


def test_cpu_pool_size_is_littles_law_at_the_target_utilisation(committed: RouteConfig) -> None:
    # 20 quotes/s x 30 ms + 2.5 batches/s x 120 ms = 0.9 busy workers; at 60 %: 1.5 -> 2.
    s = suggest(committed, mixed_load())
    cpu = next(p for p in s.pools if p.pool == "cpu")
    assert cpu.busy_slots == pytest.approx(0.9)
    assert cpu.workers_needed == 2 and cpu.workers == 2
    # Twice the rate: 1.8 busy workers -> 3 needed; the pool grows, Envoy's breakers with it.
    s = suggest(committed, mixed_load(), rates_rps={"offers.rideshare": 40, "quotes.batch": 5})
    cpu = next(p for p in s.pools if p.pool == "cpu")
    assert cpu.workers == 3 and cpu.max_connections == 3
    assert s.changed and s.moves == ()
    assert "workers = 3" in render_diff(s)
    assert "target utilisation 60 %" in render_sizing(s)


def test_a_pool_on_several_hosts_is_sized_per_replica(committed: RouteConfig) -> None:
    # 4x the quotes of the Little's-law test: 3.6 busy workers over two replicas is 1.8
    # each -> 3 workers per replica at 60 %, not the 6 one host would need.
    cpu = committed.pool("cpu")
    two_hosts = replace(cpu, binds=(cpu.bind, replace(cpu.bind, host="127.0.0.3")))
    config = replace(
        committed, pools=tuple(two_hosts if p.name == "cpu" else p for p in committed.pools)
    )
    rates = {"offers.rideshare": 80, "quotes.batch": 10}
    sized = next(p for p in suggest(config, mixed_load(), rates_rps=rates).pools if p.pool == "cpu")
    assert sized.busy_slots == pytest.approx(1.8)
    assert sized.workers == 3


def test_io_connections_cover_every_request_held_to_its_timeout(committed: RouteConfig) -> None:
    # 50 offers/s held 0.5 s each = 25 greenlets over 2 workers at 60 %: 21 each.
    small = replace(
        committed,
        pools=tuple(
            replace(p, worker_connections=10) if p.name == "io" else p for p in committed.pools
        ),
    )
    s = suggest(small, mixed_load())
    io = next(p for p in s.pools if p.pool == "io")
    assert io.connections_needed == 21 and io.worker_connections == 21
    # Spare capacity is never taken away.
    io = next(p for p in suggest(committed, mixed_load()).pools if p.pool == "io")
    assert io.worker_connections == 1000


def test_no_pool_of_the_right_kind_makes_a_new_one(committed: RouteConfig, tmp_path: Path) -> None:
    only_io = replace(wrong(committed), pools=tuple(p for p in committed.pools if p.name == "io"))
    s = suggest(only_io, mixed_load())
    new = next(p for p in s.pools if p.new)
    assert new.pool == "cpu" and new.kind == CPU and new.workers >= 2
    assert {e.proposed_pool for e in s.moves} == {"cpu"}
    # The writer writes it and the loader takes it back: a valid route config.
    assert write_routes(s.proposed, tmp_path / "routes.toml") == s.proposed
    pool = s.proposed.pool("cpu")
    assert pool.worker_connections == 1 and pool.bind.port not in {
        p.bind.port for p in (*only_io.pools, only_io.shared)
    }


def test_rates_must_name_app_routes(committed: RouteConfig) -> None:
    with pytest.raises(ValueError, match="nope"):
        suggest(committed, mixed_load(), rates_rps={"nope": 1.0})
