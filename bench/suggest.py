"""`pricingctl bench suggest`: what following `routes suggest` buys the offers.

The stack starts on a wrong route config (rideshare quotes and batches in the io pool,
next to the offers) under the benchmark's mixed load; `pricingctl routes suggest
--from-metrics --write` scrapes the pools meanwhile and rewrites that config. The stack
then starts again on the written config under the same load, and `suggest` looks again.
Reported: the moves proposed each time, and the offers' client p99 and hub-wait p99
(per offer route, from the evidence table: an upper bucket bound) before and after,
with their ratios. The ratios are figures of this machine at that moment (a busy
neighbour moves them), which is why they live here and not in a pass/fail test;
tests/integration/test_suggest.py runs the same `observe` and asserts the moves.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.cpu import OTHER
from bench.progress import Progress
from bench.run import (
    DRAIN_EST_S,
    STACK_START_EST_S,
    BenchError,
    LoadSettings,
    RunResult,
    measure,
    running_stack,
)
from bench.traffic import BATCH_KINDS, CPU_KINDS, OFFER_KINDS, kind_rates, targets_for
from routing.load import load_routes
from routing.model import Layout, RouteConfig
from routing.write import write_routes
from stack.launch import PROJECT_ROOT, Stack

# The benchmark's mix at a rate this shared 2-core machine sustains next to other
# sessions' tests: offers (bike + scooter), rideshare quotes (~30 ms CPU), batches of 4.
RATES: Mapping[str, float] = {"offers": 60.0, "cpu": 15.0, "batch": 1.5}
WARMUP_S = 5.0
DURATION_S = 22.0
QUICK_WARMUP_S = 3.0
QUICK_DURATION_S = 14.0
# `suggest` starts scraping this long after the warm-up began (the generator's start-up
# and the warm-up are over) and scrapes again one window later, inside the measured
# window, with time to spare before the load stops.
_GENERATOR_START_S = 3.0
_SPARE_S = 7.0
OFFER_ROUTES = ("offers.bike", "offers.scooter")
# What the wrong config moves into the io pool (the cpu pool keeps only the API
# description: a pool must serve some route).
WRONG_PLACEMENT: Mapping[str, str] = {
    "offers.rideshare": "io",
    "quotes.batch": "io",
    "meta.openapi": "cpu",
}


@dataclass(frozen=True)
class Observed:
    """One stack's run: the load's result and what `routes suggest` said meanwhile."""

    offers: RunResult
    suggest: subprocess.CompletedProcess[str]

    def offers_p99_ms(self, deadline_s: float) -> float:
        return self.offers.offers(deadline_s=deadline_s).p99_ms

    @property
    def neighbours_pct(self) -> float:
        """Other processes' CPU during the measured window, % of one core."""
        return self.offers.cpu[OTHER].cpu_pct


def settings_for(
    *, quick: bool = False, rates: Mapping[str, float] | None = None, seed: int = 1
) -> LoadSettings:
    return LoadSettings(
        group_rates_rps={**RATES, **(rates or {})},
        duration_s=QUICK_DURATION_S if quick else DURATION_S,
        warmup_s=QUICK_WARMUP_S if quick else WARMUP_S,
        upstream_ms=100.0,
        seed=seed,
    )


def window_s(settings: LoadSettings) -> float:
    """The scrape window `suggest` measures, inside the load's measured window."""
    return max(2.0, settings.duration_s - _GENERATOR_START_S - _SPARE_S)


def min_requests(settings: LoadSettings, window: float | None = None) -> int:
    """Requests a route needs in the window (default `window_s`) to count as evidence:
    30 % of the batches (the rarest kind) the window sees, at least 3 (5 for the default
    12 s window: plenty for a route costing ~100 ms a request)."""
    window = window_s(settings) if window is None else window
    batches = settings.group_rates_rps.get("batch", 0.0) * window
    return max(3, int(0.3 * batches))


def planned_s(settings: LoadSettings) -> float:
    """Two stacks, each started, loaded and drained."""
    return 2 * (STACK_START_EST_S + settings.total_s + DRAIN_EST_S)


def wrong_config(routes: RouteConfig, run_dir: Path) -> RouteConfig:
    """*routes* with rideshare and batch in the io pool, written to *run_dir*."""
    config = replace(
        routes,
        routes=tuple(
            replace(r, pool=WRONG_PLACEMENT.get(r.endpoint, r.pool)) for r in routes.routes
        ),
    )
    return write_routes(config, run_dir / "routes.toml")


def suggest_cmd(
    stack: Stack,
    config: RouteConfig,
    settings: LoadSettings,
    *extra: str,
    window: float | None = None,
) -> list[str]:
    """`pricingctl routes suggest` on the pools' /metrics over *window* seconds (default
    `window_s`: a driver that starts it inside a warm load may give the whole load)."""
    window = window_s(settings) if window is None else window
    urls = [stack.pool_url(p.name) + config.meta.metrics for p in config.pools]
    return [
        sys.executable,
        "-m",
        "pricingctl",
        "routes",
        "suggest",
        "--config",
        config.source,
        "--from-metrics",
        *urls,
        "--window",
        f"{window:g}",
        "--min-requests",
        str(min_requests(settings, window)),
        *extra,
    ]


def observe(config: RouteConfig, run_dir: Path, settings: LoadSettings, *extra: str) -> Observed:
    """Start the split stack on *config* (tracing on), drive the mixed load, and run
    `pricingctl routes suggest` (with *extra* flags) on the pools meanwhile."""
    with running_stack(config, Layout.SPLIT, run_dir, tracing="full") as stack:
        listener = stack.config.listener.address
        kinds = OFFER_KINDS + CPU_KINDS + BATCH_KINDS
        targets = targets_for(stack.config, listener.host, listener.port, kinds)
        window = window_s(settings)
        done: dict[str, subprocess.CompletedProcess[str]] = {}

        def run_suggest() -> None:
            done["suggest"] = subprocess.run(
                suggest_cmd(stack, config, settings, *extra),
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                timeout=window + 60,
                check=False,
            )

        timer = threading.Timer(settings.warmup_s + _GENERATOR_START_S, run_suggest)
        timer.start()
        try:
            rates = kind_rates(settings.group_rates_rps)
            result = measure(stack, targets, rates, settings, run_dir, label="run")
        finally:
            timer.join(timeout=window + 90)
    if "suggest" not in done:
        raise BenchError(f"routes suggest did not finish ({run_dir})")
    return Observed(result, done["suggest"])


def moves(out: str) -> dict[str, str]:
    """endpoint -> proposed pool, for the rows of the evidence table that say (move)."""
    found = {}
    for line in out.splitlines():
        if line.endswith("(move)"):
            parts = line.split()
            found[parts[0]] = parts[-2]
    return found


def hub_wait_p99_ms(out: str, endpoint: str) -> float | None:
    """A route's hub-wait p99 from the evidence table (an upper bucket bound), or None
    when the table has no row or no figure for it."""
    row = next((line for line in out.splitlines() if line.startswith(f"{endpoint} ")), None)
    if row is None:
        return None
    try:
        return float(row.split()[6])
    except (IndexError, ValueError):
        return None


def _checked(seen: Observed, step: str) -> Observed:
    """`suggest` exits 0 (nothing to change) or 1 (a change proposed); else it failed."""
    if seen.suggest.returncode not in (0, 1):
        raise BenchError(
            f"routes suggest failed on the {step} config (exit {seen.suggest.returncode})\n"
            + seen.suggest.stderr.strip()
        )
    return seen


def _ratio(before: float | None, after: float | None) -> float | None:
    return before / after if before is not None and after else None


def run_suggest_bench(
    routes: RouteConfig,
    settings: LoadSettings,
    *,
    deadline_s: float,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Wrong config, suggest --write, restart on what it wrote: the results document."""
    one_s = planned_s(settings) / 2
    wrong = wrong_config(routes, run_dir / "wrong")
    if progress is not None:
        progress.step("suggest: the wrong config under load, suggest --write", one_s)
    before = _checked(observe(wrong, run_dir / "wrong", settings, "--write"), "wrong")
    written = load_routes(Path(wrong.source))
    if progress is not None:
        progress.step("suggest: the written config under the same load", one_s)
    after = _checked(observe(written, run_dir / "suggested", settings), "written")

    def side(seen: Observed, config: RouteConfig) -> dict[str, Any]:
        return {
            "config": config.source,
            "suggest_exit": seen.suggest.returncode,
            "moves": moves(seen.suggest.stdout),
            "offers_p99_ms": seen.offers_p99_ms(deadline_s),
            "hub_wait_p99_ms": {r: hub_wait_p99_ms(seen.suggest.stdout, r) for r in OFFER_ROUTES},
            "other_processes_cpu_pct": seen.neighbours_pct,
            "suggest_output": seen.suggest.stdout,
        }

    wrong_side, written_side = side(before, wrong), side(after, written)
    return {
        "settings": {
            "group_rates_rps": dict(settings.group_rates_rps),
            "duration_s": settings.duration_s,
            "warmup_s": settings.warmup_s,
            "upstream_ms": settings.upstream_ms,
            "window_s": window_s(settings),
            "min_requests": min_requests(settings),
            "deadline_ms": deadline_s * 1000,
        },
        "wrong": wrong_side,
        "suggested": written_side,
        "ratios": {
            "offers_p99": _ratio(wrong_side["offers_p99_ms"], written_side["offers_p99_ms"]),
            "hub_wait_p99": {
                r: _ratio(wrong_side["hub_wait_p99_ms"][r], written_side["hub_wait_p99_ms"][r])
                for r in OFFER_ROUTES
            },
        },
    }


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def write_suggest(doc: dict[str, Any], out: Path) -> str:
    """suggest.json; returns the summary to print."""
    from bench.report import write_json

    path = write_json(out / "suggest.json", doc)
    wrong, done, ratios = doc["wrong"], doc["suggested"], doc["ratios"]
    moved = ", ".join(f"{e} -> {p}" for e, p in sorted(wrong["moves"].items())) or "none"
    waits = "; ".join(
        f"{r} {_fmt(wrong['hub_wait_p99_ms'][r], '.0f')} -> "
        f"{_fmt(done['hub_wait_p99_ms'][r], '.0f')} ms ({_fmt(ratios['hub_wait_p99'][r], '.2f')} x)"
        for r in OFFER_ROUTES
    )
    return (
        f"suggested moves: {moved}; on the written config: "
        f"{', '.join(sorted(done['moves'])) or 'no move'}\n"
        f"offers p99 {wrong['offers_p99_ms']:.0f} -> {done['offers_p99_ms']:.0f} ms "
        f"({_fmt(ratios['offers_p99'], '.2f')} x); hub-wait p99 (bucket bounds): {waits}\n"
        f"other processes {wrong['other_processes_cpu_pct']:.0f} % / "
        f"{done['other_processes_cpu_pct']:.0f} % of a core\n"
        f"wrote {path}"
    )
