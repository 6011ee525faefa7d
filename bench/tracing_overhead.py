"""`pricingctl bench tracing-overhead`: the same mixed load with tracing off, at its
production default, and with every request traced.

The modes (the pools' PRICING_TRACING via bench.spans.env_for, and Envoy's sampling
percentage from the route config the stack's pools and Envoy read):

- ``off``: PRICING_TRACING=off; no spans, no gevent timing, no histograms (Envoy
  still has its tracer: it is part of the edge config in every mode);
- ``default``: PRICING_TRACING=full with the route config's ``[tracing]
  sample_percent`` (routes.toml: 1 %), what `pricingctl up` runs in production;
- ``100``: PRICING_TRACING=full with sample_percent = 100 (a derived routes.toml):
  a span for every request and every upstream call;
- ``spans`` (only with ``--modes``): the old spans-only switch, default sampling.

Runs alternate the modes on the split layout. "default" minus "off" is the whole
price of leaving tracing on: spans for the sampled 1 % (and slow requests), the
Flask instrumentation of every request, the gevent timing of every call and the
per-request histograms; it is reported per offer and per upstream call. Whether
tracing was really on is checked, not assumed: at 1 % few spans are written, but
every upstream call of a traced mode carries a traceparent (the pools propagate
the trace id of unsampled requests too); a traced mode whose upstreams saw no
traceparent and wrote no span is reported as not active.
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

SCHEMA = "pricingservice.bench.tracing-overhead/2"
# Mode -> (PRICING_TRACING, Envoy's sample percent; None = the route config's).
MODE_SETTINGS: dict[str, tuple[str, float | None]] = {
    "off": ("off", None),
    "default": ("full", None),
    "100": ("full", 100.0),
    "spans": ("spans", None),
}
DEFAULT_MODES = ("off", "default", "100")
# Upstream calls per offer (vehicles, routing, promotions).
CALLS_PER_OFFER = 3


def arms(modes: Sequence[str] = DEFAULT_MODES) -> tuple[Arm, ...]:
    out = []
    for mode in modes:
        switch, percent = MODE_SETTINGS[mode]
        name = "100 %" if mode == "100" else mode
        out.append(
            Arm(
                mode,
                Layout.SPLIT,
                switch,
                f"tracing {name}, repeat {{repeat}}/{{repeats}}",
                f"tracing-{mode}-r{{repeat}}",
                sample_percent=percent,
            )
        )
    return tuple(out)


ARMS = arms()


def run_tracing_overhead(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    workers: int,
    repeats: int,
    deadline_s: float,
    run_dir: Path,
    modes: Sequence[str] = DEFAULT_MODES,
    progress: Progress | None = None,
) -> dict[str, Any]:
    if "off" not in modes:
        raise ValueError("the modes must include off (every difference is taken from it)")
    runs: dict[str, list[RunResult]] = {m: [] for m in modes}
    for arm, result in run_interleaved(
        config,
        settings,
        arms(modes),
        workers=workers,
        repeats=repeats,
        run_dir=run_dir,
        progress=progress,
    ):
        runs[arm.key].append(result)
    per_mode = {mode: _mode_json(rs, deadline_s) for mode, rs in runs.items()}
    evidence = {}
    for mode, rs in runs.items():
        if mode == "off":
            continue
        spans = sum(len(r.spans.calls) for r in rs if r.spans is not None)
        traced = sum(r.traced_upstream_calls or 0 for r in rs)
        evidence[mode] = {
            "client_spans_in_span_file": spans,
            "upstream_calls_with_traceparent": traced,
            "active": spans > 0 or traced > 0,
        }
    active = all(e["active"] for e in evidence.values())
    off_cpu = per_mode["off"]["io_cpu_ms_per_offer"]
    off_o = per_mode["off"]["offers"]
    overhead: dict[str, Any] = {}
    for mode, m in per_mode.items():
        if mode == "off":
            continue
        cpu = m["io_cpu_ms_per_offer"]
        diff = _diff(cpu, off_cpu)
        overhead[mode] = {
            "offers_p50_ms": round(m["offers"]["p50_ms"] - off_o["p50_ms"], 3),
            "offers_p99_ms": round(m["offers"]["p99_ms"] - off_o["p99_ms"], 3),
            "io_cpu_ms_per_offer": diff,
            "io_cpu_per_offer_over_off": _ratio(cpu, off_cpu),
            # Everything tracing adds, spread over the offer's upstream calls.
            "us_per_upstream_call": None
            if diff is None
            else round(diff * 1000 / CALLS_PER_OFFER, 2),
            "share_of_offer_cpu": None if diff is None or not cpu else round(diff / cpu, 4),
        }
    settings_json = {
        **settings.to_json(workers=workers, repeats=repeats),
        "modes": {
            m: {
                "PRICING_TRACING": MODE_SETTINGS[m][0],
                "sample_percent": MODE_SETTINGS[m][1] or config.tracing.sample_percent,
            }
            for m in modes
        },
        "calls_per_offer": CALLS_PER_OFFER,
    }
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "settings": settings_json,
        "tracing_active": active,
        "evidence": evidence,
        "modes": per_mode,
        "overhead": overhead,
        "overhead_contains": (
            "mode minus off, on the io pool: spans for the sampled requests (and slow ones) "
            "and their export, the Flask instrumentation of every request, the gevent "
            "timing of every upstream call and inbound request, the per-request histograms"
        ),
    }
    if not active:
        inactive = [m for m, e in evidence.items() if not e["active"]]
        doc["note"] = (
            f"tracing mode(s) {', '.join(inactive)} left no spans and no traceparent at the "
            "upstreams: the pools did not honour the switch, so those columns measured off."
        )
    return doc


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


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
        ratio = doc["overhead"].get(mode, {}).get("io_cpu_per_offer_over_off")
        lines.append(
            f"tracing {mode}: offers p50 {o['p50_ms']:.1f} ms p99 {o['p99_ms']:.1f} ms, "
            f"io CPU {m['io_cpu_ms_per_offer']} ms/offer"
            + ("" if ratio is None else f" ({ratio:.3f} x off)")
        )
    for mode, o in doc["overhead"].items():
        lines.append(
            f"tracing {mode} - off: {o['io_cpu_ms_per_offer']} ms io CPU per offer, "
            f"{o['us_per_upstream_call']} us per upstream call, "
            f"{o['share_of_offer_cpu']} of an offer's CPU"
        )
    lines.append(f"(the difference contains {doc['overhead_contains']})")
    if not doc["tracing_active"]:
        lines.append(f"note: {doc['note']}")
    lines.append(f"wrote {out / 'tracing_overhead.json'}")
    return "\n".join(lines)
