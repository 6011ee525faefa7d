"""The two request-path cost benchmarks run and print every line (tiny counts: a smoke
test, not a measurement)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run(module: str, n: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, "--n", n], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_metrics_cost_prints_both_paths_and_the_flush_in_both_modes() -> None:
    out = run("bench.metrics_cost", "2000")
    for mode in ("mmap", "memory"):
        for name in ("histogram observe", "direct prometheus histogram", "flush, per offer"):
            assert any(line.startswith(mode) and name in line for line in out.splitlines()), out


def test_log_cost_prints_the_three_paths() -> None:
    out = run("bench.log_cost", "200")
    for name in ("direct (default)", "through logging", "access line off"):
        assert name in out, out
