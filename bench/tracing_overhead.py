"""`pricingctl bench tracing-overhead`: the same mixed load with tracing off, with
spans only, and with spans plus the gevent instrumentation (the network /
scheduling-delay split).

The switch is the pools' environment: PRICING_TRACING=off/spans/full
(bench.spans.env_for). Runs alternate the modes on the split layout. "full" minus
"spans" is the cost of the gevent instrumentation; "spans" minus "off" the cost of
OpenTelemetry spans and their export. Whether tracing was really on is checked,
not assumed: a tracing run must leave spans in the span file or traceparents at the
upstreams; otherwise the report says tracing was not active and the two columns
measure the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.progress import Progress
from bench.run import DRIVER, Arm, LoadSettings, RunResult, run_interleaved
from bench.stats import GroupStats, Rows
from bench.traffic import CPU_KINDS, OFFER_KINDS
from routing.model import Layout, RouteConfig

SCHEMA = "pricingservice.bench.tracing-overhead/1"
MODES = ("off", "spans", "full")
# Upstream calls per offer (vehicles, routing, promotions).
CALLS_PER_OFFER = 3


ARMS = tuple(
    Arm(
        mode,
        Layout.SPLIT,
        mode,
        f"tracing {mode}, repeat {{repeat}}/{{repeats}}",
        f"tracing-{mode}-r{{repeat}}",
    )
    for mode in MODES
)


def run_tracing_overhead(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    workers: int,
    repeats: int,
    deadline_s: float,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    runs: dict[str, list[RunResult]] = {m: [] for m in MODES}
    for arm, result in run_interleaved(
        config,
        settings,
        ARMS,
        workers=workers,
        repeats=repeats,
        run_dir=run_dir,
        progress=progress,
    ):
        runs[arm.key].append(result)
    per_mode = {mode: _mode_json(rs, deadline_s) for mode, rs in runs.items()}
    on = runs["full"]
    spans = sum(len(r.spans.calls) for r in on if r.spans is not None)
    traced = sum(r.traced_upstream_calls or 0 for r in on)
    active = spans > 0 or traced > 0
    off_o, on_o = per_mode["off"]["offers"], per_mode["full"]["offers"]
    spans_cpu = per_mode["spans"]["io_cpu_ms_per_offer"]
    full_cpu = per_mode["full"]["io_cpu_ms_per_offer"]
    instrumentation_ms = _diff(full_cpu, spans_cpu)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "settings": {
            **settings.to_json(workers=workers, repeats=repeats),
            "switch": "PRICING_TRACING=off/spans/full in the pools' environment",
        },
        "tracing_active": active,
        "evidence": {"spans_in_span_file": spans, "upstream_calls_with_traceparent": traced},
        "modes": per_mode,
        "overhead": {
            "offers_p50_ms": round(on_o["p50_ms"] - off_o["p50_ms"], 3),
            "offers_p99_ms": round(on_o["p99_ms"] - off_o["p99_ms"], 3),
            "io_cpu_ms_per_offer": _diff(full_cpu, per_mode["off"]["io_cpu_ms_per_offer"]),
            "spans_io_cpu_ms_per_offer": _diff(spans_cpu, per_mode["off"]["io_cpu_ms_per_offer"]),
            # The gevent instrumentation alone: full - spans.
            "instrumentation_io_cpu_ms_per_offer": instrumentation_ms,
            "instrumentation_us_per_upstream_call": (
                None
                if instrumentation_ms is None
                else round(instrumentation_ms * 1000 / CALLS_PER_OFFER, 2)
            ),
            "instrumentation_share_of_offer_cpu": (
                None
                if instrumentation_ms is None or not full_cpu
                else round(instrumentation_ms / full_cpu, 4)
            ),
        },
    }
    if not active:
        doc["note"] = (
            "PRICING_TRACING=full left no spans and no traceparent at the upstreams: the pools "
            "do not honour the switch yet, so 'on' and 'off' measured the same thing."
        )
    return doc


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def _mode_json(runs: Sequence[RunResult], deadline_s: float) -> dict[str, Any]:
    offers = GroupStats.of(Rows.pooled([r.rows(OFFER_KINDS) for r in runs]), deadline_s)
    cpu = GroupStats.of(
        Rows.pooled([r.rows(CPU_KINDS) for r in runs]),
        failure_floor_s=runs[0].settings.cpu_timeout_s,
    )
    io_cpu_s = sum(r.cpu["pool-io"].cpu_s for r in runs if "pool-io" in r.cpu)
    return {
        "offers": offers.to_json(),
        "cpu": cpu.to_json(),
        "io_cpu_ms_per_offer": round(io_cpu_s / offers.ok * 1000, 3) if offers.ok else None,
        "cpu_use_pct": {
            name: round(sum(r.cpu[name].cpu_pct for r in runs) / len(runs), 2)
            for name in runs[0].cpu
            if name != DRIVER
        },
    }


def write_tracing_overhead(doc: dict[str, Any], out: Path) -> str:
    """tracing_overhead.json; returns the summary to print."""
    from bench.report import write_json

    write_json(out / "tracing_overhead.json", doc)
    lines = []
    for mode, m in doc["modes"].items():
        o = m["offers"]
        lines.append(
            f"tracing {mode}: offers p50 {o['p50_ms']:.1f} ms p99 {o['p99_ms']:.1f} ms, "
            f"io CPU {m['io_cpu_ms_per_offer']} ms/offer"
        )
    overhead = doc["overhead"]
    lines.append(
        "gevent instrumentation (full - spans): "
        f"{overhead['instrumentation_io_cpu_ms_per_offer']} ms CPU per offer, "
        f"{overhead['instrumentation_us_per_upstream_call']} us per upstream call, "
        f"{overhead['instrumentation_share_of_offer_cpu']} of an offer's CPU"
    )
    if not doc["tracing_active"]:
        lines.append(f"note: {doc['note']}")
    lines.append(f"wrote {out / 'tracing_overhead.json'}")
    return "\n".join(lines)
