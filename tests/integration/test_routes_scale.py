"""The service grown by 20 synthetic routes (`bench.synth`), started for real (Envoy,
both pools serving the generic views, the simulator) under its Zipf load plus a floor
per route: every route answers through Envoy, the metrics stay bounded, and
`routes suggest` moves exactly the CPU-heavy routes placed in the io pool on purpose.
The 300-route figures are `pricingctl bench routes-scale`'s (BENCHMARKS.md); this is
its smoke test at a small size, with the same code (`bench.routes_scale.run_service`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.routes_scale import ScaleSettings, run_service
from bench.synth import synthesize
from routing.load import load_routes

pytestmark = pytest.mark.integration


def test_twenty_synthetic_routes_are_served_measured_and_placed(tmp_path: Path) -> None:
    synth = synthesize(20, 3, tmp_path / "synth", load_routes())
    settings = ScaleSettings(routes=20, seed=3, offers_s=2.0, window_s=6.0, apply=False)
    seen = run_service(synth.config, tmp_path / "run", settings, synth)
    print(seen)
    assert seen["routes"] == 26 and seen["offers"] > 0
    placement = seen["placement"]
    assert placement["misplaced"] >= 1
    assert placement["found"] == placement["misplaced"], placement
    assert placement["io_moved"] == [] and placement["other_moves"] == []
    for pool, figures in seen["pools"].items():
        assert 0 < figures["metrics_bytes"] < 1 << 20, pool
