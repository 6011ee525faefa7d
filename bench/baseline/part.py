"""`pricingctl bench baseline`: the project's io pool against the stock stacks a team
runs today, in one run.

One stack with ONE io worker (tracing at its default, then off), and beside it the two
stock apps (``gevent_app``, ``asyncio_app``: one worker each), all on the stack's
upstream simulator at a fixed latency, every side exporting to one OTLP sink. Each
side's capacity comes first: ``io-capacity``'s search (``bench.io_capacity.search`` and
its pass rule) on that side alone, tracing on. Then, at each rate (by default half and
nine tenths of the stock gevent stack's capacity), the three sides are driven one
after another, the order rotating from rate to rate, each by the project's own
open-loop generator straight to its worker (no Envoy for anyone), that worker alone on
a core of its own and everything else on the other(s), as ``io-capacity`` pins its io
worker. After each window the side is left to go idle (a saturated side works through
its queue after the load stopped). Tracing "on" is the generator's ``traceparent`` on
every request with the sampled flag on 1 in 100: what Envoy decides for the project,
and what the stock stacks' parent-based sampler follows.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.baseline.sink import COUNT_PATH, running_sink
from bench.cpu import Snapshot, usage
from bench.io_capacity import (
    SERVED_FRACTION_MIN,
    cpu_ms_per_offer,
    search,
    step_passed,
    step_rates,
)
from bench.progress import Progress
from bench.run import (
    DRIVER,
    STACK_START_EST_S,
    BenchError,
    LoadSettings,
    measure,
    pin_pids,
    pool_workers,
    prepared_config,
    running_stack,
)
from bench.stats import GroupStats
from bench.traffic import OFFER_KINDS, targets_for
from routing.model import Layout, RouteConfig
from stack.launch import PROJECT_ROOT, Stack
from stack.procfs import descendants
from stack.procs import Proc, StartError, free_port, port_in_use
from toolkit.contract import TRACING_ENV, UPSTREAM_URL_ENV
from toolkit.fetch import fetch
from tracing.settings import OTLP_TRACES_ENDPOINT_ENV, SDK_DISABLED_ENV

SCHEMA = "pricingservice.bench.baseline/1"
SAMPLED_PCT = 1.0
PROJECT, GEVENT, ASYNCIO = "project", "gevent", "asyncio"
SIDES = (PROJECT, GEVENT, ASYNCIO)
#: The process each side's CPU is read from (the stack's name for it).
COMPONENT = {PROJECT: "pool-io", GEVENT: "stock-gevent", ASYNCIO: "stock-asyncio"}
DESCRIPTION = {
    PROJECT: "this project's io pool (gunicorn + gevent, its own client and tracing)",
    GEVENT: "Flask on gunicorn gevent, requests, contrib Flask + requests instrumentation",
    ASYNCIO: "FastAPI on uvicorn (uvloop, httptools), aiohttp, contrib FastAPI + "
    "aiohttp-client instrumentation",
}
TRACING = {"off": False, "1 %": True}
#: Targets: the project at its default tracing against each stock stack at 1 %.
TARGET_RATIO = {GEVENT: 0.4, ASYNCIO: 0.7}
#: The rates, as shares of the stock gevent stack's capacity at 1 %: a light load, and
#: one near its capacity.
RATE_SHARES = (0.5, 0.9)
_RATE_GRAIN = 10.0
# A side is idle again (what queued past saturation has drained) under this much of a
# core, measured over _SETTLE_POLL_S; waited for at most _SETTLE_MAX_S.
_IDLE_PCT = 10.0
_SETTLE_POLL_S = 0.5
_SETTLE_MAX_S = 30.0
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    #: Offers/s each side is driven at; None: RATE_SHARES of the gevent stack's capacity.
    rates_rps: tuple[float, ...] | None
    modes: tuple[str, ...]  # of TRACING's keys, run in this order
    capacity_steps: tuple[float, float, float] | None  # (start, step, top) offers/s
    capacity_settings: LoadSettings
    p99_limit_ms: float
    deadline_s: float


def _stock_argv(side: str, port: int) -> list[str]:
    if side == GEVENT:
        return [
            *(sys.executable, "-m", "gunicorn", "-k", "gevent", "-w", "1"),
            *("--worker-connections", "1000", "-b", f"127.0.0.1:{port}"),
            "bench.baseline.gevent_app:app",
        ]
    return [
        *(sys.executable, "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
        "bench.baseline.asyncio_app:app",
    ]


def _start_stock(stack: Stack, side: str, traced: bool, sink_url: str) -> int:
    """Start *side*'s app beside the stack (one of its processes from now on: measured,
    checked and stopped with it); returns its port."""
    port = free_port()
    env = {
        UPSTREAM_URL_ENV: stack.simulator_url,
        SDK_DISABLED_ENV: "false" if traced else "true",
        OTLP_TRACES_ENDPOINT_ENV: f"{sink_url}/v1/traces",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    log = stack.run_dir / "logs" / f"{COMPONENT[side]}.log"
    proc = Proc(COMPONENT[side], _stock_argv(side, port), log, env=env, cwd=PROJECT_ROOT).start()
    stack.procs[COMPONENT[side]] = proc
    try:
        proc.wait_ready(lambda: port_in_use("127.0.0.1", port), _START_TIMEOUT_S, "serving")
    except StartError as exc:
        raise BenchError(str(exc)) from None
    return port


class _Sides:
    """One stack and the two stock apps beside it: where each side listens, and how to
    give its worker a core of its own."""

    def __init__(self, stack: Stack, traced: bool, sink_url: str) -> None:
        self.stack = stack
        bind = stack.config.pool("io", Layout.SPLIT).bind
        self.ports = {PROJECT: bind.port}
        for side in (GEVENT, ASYNCIO):
            self.ports[side] = _start_stock(stack, side, traced, sink_url)

    def pin(self, side: str) -> bool:
        if side == PROJECT:
            pids = pool_workers(self.stack, "io")
        else:
            root = self.stack.procs[COMPONENT[side]].pid
            pids = frozenset({root, *descendants(root)})
        return pin_pids(self.stack, pids)

    def settle(self, side: str) -> None:
        """Wait until *side* is idle: a saturated side keeps working through its queue
        after the generator stopped, and would take CPU from the next window's."""
        roots = {side: self.stack.procs[COMPONENT[side]].pid}
        deadline = time.monotonic() + _SETTLE_MAX_S
        while time.monotonic() < deadline:
            before = Snapshot.take(roots)
            time.sleep(_SETTLE_POLL_S)
            used = usage(before, Snapshot.take(roots), _SETTLE_POLL_S)[side]
            if used.cpu_pct < _IDLE_PCT:
                return

    def measure(
        self, side: str, rate: float, settings: LoadSettings, run_dir: Path, run: _RunContext
    ) -> tuple[dict[str, Any], GroupStats]:
        """One window of *side* at *rate* offers/s: its stats, and its worker's CPU."""
        self.pin(side)
        targets = targets_for(self.stack.config, "127.0.0.1", self.ports[side], OFFER_KINDS)
        rates = {k: rate / len(OFFER_KINDS) for k in OFFER_KINDS}
        result = measure(
            self.stack,
            targets,
            rates,
            settings,
            run_dir,
            label=f"baseline {side} {rate:g}/s",
            progress=run.progress,
        )
        self.settle(side)
        stats = GroupStats.of(result.rows(OFFER_KINDS), run.deadline_s)
        component = COMPONENT[side]
        used = result.cpu.get(component)
        row = {
            "side": side,
            "rate_rps": rate,
            **stats.to_json(),
            "cpu_ms_per_offer": cpu_ms_per_offer(result.cpu, stats, component),
            "cpu_pct": round(used.cpu_pct, 2) if used is not None else None,
            "driver_cpu_pct": round(result.cpu[DRIVER].cpu_pct, 2),
        }
        return row, stats


@dataclass(frozen=True)
class _RunContext:
    deadline_s: float
    progress: Progress | None


def _rotated(index: int) -> tuple[str, ...]:
    """The sides in the order they run at the *index*-th rate (each goes first in turn)."""
    k = index % len(SIDES)
    return SIDES[k:] + SIDES[:k]


def _windows(
    sides: _Sides,
    rates: tuple[float, ...],
    settings: LoadSettings,
    mode: str,
    base: Path,
    run: _RunContext,
) -> list[dict[str, Any]]:
    """Every side at every rate, in this tracing mode."""
    out: list[dict[str, Any]] = []
    for i, rate in enumerate(rates):
        for side in _rotated(i):
            # The same arrivals for every side at this rate.
            seeded = replace(settings, seed=settings.seed + i)
            row, _ = sides.measure(side, rate, seeded, base / f"{side}-{rate:g}", run)
            out.append({"tracing": mode, **row})
    return out


def _capacity(sides: _Sides, plan: Plan, base: Path, run: _RunContext) -> dict[str, dict[str, Any]]:
    """io-capacity's search for each side alone (tracing as the stack's)."""
    assert plan.capacity_steps is not None
    out: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        steps: list[dict[str, Any]] = []

        def step(rate: float, side: str = side, steps: list[dict[str, Any]] = steps) -> bool:
            settings = replace(
                plan.capacity_settings,
                seed=plan.capacity_settings.seed + len(steps),
                tracing=True,
                traceparent_sampled_pct=SAMPLED_PCT,
            )
            row, stats = sides.measure(side, rate, settings, base / f"{side}-{len(steps)}", run)
            passed = step_passed(stats, plan.p99_limit_ms)
            steps.append({**row, "passed": passed})
            if run.progress is not None:
                run.progress.note(
                    f"baseline capacity {side} {rate:g}/s: p99 {stats.p99_ms:.0f} ms, "
                    f"{'pass' if passed else 'FAIL'}"
                )
            return passed

        search(step, step_rates(*plan.capacity_steps))
        passing = [s["rate_rps"] for s in steps if s["passed"]]
        out[side] = {"capacity_rps": max(passing) if passing else 0.0, "steps": steps}
    return out


def run_baseline(
    config: RouteConfig,
    settings: LoadSettings,
    plan: Plan,
    *,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Each side's capacity (tracing at 1 %), then every side at every rate with tracing
    at 1 % and off; the results as baseline.json keeps them."""
    cpu_workers = next(p.workers for p in config.pools if p.name == "cpu")
    config = prepared_config(config, cpu_workers + 1, run_dir)
    run = _RunContext(plan.deadline_s, progress)
    windows: list[dict[str, Any]] = []
    capacity: dict[str, dict[str, Any]] = {}
    exported: dict[str, Any] = {}
    rates = plan.rates_rps
    driver_cores = os.sched_getaffinity(0)
    try:
        for mode in plan.modes:
            traced = TRACING[mode]
            base = run_dir / "baseline" / ("traced" if traced else "off")
            mode_settings = replace(settings, tracing=traced, traceparent_sampled_pct=SAMPLED_PCT)
            with running_sink(base) as sink_url:
                with _sides(config, base, traced, sink_url, progress) as sides:
                    if traced and plan.capacity_steps is not None:
                        capacity = _capacity(sides, plan, base / "capacity", run)
                    rates = rates or _rates_near(capacity)
                    windows += _windows(sides, rates, mode_settings, mode, base, run)
                # Read once every side has stopped (and flushed its exporter).
                exported[mode] = fetch(f"{sink_url}{COUNT_PATH}").expect_ok().json()
    finally:
        os.sched_setaffinity(0, driver_cores)
    doc = _document(plan, rates or (), settings, windows, capacity)
    doc["exported_to_sink"] = exported
    return doc


def _rates_near(capacity: dict[str, dict[str, Any]]) -> tuple[float, ...]:
    top = float(capacity.get(GEVENT, {}).get("capacity_rps") or 0.0)
    if top <= 0:
        raise BenchError(
            "the stock gevent stack passed no capacity step: give --offer-rates to measure anyway"
        )
    return tuple(max(_RATE_GRAIN, round(top * k / _RATE_GRAIN) * _RATE_GRAIN) for k in RATE_SHARES)


@contextlib.contextmanager
def _sides(
    config: RouteConfig, base: Path, traced: bool, sink_url: str, progress: Progress | None
) -> Iterator[_Sides]:
    """The stack (its io pool at the project's default tracing when *traced*), the sink
    every side exports to, and the stock apps, stopped when the block ends."""
    if progress is not None:
        progress.step("baseline: starting the stack and the stock apps", STACK_START_EST_S)
    with running_stack(
        config,
        Layout.SPLIT,
        base,
        tracing="full" if traced else "off",
        env={OTLP_TRACES_ENDPOINT_ENV: f"{sink_url}/v1/traces"},
    ) as stack:
        yield _Sides(stack, traced, sink_url)


def _cpu(windows: list[dict[str, Any]], mode: str, rate: float, side: str) -> float | None:
    """The side's CPU per offer in that window; None when it did not serve nearly every
    offer (past saturation the CPU per offer served says nothing about the stack)."""
    for w in windows:
        if (w["tracing"], w["rate_rps"], w["side"]) == (mode, rate, side):
            value = w["cpu_ms_per_offer"]
            if value is None or w["ok"] < SERVED_FRACTION_MIN * w["count"]:
                return None
            return float(value)
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _met(ratios: list[float | None], limit: float) -> bool | None:
    """None: not measured (a mode left out, or a side that served nothing)."""
    if not ratios or any(x is None for x in ratios):
        return None
    return all(x is not None and x <= limit for x in ratios)


def _targets(rates: tuple[float, ...], windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The project at its default tracing against each stock stack at 1 % (at every
    rate), and the project untraced against the asyncio stack untraced."""
    out = []
    for side, limit in TARGET_RATIO.items():
        ratios = [
            _ratio(_cpu(windows, "1 %", r, PROJECT), _cpu(windows, "1 %", r, side)) for r in rates
        ]
        out.append(
            {
                "name": f"CPU per offer, project at its default tracing / {side} stack at 1 %",
                "target": f"<= {limit:g} x at every rate",
                "measured": ratios,
                "met": _met(ratios, limit),
            }
        )
    untraced = [
        _ratio(_cpu(windows, "off", r, PROJECT), _cpu(windows, "off", r, ASYNCIO)) for r in rates
    ]
    out.append(
        {
            "name": "CPU per offer, project tracing off / asyncio stack without OpenTelemetry",
            "target": "<= 1 x at every rate",
            "measured": untraced,
            "met": _met(untraced, 1.0),
        }
    )
    return out


def _document(
    plan: Plan,
    rates: tuple[float, ...],
    settings: LoadSettings,
    windows: list[dict[str, Any]],
    capacity: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "settings": {
            "sides": DESCRIPTION,
            "workers": "one worker per side, straight from the generator (no Envoy)",
            "cores": "the measured side's worker alone on the last core, everything else "
            "on the other(s); the sides one after another at each rate, the order rotating",
            "upstream_latency": f"every upstream fixed {settings.upstream_ms:g} ms",
            "tracing": f"off: no OpenTelemetry in the stock apps, {TRACING_ENV}=off in the "
            f"pool; 1 %: a traceparent on every request, sampled flag on {SAMPLED_PCT:g} % "
            "(by trace id), the pool at its default (full), every side exporting over "
            "OTLP/HTTP to one sink",
            "rates_rps": list(rates),
            "rates_from": "--offer-rates"
            if plan.rates_rps
            else f"{', '.join(f'{k:g}' for k in RATE_SHARES)} x the gevent stack's capacity",
            "duration_s": settings.duration_s,
            "warmup_s": settings.warmup_s,
            "capacity": None
            if plan.capacity_steps is None
            else {
                "steps_rps": list(plan.capacity_steps),
                "p99_limit_ms": plan.p99_limit_ms,
                "step_duration_s": plan.capacity_settings.duration_s,
                "step_warmup_s": plan.capacity_settings.warmup_s,
                "tracing": "1 %",
            },
        },
        "windows": windows,
        "capacity": {side: c for side, c in capacity.items()},
        "targets": _targets(rates, windows),
    }


def write_baseline(doc: dict[str, Any], out: Path) -> str:
    """baseline.json and baseline.png; returns the summary to print."""
    from bench import plots
    from bench.report import write_json

    write_json(out / "baseline.json", doc)
    plots.baseline_cpu(doc, out / "baseline.png")
    lines = []
    for w in doc["windows"]:
        lines.append(
            f"tracing {w['tracing']:>3} {w['rate_rps']:5.0f}/s {w['side']:>8}: "
            f"CPU {w['cpu_ms_per_offer']} ms/offer, p99 {w['p99_ms']:.1f} ms, "
            f"served {w['rps']:.1f}/s"
        )
    for side, c in doc["capacity"].items():
        lines.append(f"capacity {side:>8}: {c['capacity_rps']:g} offers/s (tracing at 1 %)")
    for t in doc["targets"]:
        lines.append(
            f"{t['name']}: {t['measured']} (target {t['target']}: "
            f"{ {True: 'met', False: 'NOT met', None: 'not measured'}[t['met']] })"
        )
    lines.append(f"wrote {out / 'baseline.json'}")
    return "\n".join(lines)
