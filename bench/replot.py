"""Rebuild a comparison's report from a finished run, without measuring again.

`pricingctl bench --replot --out DIR --run-dir RUN_DIR`: the per-run numbers that
are not samples (CPU, floor, Envoy counters, pools) come from DIR/results.json; the
samples from the generator's output kept in RUN_DIR/r<repeat>-<layout>/. Useful
after changing a plot or a summary, or to re-read an old run with today's report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.cpu import ComponentCpu
from bench.floor import Floor
from bench.loadgen import Samples
from bench.run import BenchError, LoadSettings, RunResult
from bench.spans import (
    BREAKDOWNS_FILE_NAME,
    SPANS_FILE_NAME,
    read_breakdowns,
    read_span_file,
    read_span_file_breakdowns,
)
from tracing.readback.breakdown import Breakdown


def settings_from(doc: Mapping[str, Any]) -> LoadSettings:
    s = doc["settings"]
    upstream_ms = s.get("upstream_ms")
    if upstream_ms is None:  # results.json written before the number was kept
        match = re.search(r"([0-9.]+) ms", str(s.get("upstream_latency", "")))
        upstream_ms = float(match.group(1)) if match else 100.0
    return LoadSettings(
        group_rates_rps={str(k): float(v) for k, v in s["rates_rps"].items()},
        duration_s=float(s["duration_s"]),
        warmup_s=float(s["warmup_s"]),
        seed=int(s["seed"]),
        timeout_s=float(s["client_timeout_s"]),
        upstream_ms=float(upstream_ms),
        tracing=bool(s["tracing"]),
        cpu_timeout_s=float(s.get("cpu_timeout_s", 3.0)),
    )


def runs_from_results(doc: Mapping[str, Any], run_dir: Path) -> list[RunResult]:
    """The RunResults behind a results.json, in the order they ran."""
    settings = settings_from(doc)
    repeats = int(doc["settings"]["repeats"])
    per_run = {
        (int(r["repeat"]), layout): r
        for layout, lay in doc["layouts"].items()
        for r in lay["repeats"]
    }
    runs: list[RunResult] = []
    for item in doc["settings"]["order"]:
        repeat_text, layout = str(item).split(":", 1)
        repeat = int(repeat_text)
        r = per_run[(repeat, layout)]
        stack_dir = run_dir / f"r{repeat}-{layout}"
        out_path = stack_dir / "loadgen.out.json"
        try:
            samples = Samples.from_json(json.loads(out_path.read_text())["samples"])
        except FileNotFoundError:
            raise BenchError(
                f"{out_path} is missing: --run-dir must be the run dir of the run that "
                "wrote this results.json"
            ) from None
        f = r["upstream_floor"]
        runs.append(
            RunResult(
                label=f"repeat {repeat}/{repeats} {layout}",
                layout=layout,
                repeat=repeat - 1,
                settings=settings,
                samples=samples,
                cpu={
                    name: ComponentCpu(
                        cpu_s=float(c["cpu_s"]),
                        cpu_pct=float(c["cpu_pct"]),
                        processes_pct={int(p): float(v) for p, v in c["processes_pct"].items()},
                        threads_s={t: float(v) for t, v in c.get("threads_s", {}).items()},
                    )
                    for name, c in r["cpu_use"].items()
                },
                floor=Floor(
                    float(f["p50_ms"]),
                    float(f["p99_ms"]),
                    float(f["p999_ms"]),
                    str(f["source"]),
                    int(f["offers"]),
                ),
                spans=read_span_file(stack_dir / SPANS_FILE_NAME) if settings.tracing else None,
                envoy={str(k): int(v) for k, v in r["envoy"].items()},
                connections_opened=int(r["connections_opened"]),
                window_wall_ns=(0, 0),
                pools={str(k): int(v) for k, v in r["pools"].items()},
                breakdowns=_breakdowns(stack_dir) if settings.tracing else None,
            )
        )
    return runs


def _breakdowns(stack_dir: Path) -> tuple[Breakdown, ...]:
    """A Jaeger run's kept breakdowns, else the span file's (without Envoy's spans)."""
    kept = stack_dir / BREAKDOWNS_FILE_NAME
    if kept.exists():
        return read_breakdowns(kept)
    return read_span_file_breakdowns(stack_dir / SPANS_FILE_NAME)
