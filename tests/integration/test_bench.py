"""`pricingctl bench --quick` end to end: real stacks, real load, real files.

Structure and sanity only (counts, ordered percentiles, fractions in range, PNGs
that are PNGs). Never a timing: this machine is shared and the numbers are the
benchmark's business, not the test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stack.launch import PROJECT_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PNG = b"\x89PNG\r\n\x1a\n"


def pricingctl(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pricingctl", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def assert_ordered(stats: dict[str, Any]) -> None:
    assert stats["count"] > 0
    assert 0 <= stats["ok"] <= stats["count"]
    assert stats["p50_ms"] <= stats["p95_ms"] <= stats["p99_ms"] <= stats["p999_ms"]
    assert stats["p999_ms"] <= stats["max_ms"]
    assert stats["p50_ms"] > 0


def test_bench_quick_writes_results_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = pricingctl(
        "bench", "--quick", "--out", str(out), "--run-dir", str(tmp_path / "run"), timeout_s=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["upstream_floor_ms"] > 0
    assert set(doc["layouts"]) == {"shared", "split"}
    for name, layout in doc["layouts"].items():
        offers, cpu = layout["offers"], layout["cpu"]
        assert_ordered(offers)
        assert_ordered(cpu)
        assert 0.0 <= offers["within_deadline"] <= 1.0
        assert cpu["rps"] >= 0
        assert len(layout["repeats"]) == 1
        run = layout["repeats"][0]
        components = set(run["cpu_use"])
        assert {"loadgen", "simulator", "envoy", "other processes"} <= components
        pools = {"pool-shared"} if name == "shared" else {"pool-cpu", "pool-io"}
        assert pools <= components
        assert layout["tracing"]["scheduling_delay_ms"] == "n/a"
        assert layout["time_breakdown"]["bars"]
    assert {t["name"] for t in doc["targets"]} >= {
        "split offers p99 vs upstream floor p99",
        "offers p99 shared / split",
    }
    for png in ("offers_latency_cdf.png", "offers_time_breakdown.png", "cpu_by_component.png"):
        assert (out / png).read_bytes()[:8] == PNG
    assert "| **split** | **all** |" in (out / "results.md").read_text()

    # --replot rebuilds the same numbers from the kept samples, measuring nothing.
    replot = pricingctl(
        "bench", "--replot", "--out", str(out), "--run-dir", str(tmp_path / "run"), timeout_s=120
    )
    assert replot.returncode == 0, replot.stderr[-3000:]
    again = json.loads((out / "results.json").read_text())
    assert again["layouts"] == doc["layouts"]
    assert again["targets"] == doc["targets"]


def test_bench_parts_quick(tmp_path: Path) -> None:
    out, run = tmp_path / "out", tmp_path / "run"
    common = ["--duration", "3", "--warmup", "1", "--out", str(out), "--run-dir", str(run)]
    hop = pricingctl("bench", "envoy-hop", *common, timeout_s=300)
    assert hop.returncode == 0, hop.stderr[-3000:]
    doc = json.loads((out / "envoy_hop.json").read_text())
    assert_ordered(doc["via_envoy"])
    assert_ordered(doc["direct"])
    assert (out / "envoy_hop_cdf.png").read_bytes()[:8] == PNG

    cap = pricingctl(
        "bench",
        "io-capacity",
        *common,
        "--start-rps",
        "50",
        "--step-rps",
        "50",
        "--max-rps",
        "100",
        timeout_s=300,
    )
    assert cap.returncode == 0, cap.stderr[-3000:]
    doc = json.loads((out / "io_capacity.json").read_text())
    assert doc["steps"]  # 50 and 100/s, failed steps once more, maybe a midpoint
    for step in doc["steps"]:
        assert_ordered(step)
    assert (out / "io_capacity.png").read_bytes()[:8] == PNG


def test_timing_parts_quick(tmp_path: Path) -> None:
    """The gevent timing core's accuracy and cost parts run end to end (no stack)."""
    accuracy = pricingctl(
        "bench", "timing-accuracy", "--quick", "--out", str(tmp_path), timeout_s=300
    )
    assert accuracy.returncode == 0, accuracy.stderr[-3000:]
    doc = json.loads((tmp_path / "timing_accuracy.json").read_text())
    assert doc["calls"] >= 40
    window = doc["reply_arrival_in_send_window"]
    assert 0 < window["in"] <= window["of"] <= doc["calls"]
    assert doc["call_duration_ms"]["min"] <= doc["call_duration_ms"]["max"]
    assert "reply arrival in send window" in accuracy.stdout

    cost = pricingctl("bench", "timing-cost", "--quick", "--out", str(tmp_path), timeout_s=300)
    assert cost.returncode == 0, cost.stderr[-3000:]
    doc = json.loads((tmp_path / "timing_cost.json").read_text())
    assert doc["greenlet_switch_us"]["bare"] > 0
    assert doc["send_and_read_wait_us"]["uninstrumented"] > 0
    assert set(doc["pieces_us"]) == {
        "peek_receive_timestamp",
        "begin_call_and_finish",
        "culprits_of_1ms_with_100_switches",
        "set_greenlet_label",
    }


def test_bad_flag_is_one_line_and_exit_2() -> None:
    done = pricingctl("bench", "--workers", "1", timeout_s=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
