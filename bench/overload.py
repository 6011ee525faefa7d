"""`pricingctl bench overload`: goodput past capacity, for each pool, traced and not.

One split stack per tracing mode, with ONE worker per pool. Each pool in turn gets its
own traffic (offers for io; rideshare quotes and batches of four for cpu) at multiples
of its capacity (`worker_rps` from routes.toml), upstreams fixed at 100 ms. The worker
under test runs on a core of its own and everything else (Envoy, the other pool, the
simulator, the load generator) on the other, as a pool would in production (Kubernetes
gives each worker a whole CPU): otherwise the load generator and Envoy, which work
harder the more is offered, would take the worker's CPU on a 2-core machine and the
benchmark would measure them. Per step: goodput (200s within the route's
timeout, per second), what was shed (503s: by Envoy over the pool's limit, or by the
pool when too little budget was left) and how fast, 504s, the pool's CPU per request,
Envoy's health-check failures and ejections of the pool, and whether a worker was
replaced. The point: past capacity a pool keeps serving about its capacity, and
answers the rest at once, instead of collapsing into timeouts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from bench.progress import Progress
from bench.run import (
    LoadSettings,
    measure,
    pin_pool,
    pool_workers,
    prepared_config,
    running_stack,
)
from bench.traffic import BATCH_KINDS, CPU_KINDS, OFFER_KINDS, targets_for
from routing.envoy import CDS_FILE, LDS_FILE, cluster_name, xds_version
from routing.model import Layout, RouteConfig
from stack.envoy import write_xds
from stack.launch import Stack
from toolkit.wait import wait_until
from tracing.readback.report import percentile

SCHEMA = "pricingservice.bench.overload/1"
DEFAULT_MULTIPLES = (0.5, 1.0, 1.5, 2.0, 3.0)
# Tracing modes (PRICING_TRACING) compared in one run: off, and the production default
# (full timing, Envoy sampling the route config's percentage).
MODES: Mapping[str, str] = {"off": "off", "default": "full"}
DEFAULT_MODES = ("off", "default")
POOLS = ("io", "cpu")
# How Envoy limits what reaches a pool. littles-law: the shipped circuit breakers
# (routing.sizing). adaptive: Envoy's adaptive_concurrency filter instead, with the
# breakers opened up to every greenlet; measured here only, to choose between them.
ADMISSIONS = ("littles-law", "adaptive")
DEFAULT_ADMISSIONS = ("littles-law",)
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
    admissions: Sequence[str] = DEFAULT_ADMISSIONS,
    run_dir: Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    config = prepared_config(config, 2, run_dir)  # one cpu worker, one io worker
    loads = pool_loads(config)
    steps: list[dict[str, Any]] = []
    pinned = False
    driver_cores = os.sched_getaffinity(0)
    try:
        for admission, mode in ((a, m) for a in admissions for m in modes):
            stack_dir = run_dir / f"overload-{admission}-{mode}"
            with running_stack(config, Layout.SPLIT, stack_dir, tracing=MODES[mode]) as stack:
                if admission == "adaptive":
                    use_adaptive_concurrency(stack)
                for pool in pools:
                    pinned = pin_pool(stack, pool)
                    arm = _Arm(stack, stack_dir, loads[pool], mode, admission)
                    steps += [arm.step(m, n, settings, progress) for n, m in enumerate(multiples)]
    finally:
        os.sched_setaffinity(0, driver_cores)
    return {
        "schema": SCHEMA,
        "settings": {
            "workers_per_pool": 1,
            "cores": "the worker under test on one core, everything else on the other"
            if pinned
            else "not pinned (fewer than 2 cores)",
            "capacity_rps": {p: loads[p].capacity_rps for p in pools},
            "upstream_latency": f"every upstream fixed {settings.upstream_ms:g} ms",
            "step_duration_s": settings.duration_s,
            "step_warmup_s": settings.warmup_s,
            "multiples": list(multiples),
            "modes": {m: MODES[m] for m in modes},
            "admissions": list(admissions),
            "cpu_mix": f"{1 - BATCH_SHARE:.0%} rideshare quotes, {BATCH_SHARE:.0%} of quotes "
            f"in batches of {BATCH_SIZE}",
        },
        "steps": steps,
        "targets": target_results(steps),
    }


@dataclass(frozen=True)
class _Arm:
    """One pool's steps on one running stack, in one tracing mode and admission."""

    stack: Stack
    stack_dir: Path
    load: PoolLoad
    mode: str
    admission: str

    def step(
        self, multiple: float, n: int, settings: LoadSettings, progress: Progress | None
    ) -> dict[str, Any]:
        stack, load, pool = self.stack, self.load, self.load.pool
        listener = stack.config.listener.address
        workers_before = pool_workers(stack, pool)
        run = measure(
            stack,
            targets_for(stack.config, listener.host, listener.port, load.kinds),
            load.rates(multiple),
            replace(settings, seed=settings.seed + n),
            self.stack_dir / f"{pool}-{multiple:g}x",
            label=f"overload {pool} {multiple:g}x, tracing {self.mode}, {self.admission}",
            progress=progress,
        )
        timeouts = {r.endpoint: r.timeout_ms / 1000 for r in stack.config.routes}
        step = _step(run, load, multiple, timeouts, stack, pool)
        replaced = workers_before != pool_workers(stack, pool)
        step.update(mode=self.mode, admission=self.admission, workers_replaced=replaced)
        if progress is not None:
            progress.note(
                f"overload {pool} {multiple:g}x ({self.mode}, {self.admission}): goodput "
                f"{step['goodput_rps']:.0f}/s of {load.capacity_rps:g}, shed {step['shed']} "
                f"(p99 {step['shed_p99_ms']} ms), 504 {step['timeouts']}"
            )
        return step


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
    arms = dict.fromkeys((s["admission"], s["mode"], s["pool"]) for s in steps)
    for admission, mode, pool in arms:
        mine = [
            s for s in steps if (s["admission"], s["mode"], s["pool"]) == (admission, mode, pool)
        ]
        if mine:
            over = [s for s in mine if s["multiple"] >= GOODPUT_FROM_MULTIPLE]
            worst = min((s["goodput_fraction"] for s in over), default=None)
            shed_p99 = [s["shed_p99_ms"] for s in mine if s["shed_p99_ms"] is not None]
            unhealthy = sum(s["health_check_failures"] + s["ejections"] for s in mine)
            replaced = sum(1 for s in mine if s["workers_replaced"])
            out += [
                {
                    "admission": admission,
                    "mode": mode,
                    "pool": pool,
                    "name": f"goodput at >= {GOODPUT_FROM_MULTIPLE:g}x capacity",
                    "target": f">= {GOODPUT_MIN_FRACTION:.0%} of capacity",
                    "measured": None if worst is None else f"{worst:.0%} (worst step)",
                    "met": worst is not None and worst >= GOODPUT_MIN_FRACTION,
                },
                {
                    "admission": admission,
                    "mode": mode,
                    "pool": pool,
                    "name": "shed answers, p99",
                    "target": f"<= {SHED_P99_MAX_MS:g} ms",
                    "measured": f"{max(shed_p99):.1f} ms (worst step)" if shed_p99 else "none shed",
                    "met": all(x <= SHED_P99_MAX_MS for x in shed_p99),
                },
                {
                    "admission": admission,
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
        f"{'pool':4} {'mode':8} {'admission':11} {'offered':>8} {'goodput':>8} {'shed':>6} "
        f"{'shed p99':>9} {'504':>5} {'CPU/req':>8} {'HC fail':>7} {'eject':>5}"
    ]
    for s in doc["steps"]:
        shed_p99 = "-" if s["shed_p99_ms"] is None else f"{s['shed_p99_ms']:.1f} ms"
        cpu = "-" if s["cpu_ms_per_request"] is None else f"{s['cpu_ms_per_request']:.2f} ms"
        lines.append(
            f"{s['pool']:4} {s['mode']:8} {s['admission']:11} {s['multiple']:>7g}x "
            f"{s['goodput_fraction']:>7.0%} {s['shed']:>6} {shed_p99:>9} {s['timeouts']:>5} "
            f"{cpu:>8} {s['health_check_failures']:>7} {s['ejections']:>5}"
        )
    for t in doc["targets"]:
        lines.append(
            f"{t['pool']} ({t['mode']}, {t['admission']}): {t['name']}: {t['measured']} "
            f"(target {t['target']}: {'met' if t['met'] else 'NOT met'})"
        )
    lines.append(f"wrote {out / 'overload.json'}")
    return "\n".join(lines)


# Envoy's adaptive concurrency (gradient controller): the limit follows the measured
# latency against a periodically re-measured minimum (minRTT, at min_concurrency).
ADAPTIVE_FILTER = {
    "name": "envoy.filters.http.adaptive_concurrency",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.adaptive_concurrency.v3."
        "AdaptiveConcurrency",
        "gradient_controller_config": {
            "sample_aggregate_percentile": {"value": 90},
            "concurrency_limit_params": {"concurrency_update_interval": "0.1s"},
            "min_rtt_calc_params": {
                "interval": "30s",
                "request_count": 50,
                "jitter": {"value": 10},
                "buffer": {"value": 25},
            },
        },
    },
}


def use_adaptive_concurrency(stack: Stack) -> None:
    """Swap the running stack's Envoy to adaptive concurrency: the filter before the
    router, every pool's breakers opened to its greenlets. Through the watched LDS/CDS
    files, as `routes apply` does; returns once Envoy runs the new listener."""
    directory = stack.xds_dir()
    lds = yaml.safe_load((directory / LDS_FILE).read_text())
    for listener in lds["resources"]:
        for chain in listener["filter_chains"]:
            for network_filter in chain["filters"]:
                filters = network_filter["typed_config"]["http_filters"]
                filters.insert(len(filters) - 1, ADAPTIVE_FILTER)
    cds = yaml.safe_load((directory / CDS_FILE).read_text())
    for cluster in cds["resources"]:
        name = cluster["name"].removesuffix("_pool")
        if cluster["name"] == cluster_name(name) and name in {p.name for p in stack.config.pools}:
            greenlets = stack.config.pool(name).capacity
            thresholds = cluster["circuit_breakers"]["thresholds"][0]
            thresholds["max_connections"] = thresholds["max_requests"] = greenlets
    lds["version_info"] += "-adaptive"
    cds["version_info"] += "-adaptive"
    dump = lambda doc: yaml.safe_dump(doc, sort_keys=False)  # noqa: E731
    write_xds(directory, {CDS_FILE: dump(cds), LDS_FILE: dump(lds)})
    version = xds_version(dump(lds))
    if not wait_until(lambda: stack.admin.listener_version() == version, 30, 0.1):
        raise RuntimeError("Envoy did not take the adaptive-concurrency listener")
