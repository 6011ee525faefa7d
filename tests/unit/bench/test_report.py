"""results.json, tables and plots from synthetic runs (no stack, no network)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench import plots, report
from bench.cpu import OTHER, ComponentCpu
from bench.floor import Floor
from bench.loadgen import Samples
from bench.run import BenchError, LoadSettings, RunResult, layout_arms, run_order
from toolkit.contract import BENCH_PREFLIGHT_ENV

SETTINGS = LoadSettings({"cpu": 30.0, "offers": 100.0}, duration_s=10.0, warmup_s=2.0)
FLOOR = Floor(100.0, 100.0, 100.0, "configured", 1000)


def fake_run(layout: str, repeat: int, offer_extra_ms: float) -> RunResult:
    rng = random.Random(repeat)
    kinds = ("offers.bike", "offers.rideshare", "offers.scooter")
    s = Samples(kinds=kinds)
    t = 0.0
    while t < SETTINGS.total_s:
        k = rng.randrange(3)
        s.kind.append(k)
        s.scheduled_s.append(t)
        s.lag_s.append(0.0005)
        base = 0.030 if k == 1 else 0.100 + rng.expovariate(1000 / offer_extra_ms)
        s.latency_s.append(base)
        s.status.append(200 if rng.random() > 0.01 else 504)
        t += rng.expovariate(130.0)
    cpu = {
        "loadgen": ComponentCpu(0.3, 3.0, {1: 3.0}),
        "simulator": ComponentCpu(0.2, 2.0, {2: 2.0}),
        f"pool-{layout}": ComponentCpu(8.0, 80.0, {3: 0.1, 4: 40.0, 5: 39.9}),
        OTHER: ComponentCpu(1.0, 10.0, {}),
    }
    return RunResult(
        label=f"{layout} {repeat}",
        layout=layout,
        repeat=repeat,
        settings=SETTINGS,
        samples=s,
        cpu=cpu,
        floor=FLOOR,
        spans=None,
        envoy={"cluster.x_pool.upstream_rq_timeout": 0},
        connections_opened=10,
        window_wall_ns=(0, 1),
        pools={layout: 3},
    )


def runs() -> list[RunResult]:
    out = []
    for repeat, arm in run_order(layout_arms(False), 2):
        out.append(fake_run(arm.key, repeat, 300.0 if arm.key == "shared" else 10.0))
    return out


def test_comparison_json_has_the_promised_structure() -> None:
    doc = report.comparison_json(
        runs(), workers=3, repeats=2, deadline_s=0.5, command="pricingctl bench", machine={}
    )
    json.dumps(doc, allow_nan=False)  # strict JSON: no NaN / Infinity anywhere
    assert doc["upstream_floor_ms"] == 100.0
    for layout in ("shared", "split"):
        lay = doc["layouts"][layout]
        offers, cpu = lay["offers"], lay["cpu"]
        for key in ("p50_ms", "p99_ms", "p999_ms", "within_deadline", "count"):
            assert key in offers
        for key in ("rps", "p50_ms", "p99_ms"):
            assert key in cpu
        assert offers["p50_ms"] <= offers["p95_ms"] <= offers["p99_ms"] <= offers["p999_ms"]
        assert len(lay["repeats"]) == 2
        assert lay["tracing"]["scheduling_delay_ms"] == "n/a"
        assert "upstream floor" in lay["time_breakdown"]["bars"]["median offer"]
    assert doc["ratios"]["offers_p99_shared_over_split"] > 1
    names = [t["name"] for t in doc["targets"]]
    assert "offers p99 shared / split" in names
    text = report.summary_text(doc)
    assert "| **split** | **all** |" in text


def test_plots_are_written(tmp_path: Path) -> None:
    rs = runs()
    doc = report.comparison_json(rs, workers=3, repeats=2, deadline_s=0.5, command="x", machine={})
    paths = [
        plots.latency_cdf(
            {lay: report.offer_latencies_ms(rs, lay, 0.5) for lay in doc["layouts"]},
            tmp_path / "cdf.png",
            title="t",
            floor_p99_ms=100.0,
            deadline_ms=500.0,
        ),
        plots.time_breakdown(
            {lay: v["time_breakdown"] for lay, v in doc["layouts"].items()},
            tmp_path / "bd.png",
            title="t",
        ),
        plots.cpu_by_component(
            {lay: v["cpu_use_pct"] for lay, v in doc["layouts"].items()},
            tmp_path / "cpu.png",
            title="t",
        ),
    ]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_time_breakdown_from_tracing_breakdowns(tmp_path: Path) -> None:
    """With breakdowns joined to the offers by trace id: every part and "unexplained"
    per band, the share that adds up, unexplained as a % of the band's time."""
    from dataclasses import replace

    from tracing.readback.breakdown import UNEXPLAINED, Breakdown

    run = fake_run("split", 0, 10.0)
    s = run.samples
    s.trace_id.extend(f"{i:032x}" for i in range(len(s.kind)))
    items = []
    for i, latency in enumerate(s.latency_s):
        total = latency
        parts = {"envoy before pool": 0.0002, "network": total - 0.0012, "teardown": 0.0002}
        # Every 50th offer leaves 5 ms unexplained: it does not add up.
        if i % 50 == 0:
            parts["network"] -= 0.005
        items.append(Breakdown(s.trace_id[i], total, parts))
    run = replace(run, breakdowns=tuple(items))
    bd = report.time_breakdown([run], FLOOR, 0.5)
    assert bd["source"].startswith("tracing")
    assert bd["total"] == "Envoy's span"
    assert bd["bars"], bd  # every band below is checked: there must be some
    for band, bar in bd["bars"].items():
        assert list(bar)[-1] == UNEXPLAINED
        assert {"envoy before pool", "network", "teardown"} <= set(bar)
        assert 0 <= bd["unexplained_pct"][band] < 50
    added = bd["adds_up"]
    assert 0.97 < added["share"] < 0.99
    doc = report.comparison_json(
        [run], workers=3, repeats=1, deadline_s=0.5, command="x", machine={}
    )
    met = {t["name"]: t["met"] for t in doc["targets"]}
    assert met["split: traced offers whose parts add up (max(1 ms, 3 %))"] is False
    plots.time_breakdown({"split": bd}, tmp_path / "bd.png", title="t")
    assert (tmp_path / "bd.png").read_bytes()[:4] == b"\x89PNG"


def test_the_preflight_is_the_benchmarks_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PRICING_BENCH_PREFLIGHT_S sets how long the machine is watched first; a value that
    is not seconds in (0, 60] is one clear error, not a division by zero later."""
    monkeypatch.delenv(BENCH_PREFLIGHT_ENV, raising=False)
    assert report.preflight_s() == report.PREFLIGHT_S
    monkeypatch.setenv(BENCH_PREFLIGHT_ENV, "0.25")
    assert report.preflight_s() == 0.25
    for bad in ("0", "-1", "soon", "nan", "inf"):
        monkeypatch.setenv(BENCH_PREFLIGHT_ENV, bad)
        with pytest.raises(BenchError, match=BENCH_PREFLIGHT_ENV):
            report.preflight_s()
