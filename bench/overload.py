"""`pricingctl bench overload`: goodput past capacity, for each pool, traced and not.

One split stack per tracing mode, with ONE io worker and the cpu pool as routes.toml
sizes it. Each pool in turn gets its own traffic (offers for io; rideshare quotes and
batches of four for cpu) at multiples of its capacity (`worker_rps x workers` from
routes.toml), upstreams fixed at 100 ms. Per step: goodput (200s within the route's
timeout, per second), what was shed (503s: by Envoy over the pool's limit, or by the
pool when too little budget was left) and how fast, 504s, the pool's CPU per request,
Envoy's health-check failures and ejections of the pool, and whether a worker was
replaced. The point: past capacity a pool keeps serving about its capacity, and
answers the rest at once, instead of collapsing into timeouts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.progress import Progress
from bench.run import LoadSettings, measure, prepared_config, running_stack
from bench.traffic import BATCH_KINDS, CPU_KINDS, OFFER_KINDS, targets_for
from routing.envoy import cluster_name
from routing.model import Layout, RouteConfig
from stack.launch import Stack
from stack.processes import serving_workers
from tracing.report import percentile

SCHEMA = "pricingservice.bench.overload/1"
DEFAULT_MULTIPLES = (0.5, 1.0, 1.5, 2.0, 3.0)
# Tracing modes (PRICING_TRACING) compared in one run: off, and the production default
# (full timing, Envoy sampling the route config's percentage).
MODES: Mapping[str, str] = {"off": "off", "default": "full"}
DEFAULT_MODES = ("off", "default")
POOLS = ("io", "cpu")
# The cpu pool's traffic in quote-equivalents: 80 % rideshare quotes, 20 % in batches.
BATCH_SIZE = 4
BATCH_SHARE = 0.2
OK, SHED, TIMEOUT = 200, 503, 504
# Targets (issue: overload without collapse).
GOODPUT_MIN_FRACTION = 0.9  # of capacity, at 1.5x, 2x and 3x
GOODPUT_FROM_MULTIPLE = 1.5
SHED_P99_MAX_MS = 10.0
# Envoy counters per pool read around each step (cluster.<pool>_pool.<name>).
HEALTH_FAILURES = "health_check.failure"
EJECTIONS = "outlier_detection.ejections_enforced_total"
ENVOY_SHED = "upstream_rq_pending_overflow"


@dataclass(frozen=True)
class PoolLoad:
    """What one pool gets, per unit of its capacity."""

    pool: str
    capacity_rps: float  # requests (io) or quotes (cpu) per second
    kinds: tuple[str, ...]
    # kind -> (requests/s per 1 unit/s of offered load, work units per request)
    mix: Mapping[str, tuple[float, float]]

    def rates(self, multiple: float) -> dict[str, float]:
        offered = multiple * self.capacity_rps
        return {kind: offered * per for kind, (per, _) in self.mix.items()}

    def units(self, kind: str) -> float:
        return self.mix[kind][1]


def pool_loads(config: RouteConfig) -> dict[str, PoolLoad]:
    """Each pool's capacity and traffic mix, from the (prepared) route config."""
    io, cpu = config.pool("io"), config.pool("cpu")
    if io.worker_rps is None or cpu.worker_rps is None:
        raise ValueError("bench overload needs worker_rps on the io and cpu pools")
    offers = {k: (1.0 / len(OFFER_KINDS), 1.0) for k in OFFER_KINDS}
    quotes = {
        **{k: ((1.0 - BATCH_SHARE) / len(CPU_KINDS), 1.0) for k in CPU_KINDS},
        **{k: (BATCH_SHARE / BATCH_SIZE / len(BATCH_KINDS), BATCH_SIZE) for k in BATCH_KINDS},
    }
    return {
        "io": PoolLoad("io", io.worker_rps * io.workers, OFFER_KINDS, offers),
        "cpu": PoolLoad("cpu", cpu.worker_rps * cpu.workers, CPU_KINDS + BATCH_KINDS, quotes),
    }


def run_overload(
    config: RouteConfig,
    settings: LoadSettings,
    *,
    multiples: Sequence[float] = DEFAULT_MULTIPLES,
    modes: Sequence[str] = DEFAULT_MODES,
    pools: Sequence[str] = POOLS,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    cpu_workers = config.pool("cpu").workers
    config = prepared_config(config, cpu_workers + 1, run_dir)  # io: one worker
    loads = pool_loads(config)
    timeouts = {r.endpoint: r.timeout_ms / 1000 for r in config.routes}
    steps: list[dict[str, Any]] = []
    for mode in modes:
        stack_dir = run_dir / f"overload-{mode}"
        with running_stack(config, Layout.SPLIT, stack_dir, tracing=MODES[mode]) as stack:
            listener = stack.config.listener.address
            for pool in pools:
                load = loads[pool]
                targets = targets_for(stack.config, listener.host, listener.port, load.kinds)
                for n, multiple in enumerate(multiples, 1):
                    workers_before = _workers(stack, pool)
                    run = measure(
                        stack,
                        targets,
                        load.rates(multiple),
                        replace(settings, seed=settings.seed + n),
                        stack_dir / f"{pool}-{multiple:g}x",
                        label=f"overload {pool} {multiple:g}x, tracing {mode}",
                        progress=progress,
                    )
                    step = _step(run, load, multiple, timeouts, stack, pool)
                    step.update(mode=mode, workers_replaced=workers_before != _workers(stack, pool))
                    steps.append(step)
                    if progress is not None:
                        progress.note(
                            f"overload {pool} {multiple:g}x ({mode}): goodput "
                            f"{step['goodput_rps']:.0f}/s of {load.capacity_rps:g}, shed "
                            f"{step['shed']} (p99 {step['shed_p99_ms']} ms), 504 {step['timeouts']}"
                        )
    return {
        "schema": SCHEMA,
        "settings": {
            "io_workers": config.pool("io").workers,
            "cpu_workers": cpu_workers,
            "capacity_rps": {p: loads[p].capacity_rps for p in pools},
            "upstream_latency": f"every upstream fixed {settings.upstream_ms:g} ms",
            "step_duration_s": settings.duration_s,
            "step_warmup_s": settings.warmup_s,
            "multiples": list(multiples),
            "modes": {m: MODES[m] for m in modes},
            "cpu_mix": f"{1 - BATCH_SHARE:.0%} rideshare quotes, {BATCH_SHARE:.0%} of quotes "
            f"in batches of {BATCH_SIZE}",
        },
        "steps": steps,
        "targets": target_results(steps),
    }


def _workers(stack: Stack, pool: str) -> frozenset[int]:
    proc = stack.procs.get(f"pool-{pool}")
    if proc is None:
        return frozenset()
    return frozenset(serving_workers(proc.pid, stack.config.pool(pool).bind.port))


def _step(
    run: Any,
    load: PoolLoad,
    multiple: float,
    timeouts: Mapping[str, float],
    stack: Stack,
    pool: str,
) -> dict[str, Any]:
    """One step's figures, in the pool's units (offers, or quotes for cpu)."""
    start, end = run.window_s
    window = end - start
    samples = run.samples
    good = shed = timeouts_n = other = 0.0
    requests = answered = 0
    shed_ms: list[float] = []
    for kind_i, due, latency, status in zip(
        samples.kind, samples.scheduled_s, samples.latency_s, samples.status, strict=True
    ):
        if not start <= due < end:
            continue
        kind = samples.kinds[kind_i]
        if kind not in load.kinds:
            continue
        requests += 1
        units = load.units(kind)
        answered += status == OK
        if status == OK and latency <= timeouts[kind]:
            good += units
        elif status == SHED:
            shed += 1
            shed_ms.append(latency * 1000)
        elif status == TIMEOUT:
            timeouts_n += 1
        else:
            other += 1
    pool_cpu = run.cpu.get(f"pool-{pool}")
    envoy = {
        name: run.envoy.get(f"cluster.{cluster_name(pool)}.{name}", 0)
        for name in (HEALTH_FAILURES, EJECTIONS, ENVOY_SHED)
    }
    return {
        "pool": pool,
        "multiple": multiple,
        "offered_rps": round(multiple * load.capacity_rps, 1),
        "capacity_rps": load.capacity_rps,
        "requests": requests,
        "goodput_rps": round(good / window, 1),
        "goodput_fraction": round(good / window / load.capacity_rps, 3),
        "shed": int(shed),
        "shed_by_envoy": envoy[ENVOY_SHED],
        "shed_p99_ms": round(percentile(shed_ms, 99), 2) if shed_ms else None,
        "timeouts": int(timeouts_n),
        "other_failures": int(other),
        "cpu_ms_per_request": (
            round(pool_cpu.cpu_s / answered * 1000, 3) if pool_cpu and answered else None
        ),
        "pool_cpu_pct": round(pool_cpu.cpu_pct, 1) if pool_cpu else None,
        "health_check_failures": envoy[HEALTH_FAILURES],
        "ejections": envoy[EJECTIONS],
        "healthy_at_end": _healthy(stack, pool),
    }


def _healthy(stack: Stack, pool: str) -> bool | None:
    try:
        return stack.envoy_stat(f"cluster.{cluster_name(pool)}.membership_healthy") > 0
    except (KeyError, OSError):
        return None


def target_results(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, per mode and pool, from the steps."""
    out = []
    for mode in dict.fromkeys(s["mode"] for s in steps):
        for pool in dict.fromkeys(s["pool"] for s in steps):
            mine = [s for s in steps if s["mode"] == mode and s["pool"] == pool]
            over = [s for s in mine if s["multiple"] >= GOODPUT_FROM_MULTIPLE]
            worst = min((s["goodput_fraction"] for s in over), default=None)
            shed_p99 = [s["shed_p99_ms"] for s in mine if s["shed_p99_ms"] is not None]
            unhealthy = sum(s["health_check_failures"] + s["ejections"] for s in mine)
            replaced = sum(1 for s in mine if s["workers_replaced"])
            out += [
                {
                    "mode": mode,
                    "pool": pool,
                    "name": f"goodput at >= {GOODPUT_FROM_MULTIPLE:g}x capacity",
                    "target": f">= {GOODPUT_MIN_FRACTION:.0%} of capacity",
                    "measured": None if worst is None else f"{worst:.0%} (worst step)",
                    "met": worst is not None and worst >= GOODPUT_MIN_FRACTION,
                },
                {
                    "mode": mode,
                    "pool": pool,
                    "name": "shed answers, p99",
                    "target": f"<= {SHED_P99_MAX_MS:g} ms",
                    "measured": f"{max(shed_p99):.1f} ms (worst step)" if shed_p99 else "none shed",
                    "met": all(x <= SHED_P99_MAX_MS for x in shed_p99),
                },
                {
                    "mode": mode,
                    "pool": pool,
                    "name": "health-check failures, ejections, workers replaced",
                    "target": "0",
                    "measured": f"{unhealthy} failures/ejections, {replaced} steps replaced a "
                    "worker",
                    "met": unhealthy == 0 and replaced == 0,
                },
            ]
    return out


def write_overload(doc: dict[str, Any], out: Path) -> str:
    """overload.json and overload.png; returns the summary to print."""
    from bench import plots
    from bench.report import write_json

    write_json(out / "overload.json", doc)
    if doc["steps"]:
        plots.goodput(doc["steps"], out / "overload.png")
    lines = [
        f"{'pool':4} {'mode':8} {'offered':>8} {'goodput':>8} {'shed':>6} {'shed p99':>9} "
        f"{'504':>5} {'CPU/req':>8} {'HC fail':>7} {'eject':>5}"
    ]
    for s in doc["steps"]:
        shed_p99 = "-" if s["shed_p99_ms"] is None else f"{s['shed_p99_ms']:.1f} ms"
        cpu = "-" if s["cpu_ms_per_request"] is None else f"{s['cpu_ms_per_request']:.2f} ms"
        lines.append(
            f"{s['pool']:4} {s['mode']:8} {s['multiple']:>7g}x {s['goodput_fraction']:>7.0%} "
            f"{s['shed']:>6} {shed_p99:>9} {s['timeouts']:>5} {cpu:>8} "
            f"{s['health_check_failures']:>7} {s['ejections']:>5}"
        )
    for t in doc["targets"]:
        lines.append(
            f"{t['pool']} ({t['mode']}): {t['name']}: {t['measured']} "
            f"(target {t['target']}: {'met' if t['met'] else 'NOT met'})"
        )
    lines.append(f"wrote {out / 'overload.json'}")
    return "\n".join(lines)
