"""`routes synth` (bench.synth): the synthetic service is reproducible, valid, served
only by the benchmark's app entry (bench.pool_app, through the service's factory), and
scored against its truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import pool_app
from bench.routes_scale import config_figures, placement_score
from bench.run import BenchError
from bench.synth import synthesize
from pricing import create_app
from pricingctl.main import main
from routing.errors import RouteConfigError
from routing.load import load_routes
from routing.model import RouteConfig
from tests.unit.support.gateway import FakeGateway
from toolkit.contract import POOL_ENV, ROUTES_ENV


def test_the_same_seed_writes_the_same_service(tmp_path: Path) -> None:
    a = synthesize(40, 5, tmp_path / "a")
    b = synthesize(40, 5, tmp_path / "b")
    assert a.routes_path.read_text() == b.routes_path.read_text()
    assert a.spec == b.spec and a.profile == b.profile
    assert synthesize(40, 6, tmp_path / "c").spec != a.spec


def test_its_routes_its_truth_and_its_zipf_profile(tmp_path: Path, routes: RouteConfig) -> None:
    synth = synthesize(300, 1, tmp_path)
    config = load_routes(synth.routes_path)
    assert len(config.routes) == len(routes.routes) + 300
    assert all(config.route_for_endpoint(r.endpoint) == r for r in routes.routes)
    endpoints = synth.spec["endpoints"]
    for name in synth.misplaced:
        assert endpoints[name]["kind"] == "cpu"
        assert config.route_for_endpoint(name).pool == "io"
    for name, body in endpoints.items():
        route = config.route_for_endpoint(name)
        if body["kind"] == "io":
            assert route.pool == "io" and 1 <= sum(map(len, body["stages"])) <= 4
            assert set(body["latency"]) == {u for stage in body["stages"] for u in stage}
        else:
            assert 10 <= body["cpu_ms"] <= 60
    shares = sorted(synth.profile.values(), reverse=True)
    assert sum(shares) == pytest.approx(1.0)
    assert sum(shares[:30]) > 0.6  # a few routes carry most of the traffic
    assert json.loads((tmp_path / "profile.json").read_text()) == synth.profile


def test_the_service_does_not_know_the_synthetic_endpoints_the_bench_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`routes check` (the service's endpoints) refuses the synthetic routes; the
    benchmark's own check, which knows the spec's endpoints, passes them."""
    synth = synthesize(8, 2, tmp_path)
    assert main(["routes", "check", "--config", str(synth.routes_path)]) == 1
    assert "synth.r0001" in capsys.readouterr().err
    figures = config_figures(synth.config, synth)
    assert figures["routes"] == len(synth.config.routes)
    with pytest.raises(BenchError, match=r"synth\.r0001"):
        config_figures(synth.config)


def test_a_pool_serves_the_generic_views_and_the_service_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench's app entry, as gunicorn loads it, hands the spec's views to
    `create_app`; the factory alone serves none of them."""
    from gunicorn.util import import_app

    synth = synthesize(12, 4, tmp_path)
    with pytest.raises(RouteConfigError, match=r"synth\.r0001"):
        create_app("io", config=synth.config, gateway=FakeGateway())
    monkeypatch.setenv(POOL_ENV, "io")
    monkeypatch.setenv(ROUTES_ENV, str(synth.routes_path))
    app = import_app(pool_app.entry(spec=synth.spec_path))
    gateway = FakeGateway()
    app.extensions["pricing.gateway"] = gateway
    client = app.test_client()
    io_name = next(n for n, b in synth.spec["endpoints"].items() if b["kind"] == "io")
    io_route = synth.config.route_for_endpoint(io_name)
    answer = client.get(io_route.path)
    assert answer.status_code == 200, answer.json
    stages = synth.spec["endpoints"][io_name]["stages"]
    assert answer.json["calls"] == len(gateway.calls) == sum(map(len, stages))
    misplaced = synth.config.route_for_endpoint(synth.misplaced[0])
    assert client.get(misplaced.path).json["cpu_ms"] > 0  # served in io, as the truth says
    assert client.get("/v1/regions").status_code == 200
    spec = client.get("/openapi.json").json
    assert io_route.path in spec["paths"]


def test_placement_is_scored_against_the_truth(tmp_path: Path) -> None:
    synth = synthesize(40, 1, tmp_path)
    io_name = next(n for n, b in synth.spec["endpoints"].items() if b["kind"] == "io")
    moves = {synth.misplaced[0]: "cpu", io_name: "cpu"}
    score = placement_score(synth, moves)
    assert score["found"] == 1 and score["misplaced"] == len(synth.misplaced)
    assert score["io_moved"] == [io_name]


def test_synth_refuses_a_service_too_small_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:  # refused at the door: a bad flag value
        main(["routes", "synth", "--routes", "2", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
