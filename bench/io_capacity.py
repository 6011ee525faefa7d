"""`pricingctl bench io-capacity`: the highest offer rate one io worker sustains.

One split stack with ONE io worker, upstreams fixed at 100 ms, offers only (no CPU
load). The offer rate steps up; a step passes when p99 <= the limit (200 ms), every
offer is a 200 within the deadline (at least 99.9 %), and the served rate keeps up
with the offered rate. The capacity is the highest rate that passed. A failed step is
run once more, on a fresh stack, before it counts (a neighbour's burst is not the io
worker's limit, and a collapse must not leak into the next step);
after a confirmed failure one step halfway back narrows the capacity down, and the
search stops (past saturation every further step only queues).

The io worker runs on a core of its own and everything else (Envoy, the load
generator, the cpu pool) on the other(s): on two cores, unpinned, the load generator
took the worker's CPU as the rate grew and the search measured the load generator.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.cpu import ComponentCpu
from bench.progress import Progress
from bench.run import (
    DRIVER,
    STACK_START_EST_S,
    LoadSettings,
    RunResult,
    measure,
    pin_pool,
    prepared_config,
    running_stack,
)
from bench.stats import GroupStats
from bench.traffic import OFFER_KINDS, Target, targets_for
from routing.model import Layout, RouteConfig
from stack.launch import Stack

SCHEMA = "pricingservice.bench.io-capacity/1"
TARGET_RPS = 700.0
WITHIN_DEADLINE_MIN = 0.999
SERVED_FRACTION_MIN = 0.99
MIN_REFINE_RPS = 20.0


def step_rates(start_rps: float, step_rps: float, max_rps: float) -> list[float]:
    rates, r = [], start_rps
    while r <= max_rps + 1e-9:
        rates.append(r)
        r += step_rps
    return rates


def step_passed(stats: GroupStats, p99_limit_ms: float) -> bool:
    """A step passes when p99 <= the limit, nearly every offer is a 200 within the
    deadline, and the served rate keeps up with the offered rate."""
    return (
        stats.p99_ms <= p99_limit_ms
        and (stats.within_deadline or 0.0) >= WITHIN_DEADLINE_MIN
        and stats.rps >= SERVED_FRACTION_MIN * stats.offered_rps
    )


def search(step: Callable[[float], bool], rates: list[float]) -> None:
    """Step the rate up until a step fails twice; then one step halfway back."""
    last_pass = 0.0
    for rate in rates:
        # On a shared machine one noisy step should not end the search: a failed
        # step is run once more (on a fresh stack) before it counts.
        if step(rate) or step(rate):
            last_pass = rate
            continue
        # Confirmed failure: one step halfway back narrows the capacity down.
        middle = (last_pass + rate) / 2
        if last_pass > 0 and rate - middle >= MIN_REFINE_RPS:
            step(middle)
        break


def _step_record(
    rate: float, run: RunResult, stats: GroupStats, passed: bool, started: int
) -> dict[str, Any]:
    """One step of the search, as results.json keeps it."""
    return {
        "rate_rps": rate,
        **stats.to_json(),
        "passed": passed,
        "stack": started,
        "cpu_use_pct": {name: round(c.cpu_pct, 2) for name, c in run.cpu.items() if name != DRIVER},
        "io_worker_cpu_ms_per_offer": cpu_ms_per_offer(run.cpu, stats),
    }


def run_io_capacity(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    start_rps: float,
    step_rps: float,
    max_rps: float,
    p99_limit_ms: float,
    direct: bool,
    deadline_s: float,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    # One io worker, whatever the route config says (cpu keeps its own count: it
    # only has to be up, it gets no traffic).
    cpu_workers = next(p.workers for p in config.pools if p.name == "cpu")
    config = prepared_config(config, cpu_workers + 1, run_dir)
    steps: list[dict[str, Any]] = []
    stacks = _FreshStacks(config, run_dir / "io-capacity", settings.tracing, direct, progress)

    def step(rate: float) -> bool:
        n = len(steps) + 1
        stack, targets = stacks.current()
        rates = {k: rate / len(OFFER_KINDS) for k in OFFER_KINDS}
        run = measure(
            stack,
            targets,
            rates,
            replace(settings, seed=settings.seed + n),
            stacks.dir / f"step-{n}",
            label=f"io-capacity {rate:g} offers/s",
            progress=progress,
        )
        stats = GroupStats.of(run.rows(OFFER_KINDS), deadline_s)
        passed = step_passed(stats, p99_limit_ms)
        steps.append(_step_record(rate, run, stats, passed, stacks.started))
        if progress is not None:
            progress.note(
                f"io-capacity {rate:g}/s: p99 {stats.p99_ms:.0f} ms, "
                f"served {stats.rps:.0f}/s, {'pass' if passed else 'FAIL'}"
            )
        if not passed:
            stacks.discard()
        return passed

    driver_cores = os.sched_getaffinity(0)
    try:
        search(step, step_rates(start_rps, step_rps, max_rps))
    finally:
        stacks.discard()
        os.sched_setaffinity(0, driver_cores)
    passing = [s["rate_rps"] for s in steps if s["passed"]]
    capacity = max(passing) if passing else 0.0
    return {
        "schema": SCHEMA,
        "settings": {
            "path": "straight to the io pool" if direct else "through Envoy",
            "io_workers": 1,
            "cores": "the io worker on one core, everything else on the other"
            if stacks.pinned
            else "not pinned (fewer than 2 cores)",
            "upstream_latency": f"every upstream fixed {settings.upstream_ms:g} ms",
            "step_duration_s": settings.duration_s,
            "step_warmup_s": settings.warmup_s,
            "p99_limit_ms": p99_limit_ms,
            "within_deadline_min": WITHIN_DEADLINE_MIN,
        },
        "capacity_rps": capacity,
        "steps": steps,
        "target": {
            "name": "one io worker's offer capacity (p99 <= limit)",
            "target": f">= {TARGET_RPS:g} offers/s",
            "measured": f"{capacity:g} offers/s",
            "met": capacity >= TARGET_RPS,
        },
    }


def cpu_ms_per_offer(
    cpu: Mapping[str, ComponentCpu], stats: GroupStats, component: str = "pool-io"
) -> float | None:
    """The *component*'s CPU in the window (the io pool's) per offer served in it."""
    pool = cpu.get(component)
    if pool is None or stats.ok == 0:
        return None
    return round(pool.cpu_s / stats.ok * 1000.0, 3)


def write_io_capacity(doc: dict[str, Any], out: Path, *, upstream_ms: float) -> str:
    """io_capacity.json and io_capacity.png; returns the summary to print."""
    from bench import plots
    from bench.report import write_json

    write_json(out / "io_capacity.json", doc)
    settings = doc["settings"]
    if doc["steps"]:
        plots.rate_steps(
            doc["steps"],
            out / "io_capacity.png",
            title=f"One io worker, upstreams fixed {upstream_ms:g} ms "
            f"({settings['path']}): capacity {doc['capacity_rps']:g} offers/s "
            f"at p99 <= {settings['p99_limit_ms']:g} ms",
            p99_limit_ms=settings["p99_limit_ms"],
        )
    lines = []
    for s in doc["steps"]:
        io_pct = s["cpu_use_pct"].get("pool-io", 0.0)
        lines.append(
            f"{s['rate_rps']:6.0f}/s offered: served {s['rps']:6.1f}/s, "
            f"p50 {s['p50_ms']:7.1f} ms, p99 {s['p99_ms']:7.1f} ms, io CPU {io_pct:5.1f} % "
            f"({s['io_worker_cpu_ms_per_offer']} ms/offer) {'pass' if s['passed'] else 'FAIL'}"
        )
    lines.append(
        f"capacity: {doc['capacity_rps']:g} offers/s "
        f"(target >= 700: {'met' if doc['target']['met'] else 'NOT met'}); "
        f"wrote {out / 'io_capacity.json'}"
    )
    return "\n".join(lines)


class _FreshStacks:
    """The stack the next step runs on, replaced by a fresh one after a failed step.

    Past saturation a step leaves state behind that would fail the next one for it:
    queued requests, and Envoy's outlier ejections of the io pool, whose length grows
    with each ejection. Passing steps share a stack (no start-up cost, warm pools).
    Mutable: it owns the running stack.
    """

    def __init__(
        self,
        config: RouteConfig,
        base_dir: Path,
        tracing: bool,
        direct: bool,
        progress: Progress | None,
    ) -> None:
        self._config = config
        self._base_dir = base_dir
        self._tracing = tracing
        self._direct = direct
        self._progress = progress
        self._exit: contextlib.ExitStack | None = None
        self._stack: Stack | None = None
        self._targets: tuple[Target, ...] = ()
        self.started = 0
        self.dir = base_dir
        self.pinned = False

    def current(self) -> tuple[Stack, tuple[Target, ...]]:
        if self._stack is None:
            self.started += 1
            self.dir = self._base_dir / f"stack-{self.started}"
            if self._progress is not None:
                self._progress.step("io-capacity: starting a split stack", STACK_START_EST_S)
            self._exit = contextlib.ExitStack()
            self._stack = self._exit.enter_context(
                running_stack(self._config, Layout.SPLIT, self.dir, tracing=self._tracing)
            )
            if self._direct:
                bind = self._stack.config.pool("io", Layout.SPLIT).bind
                host, port = bind.host, bind.port
            else:
                address = self._stack.config.listener.address
                host, port = address.host, address.port
            self._targets = targets_for(self._stack.config, host, port, OFFER_KINDS)
            self.pinned = pin_pool(self._stack, "io")
        return self._stack, self._targets

    def discard(self) -> None:
        if self._exit is not None:
            self._exit.close()
        self._exit = None
        self._stack = None
