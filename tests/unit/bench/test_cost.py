"""The request-path cost parts (`pricingctl bench metrics-cost`, `log-cost`,
`span-cost`, and the culprit costs in `timing-cost`) run and report every path as a
number (tiny counts: a smoke test, not a measurement). The relations checked hold by
construction on any machine: a flush per offer is the flush of 100 offers divided by
100, an offer's 22 observations cost more than one, a path that writes nothing costs
less than one that writes the line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def run(part: str, out: Path, *flags: str) -> tuple[dict[str, Any], str]:
    """`pricingctl bench <part>`: its JSON and what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "pricingctl", "bench", part, *flags, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / f"{part.replace('-', '_')}.json").read_text())
    assert doc["command"].startswith(f"pricingctl bench {part}")
    return doc, done.stdout


def finite(values: Any) -> bool:
    return all(math.isfinite(v) and v >= 0 for v in values)


def test_metrics_cost_reports_both_paths_and_the_flush_in_both_modes(tmp_path: Path) -> None:
    doc, printed = run("metrics-cost", tmp_path, "--n", "2000")
    assert set(doc["us"]) == {"mmap", "memory"}
    for mode, ours in doc["us"].items():
        for name in ("histogram observe", "direct prometheus histogram", "flush, per offer"):
            assert name in ours, ours
        assert finite(ours.values()), ours
        assert math.isclose(ours["flush, per offer"], ours["flush after 100 offers"] / 100)
        assert 0 < ours["histogram observe"] < ours["one offer (21 observations)"], ours
        assert f"{mode} histogram observe" in " ".join(printed.split())


def test_log_cost_reports_the_three_paths(tmp_path: Path) -> None:
    doc, printed = run("log-cost", tmp_path, "--n", "200")
    costs = doc["us"]
    direct = costs["access line, direct (default)"]
    assert costs["access line, through logging"] > 0
    assert costs["access line off"] < direct, costs
    assert "access line off" in printed


#: What span-cost times: the hub's part of each kind of request, the exporter's of each.
SPAN_COST_KINDS = {"unsampled", "live", "built", "drawn"} | {
    f"export_{kind}" for kind in ("live", "built", "drawn")
}


def test_span_cost_part_writes_every_kind_of_request(tmp_path: Path) -> None:
    doc, printed = run("span-cost", tmp_path, "--quick")
    assert set(doc["best_us"]) == SPAN_COST_KINDS
    assert "spans built off the hub" in printed


def test_span_cost_measures_every_kind_of_request_and_the_export() -> None:
    """``bench.span_cost`` with tiny counts: each kind of request is timed, and the
    exporter's part is timed on what each kind queued (live SDK spans, and records whose
    four spans it builds, or eleven with the wait drawn), none exported behind its back."""
    from bench import span_cost

    best = span_cost.measure(requests=4, repeat=2)  # a second round: after a take
    assert set(best) == SPAN_COST_KINDS
    assert all(math.isfinite(v) and v > 0 for v in best.values()), best
    assert "spans built off the hub" in span_cost.render(best)
    assert "wait drawn" in span_cost.render(best)


def test_culprit_costs_cover_every_span_for_each_switch_log() -> None:
    """`timing-cost`'s culprit figures: each switch log (the Python reference, and the
    compiled one when built), every span of switches, a cost each."""
    from bench.timing_cost import CULPRIT_SPANS, culprit_costs
    from tracing.timing import native

    costs = culprit_costs(reps=3, repeat=1)
    assert set(costs) == ({"python", "compiled"} if native.module is not None else {"python"})
    for by_span in costs.values():
        assert list(by_span) == [str(n) for n in CULPRIT_SPANS]
        assert all(math.isfinite(us) and us > 0 for us in by_span.values()), by_span
