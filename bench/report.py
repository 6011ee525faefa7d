"""results.json for the shared/split comparison, its targets, and its tables.

Every repeat is reported, and the per-layout numbers are computed over the pooled
samples of all repeats (not the best repeat, not a mean of percentiles).
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu import OTHER
from bench.floor import Floor
from bench.run import LAYOUTS, BenchError, RunResult
from bench.spans import SpanTimings
from bench.stats import GroupStats, Rows, lag_summary_ms
from bench.traffic import CPU_KINDS, OFFER_KINDS
from toolkit.contract import BENCH_PREFLIGHT_ENV
from tracing.readback.breakdown import PARTS, UNEXPLAINED, Breakdown

SCHEMA = "pricingservice.bench.compare/1"
NA = "n/a"

# Targets from the issue (checked by the benchmark, never by a timed test).
SPLIT_P99_OVER_FLOOR_MAX = 1.25
SPLIT_WITHIN_DEADLINE_MIN = 1.0
SHARED_OVER_SPLIT_P99_MIN = 3.0
# Generator and simulator must stay small for the measurement to be fair.
HELPER_CPU_PCT_MAX = 5.0
# The time breakdown explains every band, and the parts add up per offer.
UNEXPLAINED_PCT_MAX = 5.0
ADDS_UP_MIN = 0.99
# Before a run, the machine's CPU use is sampled this long; above the threshold the
# run still happens, with a warning (the neighbours show in every run's CPU table).
PREFLIGHT_S = 3.0
BUSY_WARNING_PCT = 30.0


def machine_info() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem_gib = round(kb / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


@dataclass(frozen=True)
class Target:
    name: str
    wanted: str
    measured: str
    met: bool | None  # None: not applicable in this run (e.g. N != 3)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "target": self.wanted,
            "measured": self.measured,
            "met": self.met,
        }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def cpu_use_mean(runs: Sequence[RunResult]) -> dict[str, float]:
    """Mean CPU % of one core per component over the runs."""
    names: list[str] = []
    for r in runs:
        names += [n for n in r.cpu if n not in names]
    return {n: round(_mean([r.cpu[n].cpu_pct for r in runs if n in r.cpu]), 2) for n in names}


def _spans(runs: Sequence[RunResult]) -> SpanTimings | None:
    calls = [c for r in runs if r.spans is not None for c in r.spans.calls]
    return SpanTimings(tuple(calls)) if calls else None


def tracing_summary(runs: Sequence[RunResult]) -> dict[str, object]:
    spans = _spans(runs)
    if spans is None:
        return {"scheduling_delay_ms": NA, "network_duration_ms": NA, "spans": 0}
    return spans.summary()


def time_breakdown(runs: Sequence[RunResult], floor: Floor, deadline_s: float) -> dict[str, Any]:
    """Where an offer's time went, for the median offer and the slowest 1 %.

    With tracing: per traced offer, tracing.readback.breakdown's parts (they tile Envoy's span
    when Envoy's span was read, else the server span), the band's mean of each part and
    of "unexplained"; the share of traced offers whose parts add up (Breakdown.adds_up),
    and unexplained as a % of the band's time (mean |unexplained| / mean total, so that
    over- and under-counting do not cancel). Bands are cut by the client's latency over
    every offer in the window; only the traced ones among them are broken down.
    Without tracing: the upstream floor vs everything else.
    """
    lat: list[float] = []
    trace_ids: list[str] = []
    for r in runs:
        start, end = r.window_s
        s = r.samples
        wanted = {i for i, k in enumerate(s.kinds) if k in OFFER_KINDS}
        for i, (k, t) in enumerate(zip(s.kind, s.scheduled_s, strict=True)):
            if k in wanted and start <= t < end:
                x = s.latency_s[i] if s.status[i] == 200 else max(s.latency_s[i], deadline_s)
                lat.append(x * 1000)
                trace_ids.append(s.trace_id[i] if s.trace_id else "")
    order = sorted(range(len(lat)), key=lat.__getitem__)
    n = len(order)
    bands = {
        "median offer": order[int(n * 0.45) : max(int(n * 0.55), int(n * 0.45) + 1)],
        "slowest 1 %": order[min(int(n * 0.99), n - 1) :],
    }
    by_trace: dict[str, Breakdown] = {b.trace_id: b for r in runs for b in (r.breakdowns or ())}
    traced = [by_trace[t] for t in trace_ids if t and t in by_trace]
    if traced:
        bars: dict[str, dict[str, float]] = {}
        unexplained_pct: dict[str, float | None] = {}
        band_offers: dict[str, dict[str, int]] = {}
        for name, idx in bands.items():
            mine = [by_trace[trace_ids[i]] for i in idx if trace_ids[i] in by_trace]
            band_offers[name] = {"offers": len(idx), "traced": len(mine)}
            if not mine:
                bars[name] = {}
                unexplained_pct[name] = None
                continue
            names = [p for p in PARTS if any(p in b.parts for b in mine)]
            bar = {p: round(_mean([b.parts.get(p, 0.0) * 1000 for b in mine]), 2) for p in names}
            bar[UNEXPLAINED] = round(_mean([b.unexplained_s * 1000 for b in mine]), 2)
            bars[name] = bar
            total = sum(b.total_s for b in mine)
            unexplained_pct[name] = (
                round(100 * sum(abs(b.unexplained_s) for b in mine) / total, 2) if total else None
            )
        adding = sum(1 for b in traced if b.adds_up())
        return {
            "source": "tracing (tracing.readback.breakdown)",
            "total": "Envoy's span"
            if any("envoy before pool" in b.parts for b in traced)
            else "the server span (no Envoy spans read)",
            "bars": bars,
            "band_offers": band_offers,
            "unexplained_pct": unexplained_pct,
            "adds_up": {
                "traced_offers": len(traced),
                "offers_in_window": n,
                "add_up": adding,
                "share": round(adding / len(traced), 4),
            },
        }
    bars = {}
    for name, idx in bands.items():
        total = _mean([lat[i] for i in idx])
        up = floor.p50_ms if name == "median offer" else floor.p99_ms
        bars[name] = {
            "upstream floor": round(min(up, total), 2),
            "everything else (Envoy, queueing, scheduling delay, handling)": round(
                max(0.0, total - up), 2
            ),
        }
    return {"source": "upstream floor (no tracing)", "bars": bars}


def run_json(run: RunResult, deadline_s: float) -> dict[str, object]:
    all_rows = run.rows(OFFER_KINDS + CPU_KINDS)
    return {
        "repeat": run.repeat + 1,
        "layout": run.layout,
        "pools": dict(run.pools),
        "offers": run.offers(deadline_s).to_json(),
        "cpu": run.cpu_endpoint().to_json(),
        "cpu_use": {k: v.to_json() for k, v in run.cpu.items()},
        "generator_lag_ms": lag_summary_ms(all_rows),
        "connections_opened": run.connections_opened,
        "envoy": dict(run.envoy),
        "upstream_floor": run.floor.to_json(),
        "tracing": tracing_summary([run]),
    }


def _ratio(a: float, b: float) -> float | None:
    """a / b, or None when b is 0 (JSON has no NaN or infinity)."""
    return round(a / b, 3) if b > 0 else None


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} x"


def comparison_json(
    runs: Sequence[RunResult],
    *,
    workers: int,
    repeats: int,
    deadline_s: float,
    command: str,
    machine: Mapping[str, object],
) -> dict[str, Any]:
    settings = runs[0].settings
    floor = runs[0].floor
    # The floor is the same in every run unless tracing measured it per run: use the
    # highest p99 seen (the least flattering comparison for the split layout).
    floor = max((r.floor for r in runs), key=lambda f: f.p99_ms, default=floor)
    layouts: dict[str, Any] = {}
    for layout in LAYOUTS:
        mine = [r for r in runs if r.layout == layout.value]
        if not mine:
            continue
        offers = GroupStats.of(Rows.pooled([r.rows(OFFER_KINDS) for r in mine]), deadline_s)
        cpu = GroupStats.of(
            Rows.pooled([r.rows(CPU_KINDS) for r in mine]),
            failure_floor_s=settings.cpu_timeout_s,
        )
        layouts[layout.value] = {
            "pools": dict(mine[0].pools),
            "offers": offers.to_json(),
            "cpu": cpu.to_json(),
            "cpu_use_pct": cpu_use_mean(mine),
            "tracing": tracing_summary(mine),
            "time_breakdown": time_breakdown(mine, floor, deadline_s),
            "repeats": [run_json(r, deadline_s) for r in sorted(mine, key=lambda r: r.repeat)],
        }
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "machine": dict(machine),
        "settings": {
            **settings.to_json(workers=workers, repeats=repeats),
            "upstream_latency": f"every upstream fixed {settings.upstream_ms:g} ms",
            "upstream_ms": settings.upstream_ms,
            "cpu_timeout_s": settings.cpu_timeout_s,
            "deadline_ms": round(deadline_s * 1000),
            "client_timeout_s": settings.timeout_s,
            "seed": settings.seed,
            "tracing": settings.tracing,
            "order": [f"{r.repeat + 1}:{r.layout}" for r in runs],
        },
        "upstream_floor_ms": round(floor.p99_ms, 3),
        "upstream_floor": floor.to_json(),
        "layouts": layouts,
    }
    doc["ratios"] = _ratios(layouts)
    doc["targets"] = [t.to_json() for t in targets(doc, workers)]
    return doc


def _ratios(layouts: Mapping[str, Any]) -> dict[str, object]:
    if "shared" not in layouts or "split" not in layouts:
        return {}
    shared, split = layouts["shared"], layouts["split"]
    per_repeat = [
        _ratio(a["offers"]["p99_ms"], b["offers"]["p99_ms"])
        for a, b in zip(shared["repeats"], split["repeats"], strict=False)
    ]
    return {
        "offers_p99_shared_over_split": _ratio(
            shared["offers"]["p99_ms"], split["offers"]["p99_ms"]
        ),
        "offers_p99_shared_over_split_per_repeat": per_repeat,
        "cpu_rps_split_over_shared": _ratio(split["cpu"]["rps"], shared["cpu"]["rps"]),
        "cpu_p99_split_over_shared": _ratio(split["cpu"]["p99_ms"], shared["cpu"]["p99_ms"]),
    }


def targets(doc: Mapping[str, Any], workers: int) -> list[Target]:
    """Every target of the comparison against what this run measured."""
    layouts = doc["layouts"]
    return [
        *_split_targets(layouts, float(doc["upstream_floor_ms"])),
        *_ratio_targets(doc, workers),
        *_breakdown_targets(layouts),
        *_helper_targets(layouts),
    ]


def _split_targets(layouts: Mapping[str, Any], floor_p99: float) -> list[Target]:
    out: list[Target] = []
    split = layouts.get("split")
    if split is not None:
        p99 = split["offers"]["p99_ms"]
        limit_ms = SPLIT_P99_OVER_FLOOR_MAX * floor_p99
        out.append(
            Target(
                "split offers p99 vs upstream floor p99",
                f"<= {SPLIT_P99_OVER_FLOOR_MAX} x floor ({limit_ms:.0f} ms)",
                f"{p99:.1f} ms = {p99 / floor_p99:.2f} x floor",
                p99 <= SPLIT_P99_OVER_FLOOR_MAX * floor_p99,
            )
        )
        within = split["offers"]["within_deadline"]
        out.append(
            Target(
                "split offers within the deadline",
                "100 %",
                f"{within * 100:.3f} % of {split['offers']['count']}",
                within >= SPLIT_WITHIN_DEADLINE_MIN,
            )
        )
    return out


def _ratio_targets(doc: Mapping[str, Any], workers: int) -> list[Target]:
    out: list[Target] = []
    layouts = doc["layouts"]
    ratio = doc.get("ratios", {}).get("offers_p99_shared_over_split")
    if ratio is not None:
        per_repeat = doc["ratios"]["offers_p99_shared_over_split_per_repeat"]
        measured = f"{ratio:.2f} x at N = {workers} (per repeat: "
        measured += ", ".join(_x(x) for x in per_repeat) + ")"
        shared_within = layouts["shared"]["offers"]["within_deadline"]
        if shared_within < 0.99:
            # Envoy answers 504 at the route timeout: the shared p99 cannot exceed it,
            # so the ratio understates how far apart the layouts are.
            measured += (
                f"; the shared p99 is capped by the {doc['settings']['deadline_ms']} ms "
                f"route timeout: only {shared_within * 100:.1f} % of shared offers made it"
            )
        out.append(
            Target(
                "offers p99 shared / split",
                f">= {SHARED_OVER_SPLIT_P99_MIN:g} x at N = 3",
                measured,
                ratio >= SHARED_OVER_SPLIT_P99_MIN if workers == 3 else None,
            )
        )
    return out


def _breakdown_targets(layouts: Mapping[str, Any]) -> list[Target]:
    out: list[Target] = []
    for name, lay in layouts.items():
        bd = lay.get("time_breakdown", {})
        if "adds_up" not in bd:
            continue
        for band, pct in bd["unexplained_pct"].items():
            out.append(
                Target(
                    f"{name} {band}: unexplained share of the band's time",
                    f"<= {UNEXPLAINED_PCT_MAX:g} %",
                    "no traced offer" if pct is None else f"{pct:.2f} % ({bd['total']})",
                    None if pct is None else pct <= UNEXPLAINED_PCT_MAX,
                )
            )
        a = bd["adds_up"]
        out.append(
            Target(
                f"{name}: traced offers whose parts add up (max(1 ms, 3 %))",
                f">= {ADDS_UP_MIN * 100:g} %",
                f"{a['share'] * 100:.2f} % of {a['traced_offers']} traced "
                f"({a['offers_in_window']} offers in the window)",
                a["share"] >= ADDS_UP_MIN,
            )
        )
    return out


def _helper_targets(layouts: Mapping[str, Any]) -> list[Target]:
    out: list[Target] = []
    for component in ("loadgen", "simulator"):
        worst = max(
            (
                float(r["cpu_use"][component]["cpu_pct"])
                for lay in layouts.values()
                for r in lay["repeats"]
                if component in r["cpu_use"]
            ),
            default=0.0,
        )
        out.append(
            Target(
                f"{component} CPU (worst run)",
                f"<= {HELPER_CPU_PCT_MAX:g} % of a core",
                f"{worst:.1f} %",
                worst <= HELPER_CPU_PCT_MAX,
            )
        )
    return out


# --- tables ------------------------------------------------------------------------------


def _fmt_pct(x: float) -> str:
    return f"{x * 100:.2f} %" if x < 0.9999 else ("100 %" if x >= 1 else f"{x * 100:.3f} %")


def _failures(stats: Mapping[str, Any]) -> str:
    f = stats.get("failures") or {}
    return ", ".join(f"{k} {v}" for k, v in f.items()) or "-"


def _cpu_cells(cpu_use: Mapping[str, Any]) -> str:
    parts = []
    for name, value in cpu_use.items():
        pct = value["cpu_pct"] if isinstance(value, Mapping) else value
        parts.append(f"{name} {float(pct):.0f}")
    return ", ".join(parts)


def markdown_tables(doc: Mapping[str, Any]) -> str:
    """Offers, CPU endpoint and CPU use: one row per repeat, then the pooled row."""
    deadline = doc["settings"]["deadline_ms"]
    offers = [
        f"| layout | repeat | offers | p50 ms | p95 ms | p99 ms | p99.9 ms | max ms "
        f"| within {deadline} ms | failures |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cpu = [
        "| layout | repeat | offered/s | served/s | p50 ms | p99 ms | failures |",
        "|---|---|---|---|---|---|---|",
    ]
    use = [
        "| layout | repeat | CPU % of one core, per component |",
        "|---|---|---|",
    ]
    for name, lay in doc["layouts"].items():
        for r in lay["repeats"]:
            o, c = r["offers"], r["cpu"]
            offers.append(
                f"| {name} | {r['repeat']} | {o['count']} | {o['p50_ms']:.1f} | {o['p95_ms']:.1f} "
                f"| {o['p99_ms']:.1f} | {o['p999_ms']:.1f} | {o['max_ms']:.1f} "
                f"| {_fmt_pct(o['within_deadline'])} | {_failures(o)} |"
            )
            cpu.append(
                f"| {name} | {r['repeat']} | {c['offered_rps']:.1f} | {c['rps']:.1f} "
                f"| {c['p50_ms']:.1f} | {c['p99_ms']:.1f} | {_failures(c)} |"
            )
            use.append(f"| {name} | {r['repeat']} | {_cpu_cells(r['cpu_use'])} |")
        o, c = lay["offers"], lay["cpu"]
        offers.append(
            f"| **{name}** | **all** | {o['count']} | {o['p50_ms']:.1f} | {o['p95_ms']:.1f} "
            f"| **{o['p99_ms']:.1f}** | {o['p999_ms']:.1f} | {o['max_ms']:.1f} "
            f"| **{_fmt_pct(o['within_deadline'])}** | {_failures(o)} |"
        )
        cpu.append(
            f"| **{name}** | **all** | {c['offered_rps']:.1f} | **{c['rps']:.1f}** "
            f"| {c['p50_ms']:.1f} | **{c['p99_ms']:.1f}** | {_failures(c)} |"
        )
        use.append(f"| **{name}** | **mean** | {_cpu_cells(lay['cpu_use_pct'])} |")
    floor = doc["upstream_floor"]
    return "\n".join(
        [
            f"Offers (bike + scooter; upstream floor p50 {floor['p50_ms']:.0f} ms, "
            f"p99 {floor['p99_ms']:.0f} ms, {floor['source']}):",
            "",
            *offers,
            "",
            "CPU endpoint (POST /v1/offers/rideshare):",
            "",
            *cpu,
            "",
            f"CPU use ('{OTHER}' = the rest of the machine):",
            "",
            *use,
        ]
    )


def targets_table(doc: Mapping[str, Any]) -> str:
    lines = ["| target | wanted | measured | met |", "|---|---|---|---|"]
    for t in doc["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(f"| {t['name']} | {t['target']} | {t['measured']} | {met} |")
    return "\n".join(lines)


def tracing_lines(doc: Mapping[str, Any]) -> str:
    lines = []
    for name, lay in doc["layouts"].items():
        t = lay["tracing"]
        if t["scheduling_delay_ms"] == NA:
            lines.append(f"{name}: gevent.scheduling.delay n/a, gevent.network.duration n/a")
        else:
            s, n = t["scheduling_delay_ms"], t["network_duration_ms"]
            lines.append(
                f"{name}: gevent.scheduling.delay p50 {s['p50']:.2f} ms p99 {s['p99']:.2f} ms; "
                f"gevent.network.duration p50 {n['p50']:.2f} ms p99 {n['p99']:.2f} ms "
                f"({t['spans']} spans)"
            )
    return "\n".join(lines)


def breakdown_lines(doc: Mapping[str, Any]) -> str:
    lines = []
    for name, lay in doc["layouts"].items():
        bd = lay.get("time_breakdown", {})
        if "adds_up" not in bd:
            continue
        a = bd["adds_up"]
        lines.append(
            f"{name}: {a['share'] * 100:.2f} % of {a['traced_offers']} traced offers add up "
            f"(total: {bd['total']})"
        )
        for band, bar in bd["bars"].items():
            parts = ", ".join(f"{p} {v:.1f}" for p, v in bar.items())
            lines.append(
                f"  {band} (unexplained {bd['unexplained_pct'][band]} % of its time): {parts} ms"
            )
    return "\n".join(lines)


def summary_text(doc: Mapping[str, Any]) -> str:
    ratios = doc.get("ratios", {})
    head = [
        f"shared vs split, N = {doc['settings']['workers']} processes, "
        f"{doc['settings']['repeats']} repeat(s) x {doc['settings']['duration_s']:g} s, "
        f"rates {doc['settings']['rates_rps']}",
    ]
    if ratios:
        head.append(
            f"offers p99 shared/split = {_x(ratios['offers_p99_shared_over_split'])}; "
            f"CPU endpoint served/s split/shared = {_x(ratios['cpu_rps_split_over_shared'])}, "
            f"p99 split/shared = {_x(ratios['cpu_p99_split_over_shared'])}"
        )
    return "\n\n".join(
        [
            "\n".join(head),
            markdown_tables(doc),
            "Tracing:\n" + tracing_lines(doc),
            *(["Time breakdown:\n" + b] if (b := breakdown_lines(doc)) else []),
            targets_table(doc),
        ]
    )


def offer_latencies_ms(runs: Sequence[RunResult], layout: str, deadline_s: float) -> list[float]:
    """Pooled offer latencies of one layout (for the plots); failures at the deadline
    or later, as in the percentiles."""
    out: list[float] = []
    for r in runs:
        if r.layout == layout:
            out += [x * 1000 for x in r.rows(OFFER_KINDS).effective_latency_s(deadline_s)]
    return sorted(out)


# --- writing a part's results -------------------------------------------------------------


def write_json(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def preflight_s() -> float:
    """How long the machine is watched before a benchmark: PREFLIGHT_S, or the seconds
    in BENCH_PREFLIGHT_ENV (the test suite's smoke runs take a short look)."""
    text = os.environ.get(BENCH_PREFLIGHT_ENV, "")
    if not text:
        return PREFLIGHT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 60:
        raise BenchError(f"{BENCH_PREFLIGHT_ENV}={text!r}: seconds above 0 and at most 60 expected")
    return seconds


def machine_before_start() -> dict[str, object]:
    """The machine before a benchmark: hardware, and how busy the neighbours are."""
    from bench.cpu import machine_busy_pct

    machine = machine_info()
    busy = machine_busy_pct(preflight_s())
    machine["busy_before_start_pct_of_one_core"] = round(busy, 1)
    if busy > BUSY_WARNING_PCT:
        print(
            f"pricingctl bench: warning: other processes use {busy:.0f} % of one core before "
            f"the benchmark starts; results will be noisier and capacities lower "
            f"(each run reports their share as 'other processes')",
            file=sys.stderr,
        )
    return machine


def write_comparison(
    results: Sequence[RunResult],
    *,
    out: Path,
    workers: int,
    repeats: int,
    deadline_s: float,
    command: str,
    machine: Mapping[str, object],
    replotted_by: str | None = None,
) -> str:
    """results.json, results.md and the three PNGs of a finished comparison; returns
    the summary to print."""
    from bench import plots

    doc = comparison_json(
        results,
        workers=workers,
        repeats=repeats,
        deadline_s=deadline_s,
        command=command,
        machine=machine,
    )
    if replotted_by is not None:
        doc["replotted_by"] = replotted_by
    settings = results[0].settings
    write_json(out / "results.json", doc)
    (out / "results.md").write_text(summary_text(doc) + "\n", encoding="utf-8")
    title_runs = f"{repeats} repeat(s) x {settings.duration_s:g} s, pooled"
    plots.latency_cdf(
        {lay: offer_latencies_ms(results, lay, deadline_s) for lay in doc["layouts"]},
        out / "offers_latency_cdf.png",
        title=f"Offers latency, {workers} processes: shared pool vs split pools ({title_runs}); "
        f"upstreams fixed {settings.upstream_ms:g} ms",
        floor_p99_ms=doc["upstream_floor_ms"],
        deadline_ms=deadline_s * 1000,
    )
    breakdowns = {lay: v["time_breakdown"] for lay, v in doc["layouts"].items()}
    first = next(iter(breakdowns.values()))
    how = (
        f"every part of {first['total']} (tracing.readback.breakdown)"
        if str(first["source"]).startswith("tracing")
        else "no tracing: the upstream floor vs everything else"
    )
    plots.time_breakdown(
        breakdowns, out / "offers_time_breakdown.png", title=f"Where offer time went - {how}"
    )
    plots.cpu_by_component(
        {lay: v["cpu_use_pct"] for lay, v in doc["layouts"].items()},
        out / "cpu_by_component.png",
        title=f"CPU by component, mean over repeats ({workers} processes in each layout)",
    )
    return f"{summary_text(doc)}\n\nwrote {out / 'results.json'}, results.md and 3 PNGs in {out}"
