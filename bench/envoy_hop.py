"""`pricingctl bench envoy-hop`: what the Envoy hop adds to an offer.

One split stack, no CPU load. The generator sends offers both through Envoy and
straight to the io pool in the same run (independent Poisson streams, half the
rate each), so both paths see the same machine, the same moment and the same
upstreams. The hop is the difference of their percentiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.progress import Progress
from bench.run import DRIVER, LoadSettings, measure, prepared_config, running_stack
from bench.stats import GroupStats
from bench.traffic import OFFER_KINDS, targets_for
from routing.model import Layout, RouteConfig

SCHEMA = "pricingservice.bench.envoy-hop/1"
HOP_P50_MAX_MS = 2.0
VIA_ENVOY = "via Envoy"
DIRECT = "direct"
_PREFIX = {VIA_ENVOY: "envoy:", DIRECT: "direct:"}


def run_envoy_hop(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    rate_rps: float,
    workers: int,
    deadline_s: float,
    run_dir: Path,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """(envoy_hop.json document, latencies in ms per path for the plot)."""
    config = prepared_config(config, workers, run_dir)
    stack_dir = run_dir / "envoy-hop"
    if progress is not None:
        progress.step("envoy-hop: starting the split stack", 8.0)
    with running_stack(config, Layout.SPLIT, stack_dir, tracing=settings.tracing) as stack:
        listener = stack.config.listener.address
        io_bind = stack.config.pool("io", Layout.SPLIT).bind
        targets = [
            replace(t, kind=_PREFIX[VIA_ENVOY] + t.kind)
            for t in targets_for(stack.config, listener.host, listener.port, OFFER_KINDS)
        ] + [
            replace(t, kind=_PREFIX[DIRECT] + t.kind)
            for t in targets_for(stack.config, io_bind.host, io_bind.port, OFFER_KINDS)
        ]
        rates = {t.kind: rate_rps / len(targets) for t in targets}
        run = measure(
            stack, targets, rates, settings, stack_dir, label="envoy-hop", progress=progress
        )
    stats: dict[str, GroupStats] = {}
    latencies: dict[str, list[float]] = {}
    for path, prefix in _PREFIX.items():
        rows = run.rows([prefix + k for k in OFFER_KINDS])
        stats[path] = GroupStats.of(rows, deadline_s)
        latencies[path] = sorted(x * 1000 for x in rows.effective_latency_s(deadline_s))
    via, direct = stats[VIA_ENVOY], stats[DIRECT]
    hop_p50 = via.p50_ms - direct.p50_ms
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "settings": {
            "rate_rps": rate_rps,
            "duration_s": settings.duration_s,
            "warmup_s": settings.warmup_s,
            "upstream_latency": f"every upstream fixed {settings.upstream_ms:g} ms",
            "cpu_load": "none",
            "workers": dict(run.pools),
        },
        "via_envoy": via.to_json(),
        "direct": direct.to_json(),
        "hop_ms": {
            "p50": round(hop_p50, 3),
            "p95": round(via.p95_ms - direct.p95_ms, 3),
            "p99": round(via.p99_ms - direct.p99_ms, 3),
        },
        "cpu_use_pct": _cpu_pct(run.cpu),
        "target": {
            "name": "Envoy hop at p50",
            "target": f"<= {HOP_P50_MAX_MS:g} ms",
            "measured": f"{hop_p50:.2f} ms",
            "met": hop_p50 <= HOP_P50_MAX_MS,
        },
    }
    return doc, latencies


def _cpu_pct(cpu: Mapping[str, Any]) -> dict[str, float]:
    return {name: round(c.cpu_pct, 2) for name, c in cpu.items() if name != DRIVER}


def write_envoy_hop(
    doc: dict[str, Any], latencies: dict[str, list[float]], out: Path, *, rate_rps: float
) -> str:
    """envoy_hop.json and envoy_hop_cdf.png; returns the summary to print."""
    from bench import plots
    from bench.report import write_json

    write_json(out / "envoy_hop.json", doc)
    plots.latency_cdf(
        latencies,
        out / "envoy_hop_cdf.png",
        title=f"Offers via Envoy vs straight to the io pool (no CPU load, "
        f"{rate_rps:g} offers/s in total): hop p50 {doc['hop_ms']['p50']:.2f} ms",
        deadline_ms=None,
    )
    v, r = doc["via_envoy"], doc["direct"]
    return (
        f"via Envoy p50 {v['p50_ms']:.2f} ms p99 {v['p99_ms']:.2f} ms; "
        f"direct p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms; "
        f"hop p50 {doc['hop_ms']['p50']:.2f} ms p99 {doc['hop_ms']['p99']:.2f} ms "
        f"(target <= 2 ms at p50: {'met' if doc['target']['met'] else 'NOT met'})\n"
        f"wrote {out / 'envoy_hop.json'} and envoy_hop_cdf.png"
    )
