"""The two request-path cost benchmarks run and report every path as a number (tiny
counts: a smoke test, not a measurement). The relations checked hold by construction on
any machine: a flush per offer is the flush of 100 offers divided by 100, an offer's 22
observations cost more than one, a path that writes nothing costs less than one that
writes the line."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# "<label>   <value> us": the label may hold digits and commas, the value ends the line.
LINE = re.compile(r"^(?P<label>.*\S)\s+(?P<us>\d+(?:\.\d+)?) us$")


def run(module: str, n: str) -> dict[str, float]:
    """label -> microseconds, for every line the benchmark printed."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--n", n], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    costs = {}
    for line in done.stdout.splitlines():
        match = LINE.match(line)
        assert match, f"not a '<label> <value> us' line: {line!r}"
        costs[" ".join(match["label"].split())] = float(match["us"])
    assert all(math.isfinite(v) and v >= 0 for v in costs.values()), costs
    return costs


def test_metrics_cost_reports_both_paths_and_the_flush_in_both_modes() -> None:
    costs = run("bench.metrics_cost", "2000")
    for mode in ("mmap", "memory"):
        ours = {k.removeprefix(f"{mode} "): v for k, v in costs.items() if k.startswith(mode)}
        for name in ("histogram observe", "direct prometheus histogram", "flush, per offer"):
            assert name in ours, costs
        # Printed to 2 decimals: within their rounding.
        assert abs(ours["flush, per offer"] - ours["flush after 100 offers"] / 100) <= 0.01
        assert 0 < ours["histogram observe"] < ours["one offer (21 observations)"], costs


def test_log_cost_reports_the_three_paths() -> None:
    costs = run("bench.log_cost", "200")
    direct = costs["access line, direct (default)"]
    assert costs["access line, through logging"] > 0
    assert costs["access line off"] < direct, costs


def test_span_cost_measures_every_kind_of_request_and_the_export() -> None:
    """``bench.span_cost`` with tiny counts: each kind of request is timed, and the
    exporter's part is timed on the spans the requests queued (live and built alike: two
    sampled requests' four spans per round), none exported behind its back."""
    from bench import span_cost

    best = span_cost.measure(requests=4, repeat=2)  # a second round: after a take
    assert set(best) == {"unsampled", "live", "built", "export"}
    assert all(math.isfinite(v) and v > 0 for v in best.values()), best
    assert "spans built at its end" in span_cost.render(best)
